#include "engine/request_rules.h"

#include <algorithm>
#include <cmath>
#include <map>
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

SamplingFields read_sampling(const json& j, SamplingFields s, const Tokenizer* tok, int64_t vocab) {
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
  p.min_p = static_cast<float>(read_number(j, "min_p", p.min_p));
  if (!(p.min_p >= 0 && p.min_p <= 1)) throw FieldError("min_p", str("`min_p` = ", p.min_p, " must be in [0, 1]"));
  p.ignore_eos = read_boolean(j, "ignore_eos", p.ignore_eos);
  p.repetition_penalty = static_cast<float>(read_number(j, "repetition_penalty", p.repetition_penalty));
  if (!(p.repetition_penalty > 0))
    throw FieldError("repetition_penalty", str("`repetition_penalty` = ", p.repetition_penalty, " must be above 0"));
  for (auto [key, value] : {std::pair<const char*, float*>{"presence_penalty", &p.presence_penalty},
                            {"frequency_penalty", &p.frequency_penalty}}) {
    *value = static_cast<float>(read_number(j, key, *value));
    if (!(*value >= -2 && *value <= 2)) throw FieldError(key, str("`", key, "` = ", *value, " must be in [-2, 2]"));
  }
  p.min_tokens = read_integer(j, "min_tokens", 0, std::numeric_limits<int64_t>::max(), p.min_tokens,
                              "a non-negative integer");
  p.priority = read_integer(j, "priority", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(),
                            p.priority, "an integer");
  s.include_stop_str = read_boolean(j, "include_stop_str_in_output", s.include_stop_str);
  s.skip_special = read_boolean(j, "skip_special_tokens", s.skip_special);
  // Only a slow tokenizer's decode reads it (vLLM's fast-tokenizer detokenizer does not, nor
  // linnet's): checked, and has no effect.
  (void)read_boolean(j, "spaces_between_special_tokens", true);
  auto token_id = [&](const json& v, const std::string& where, const char* field) {
    if (!fits_i64(v) || v.get<int64_t>() < 0 || v.get<int64_t>() >= vocab)
      throw FieldError(field, str("`", where, "` = ", dump(v), " is not a token id in [0, Vocab=", vocab, ")"));
    return static_cast<int32_t>(v.get<int64_t>());
  };
  if (given(j, "stop_token_ids")) {
    const json& v = j["stop_token_ids"];
    if (!v.is_array()) throw FieldError("stop_token_ids", "`stop_token_ids` must be a list of token ids");
    p.stop_token_ids.clear();
    for (size_t i = 0; i < v.size(); ++i)
      p.stop_token_ids.push_back(token_id(v[i], str("stop_token_ids[", i, "]"), "stop_token_ids"));
  }
  if (given(j, "logit_bias")) {
    const json& v = j["logit_bias"];
    if (!v.is_object()) throw FieldError("logit_bias", "`logit_bias` must be an object of token id → bias");
    std::map<int32_t, float> bias;
    for (const auto& [key, b] : v.items()) {
      json id;
      try {
        size_t used = 0;
        id = std::stoll(key, &used);
        if (used != key.size()) id = key;
      } catch (const std::exception&) {
        id = key;
      }
      const int32_t t = token_id(id, str("logit_bias[\"", key, "\"]"), "logit_bias");
      if (!b.is_number() || !std::isfinite(b.get<double>()))
        throw FieldError("logit_bias", str("`logit_bias[\"", key, "\"]` must be a number, got ", dump(b)));
      bias[t] = static_cast<float>(std::clamp(b.get<double>(), -100.0, 100.0));  // OpenAI's and vLLM's range
    }
    p.logit_bias.assign(bias.begin(), bias.end());
  }
  if (given(j, "bad_words")) {
    const json& v = j["bad_words"];
    if (!v.is_array()) throw FieldError("bad_words", "`bad_words` must be a list of strings");
    if (!tok) throw FieldError("bad_words", "`bad_words` needs the checkpoint's tokenizer");
    p.bad_words.clear();
    for (size_t i = 0; i < v.size(); ++i) {
      if (!v[i].is_string() || v[i].get<std::string>().empty())
        throw FieldError("bad_words", str("`bad_words[", i, "]` must be a non-empty string"));
      // As vLLM: the word as written (leading spaces dropped), and with one space before it
      // when that makes the same number of ids starting with another (a word mid-text).
      std::string word = v[i].get<std::string>();
      word.erase(0, word.find_first_not_of(' '));
      if (word.empty()) throw FieldError("bad_words", str("`bad_words[", i, "]` is only spaces"));
      const auto plain = encode_text(*tok, word, false, vocab, str("bad_words[", i, "]"));
      const auto spaced = encode_text(*tok, " " + word, false, vocab, str("bad_words[", i, "]"));
      if (!plain.empty()) p.bad_words.push_back(plain);
      if (!spaced.empty() && spaced.size() == plain.size() && spaced[0] != plain[0]) p.bad_words.push_back(spaced);
    }
  }
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

void check_min_tokens(const SamplingParams& p, const std::string& key) {
  if (p.min_tokens > p.max_new_tokens)
    throw FieldError("min_tokens", str("`min_tokens` = ", p.min_tokens, " must not exceed `", key, "` = ",
                                       p.max_new_tokens));
}

void truncate_prompt(const json& j, std::vector<int32_t>& ids, int64_t max_seq) {
  const int64_t k = read_integer(j, "truncate_prompt_tokens", -1, std::numeric_limits<int64_t>::max(), 0,
                                 "-1 (as many as MaxSeq holds) or a positive integer");
  if (!given(j, "truncate_prompt_tokens")) return;
  if (k == 0) throw FieldError("truncate_prompt_tokens", "`truncate_prompt_tokens` must be -1 or a positive integer, got 0");
  const size_t keep = static_cast<size_t>(k < 0 ? max_seq : k);
  if (ids.size() > keep) ids.erase(ids.begin(), ids.end() - static_cast<std::ptrdiff_t>(keep));  // vLLM keeps the end
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
