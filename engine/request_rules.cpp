#include "engine/request_rules.h"

#include <cmath>
#include <limits>

namespace linnet::engine {

using nlohmann::json;

namespace {
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// An integer that fits in int64 (huge unsigned values do not).
bool fits_i64(const json& v) {
  return v.is_number_integer() &&
         (!v.is_number_unsigned() || v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()));
}
bool given(const json& j, const char* key) { return j.contains(key) && !j[key].is_null(); }
}  // namespace

int64_t read_integer(const json& j, const char* key, int64_t lo, int64_t hi, int64_t fallback, const std::string& rule) {
  if (!given(j, key)) return fallback;
  const json& v = j[key];
  if (!fits_i64(v) || v.get<int64_t>() < lo || v.get<int64_t>() > hi)
    throw FieldError(key, str("`", key, "` must be ", rule, ", got ", dump(v)));
  return v.get<int64_t>();
}

double read_number(const json& j, const char* key, double fallback) {
  if (!given(j, key)) return fallback;
  const json& v = j[key];
  if (!v.is_number() || !std::isfinite(v.get<double>()))
    throw FieldError(key, str("`", key, "` must be a number, got ", dump(v)));
  return v.get<double>();
}

bool read_boolean(const json& j, const char* key, bool fallback) {
  if (!given(j, key)) return fallback;
  if (!j[key].is_boolean()) throw FieldError(key, str("`", key, "` must be true or false, got ", dump(j[key])));
  return j[key].get<bool>();
}

SamplingFields read_sampling(const json& j, SamplingFields s) {
  SamplingParams& p = s.params;
  p.temperature = static_cast<float>(read_number(j, "temperature", p.temperature));
  if (p.temperature < 0)
    throw FieldError("temperature", str("`temperature` = ", p.temperature, " must be 0 (greedy) or more"));
  p.top_p = static_cast<float>(read_number(j, "top_p", p.top_p));
  if (!(p.top_p > 0 && p.top_p <= 1)) throw FieldError("top_p", str("`top_p` = ", p.top_p, " must be in (0, 1]"));
  p.top_k = read_integer(j, "top_k", -1, std::numeric_limits<int32_t>::max(), p.top_k,
                         "-1 or 0 (off) or a positive integer");
  if (p.top_k < 0) p.top_k = 0;
  if (given(j, "seed")) {
    s.seeded = true;
    p.seed = static_cast<uint64_t>(
        read_integer(j, "seed", 0, std::numeric_limits<int64_t>::max(), 0, "a non-negative integer"));
  }
  p.ignore_eos = read_boolean(j, "ignore_eos", p.ignore_eos);
  if (given(j, "stop")) {
    const json& st = j["stop"];
    s.stop.clear();
    for (const json& x : st.is_array() ? st : json::array({st})) {
      if (!x.is_string() || x.get<std::string>().empty())
        throw FieldError("stop", "`stop` must be a non-empty string or a list of them");
      s.stop.push_back(x.get<std::string>());
    }
    if (s.stop.size() > 16) throw FieldError("stop", str("`stop` has ", s.stop.size(), " strings; at most 16"));
  }
  return s;
}

std::vector<int32_t> encode_text(const Tokenizer& tok, std::string_view text, bool add_bos, int64_t vocab,
                                 const std::string& where) {
  std::vector<int32_t> ids;
  for (TokenId t : tok.encode(text, add_bos)) {
    if (t < 0 || t >= vocab)
      throw FieldError("prompt", str("`", where, "`: the tokenizer gives token id ", t, ", beyond the model's Vocab=",
                                     vocab, " (the checkpoint's tokenizer and config disagree)"));
    ids.push_back(t);
  }
  return ids;
}

std::vector<int32_t> token_ids(const json& list, const std::string& where, int64_t vocab) {
  if (!list.is_array()) throw FieldError("prompt", str("`", where, "` must be a list of token ids"));
  if (list.empty()) throw FieldError("prompt", str("`", where, "` is an empty list of token ids"));
  std::vector<int32_t> ids;
  for (size_t i = 0; i < list.size(); ++i) {
    const json& t = list[i];
    if (!fits_i64(t) || t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab)
      throw FieldError("prompt", str("`", where, "[", i, "]` = ", dump(t), " is not a token id in [0, Vocab=", vocab, ")"));
    ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return ids;
}

std::string admission_problem(int64_t n, int64_t m, const PoolLimits& pool, const std::string& which,
                              const std::string& key) {
  if (n > pool.max_seq || m > pool.max_seq - n)
    return str(which, " (", n, " tokens) + ", key, " (", m, ") = ", n + m, " exceeds MaxSeq = ", pool.max_seq,
               " (raise --max-seq or lower ", key, ")");
  const int64_t need = (n + m + pool.page_size - 1) / pool.page_size;
  if (need > pool.pages)
    return str(which, " + ", key, " needs ", need, " pages of ", pool.page_size, " positions, but the KV pool has ",
               pool.pages, " (raise --kv-cache-memory)");
  return "";
}

int64_t default_max_new(int64_t prompt_len, int64_t cap, const PoolLimits& pool) {
  return std::max<int64_t>(0, std::min<int64_t>(cap, pool.max_seq - prompt_len));
}

std::vector<int32_t> end_of_sequence_ids(const ModelConfig& config, const Tokenizer& tok) {
  std::vector<int32_t> eos(config.eos_token_ids.begin(), config.eos_token_ids.end());
  if (eos.empty() && tok.eos_id() >= 0) eos.push_back(tok.eos_id());
  return eos;
}

}  // namespace linnet::engine
