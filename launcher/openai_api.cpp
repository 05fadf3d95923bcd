#include "launcher/openai_api.h"

#include <cmath>
#include <limits>

#include "core/error.h"

namespace linnet::cli {

using nlohmann::json;

std::string ApiError::type() const {
  if (!type_.empty()) return type_;
  if (status_ == 404) return "NotFoundError";
  if (status_ == 503) return "ServiceUnavailableError";
  if (status_ >= 500) return "InternalServerError";
  return "BadRequestError";
}

json ApiError::body() const {
  return {{"error",
           {{"message", what()}, {"type", type()}, {"param", param_.empty() ? json(nullptr) : json(param_)},
            {"code", status_}}}};
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& why) { throw ApiError(400, why, param); }

// An integer that fits in int64 (huge unsigned values do not).
bool fits_i64(const json& v) {
  return v.is_number_integer() &&
         (!v.is_number_unsigned() || v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()));
}

int64_t integer(const json& b, const char* key, int64_t lo, int64_t hi, int64_t fallback, const std::string& rule) {
  if (!b.contains(key) || b[key].is_null()) return fallback;
  const json& v = b[key];
  if (!fits_i64(v) || v.get<int64_t>() < lo || v.get<int64_t>() > hi)
    bad(key, str("`", key, "` must be ", rule, ", got ", dump(v)));
  return v.get<int64_t>();
}

double number(const json& b, const char* key, double fallback) {
  if (!b.contains(key) || b[key].is_null()) return fallback;
  const json& v = b[key];
  if (!v.is_number() || !std::isfinite(v.get<double>())) bad(key, str("`", key, "` must be a number, got ", dump(v)));
  return v.get<double>();
}

bool boolean(const json& b, const char* key, bool fallback) {
  if (!b.contains(key) || b[key].is_null()) return fallback;
  if (!b[key].is_boolean()) bad(key, str("`", key, "` must be true or false, got ", dump(b[key])));
  return b[key].get<bool>();
}

// Keys that change the numbers and that linnet does not implement: refused, never ignored.
void refuse_unsupported(const json& b) {
  auto off = [&](const char* key, double neutral) {
    if (!b.contains(key) || b[key].is_null()) return;
    if (!b[key].is_number() || b[key].get<double>() != neutral)
      bad(key, str("`", key, "` = ", dump(b[key]), " is not supported by linnet serve (only ", neutral, ")"));
  };
  off("presence_penalty", 0);
  off("frequency_penalty", 0);
  off("repetition_penalty", 1);
  off("min_p", 0);
  off("min_tokens", 0);
  if (b.contains("logit_bias") && !b["logit_bias"].is_null() && !(b["logit_bias"].is_object() && b["logit_bias"].empty()))
    bad("logit_bias", "`logit_bias` is not supported by linnet serve");
  if (b.contains("suffix") && !b["suffix"].is_null() && b["suffix"] != "")
    bad("suffix", "`suffix` (insertion) is not supported by linnet serve");
  if (b.contains("best_of") && !b["best_of"].is_null() && b["best_of"] != 1 && b["best_of"] != b.value("n", json(1)))
    bad("best_of", str("`best_of` = ", dump(b["best_of"]), " is not supported by linnet serve (only best_of = n)"));
}

std::vector<int32_t> token_ids(const json& list, const std::string& where, int64_t vocab) {
  if (list.empty()) bad("prompt", str("`", where, "` is an empty list of token ids"));
  std::vector<int32_t> ids;
  for (size_t i = 0; i < list.size(); ++i) {
    const json& t = list[i];
    if (!fits_i64(t) || t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab)
      bad("prompt", str("`", where, "[", i, "]` = ", dump(t), " is not a token id in [0, Vocab=", vocab, ")"));
    ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return ids;
}

PromptIn text_prompt(const json& v, const std::string& where, const Tokenizer& tok, const ServedModel& m) {
  PromptIn p;
  p.is_text = true;
  p.text = v.get<std::string>();
  for (TokenId t : tok.encode(p.text, m.add_bos)) {
    if (t < 0 || t >= m.vocab)
      bad("prompt", str("`", where, "`: the tokenizer gives token id ", t, ", beyond the model's Vocab=", m.vocab,
                        " (the checkpoint's tokenizer and config disagree)"));
    p.ids.push_back(t);
  }
  if (p.ids.empty()) bad("prompt", str("`", where, "` has no tokens (an empty text and no BOS)"));
  return p;
}

std::vector<PromptIn> prompts(const json& b, const Tokenizer& tok, const ServedModel& m) {
  if (!b.contains("prompt") || b["prompt"].is_null()) bad("prompt", "`prompt` is required");
  const json& p = b["prompt"];
  std::vector<PromptIn> out;
  if (p.is_string()) {
    out.push_back(text_prompt(p, "prompt", tok, m));
  } else if (p.is_array() && !p.empty() && p[0].is_number()) {
    out.push_back(PromptIn{token_ids(p, "prompt", m.vocab), "", false});
  } else if (p.is_array() && !p.empty()) {
    if (static_cast<int64_t>(p.size()) > m.max_prompts)
      bad("prompt", str("`prompt` holds ", p.size(), " prompts; at most ", m.max_prompts, " in one request"));
    for (size_t i = 0; i < p.size(); ++i) {
      const std::string where = str("prompt[", i, "]");
      if (p[i].is_string()) out.push_back(text_prompt(p[i], where, tok, m));
      else if (p[i].is_array()) out.push_back(PromptIn{token_ids(p[i], where, m.vocab), "", false});
      else bad("prompt", str("`", where, "` must be a string or a list of token ids, got ", dump(p[i])));
    }
  } else {
    bad("prompt", "`prompt` must be a string, a list of strings, a list of token ids or a list of such lists");
  }
  return out;
}

}  // namespace

CompletionParams parse_completion(const json& b, const Tokenizer& tok, const ServedModel& m) {
  if (!b.is_object()) bad("", "the request body must be a JSON object");
  if (b.contains("model") && !b["model"].is_null()) {
    if (!b["model"].is_string()) bad("model", "`model` must be a string");
    if (b["model"].get<std::string>() != m.name)
      throw ApiError(404, str("The model `", b["model"].get<std::string>(), "` does not exist; this server serves `",
                              m.name, "`"), "model");
  }
  refuse_unsupported(b);
  CompletionParams c;
  c.n = integer(b, "n", 1, m.max_n, 1, str("an integer in [1, ", m.max_n, "]"));
  c.stream = boolean(b, "stream", false);
  c.echo = boolean(b, "echo", false);
  if (b.contains("stream_options") && !b["stream_options"].is_null()) {
    if (!b["stream_options"].is_object()) bad("stream_options", "`stream_options` must be an object");
    c.include_usage = boolean(b["stream_options"], "include_usage", false);
  }
  if (b.contains("logprobs") && b["logprobs"].is_boolean()) bad("logprobs", "`logprobs` must be an integer (how many likeliest tokens), got a boolean");
  c.logprobs = integer(b, "logprobs", 0, m.max_logprobs, -1, str("an integer in [0, ", m.max_logprobs, "]"));
  auto& s = c.sampling;
  s.temperature = static_cast<float>(number(b, "temperature", 1.0));
  if (s.temperature < 0) bad("temperature", str("`temperature` = ", s.temperature, " must be 0 (greedy) or more"));
  s.top_p = static_cast<float>(number(b, "top_p", 1.0));
  if (!(s.top_p > 0 && s.top_p <= 1)) bad("top_p", str("`top_p` = ", s.top_p, " must be in (0, 1]"));
  s.top_k = integer(b, "top_k", -1, std::numeric_limits<int32_t>::max(), 0, "-1 or 0 (off) or a positive integer");
  if (s.top_k < 0) s.top_k = 0;
  c.seeded = b.contains("seed") && !b["seed"].is_null();
  s.seed = static_cast<uint64_t>(integer(b, "seed", 0, std::numeric_limits<int64_t>::max(), 0, "a non-negative integer"));
  s.ignore_eos = boolean(b, "ignore_eos", false);
  if (b.contains("stop") && !b["stop"].is_null()) {
    const json& st = b["stop"];
    for (const json& x : st.is_array() ? st : json::array({st})) {
      if (!x.is_string() || x.get<std::string>().empty()) bad("stop", "`stop` must be a non-empty string or a list of them");
      c.stop.push_back(x.get<std::string>());
    }
    if (c.stop.size() > 16) bad("stop", str("`stop` has ", c.stop.size(), " strings; at most 16"));
  }
  c.prompts = prompts(b, tok, m);
  const bool given = b.contains("max_tokens") && !b["max_tokens"].is_null();
  const int64_t asked = integer(b, "max_tokens", 0, std::numeric_limits<int64_t>::max(), 16, "a non-negative integer");
  for (size_t i = 0; i < c.prompts.size(); ++i) {
    const int64_t len = static_cast<int64_t>(c.prompts[i].ids.size());
    const std::string which = c.prompts.size() > 1 ? str("prompt[", i, "]") : std::string("the prompt");
    int64_t max_new = asked;
    if (!given) max_new = std::max<int64_t>(0, std::min<int64_t>(asked, m.max_seq - len));
    if (len > m.max_seq || (len == m.max_seq && max_new > 0) || max_new > m.max_seq - len)
      bad(given ? "max_tokens" : "prompt",
          str(which, " (", len, " tokens) + max_tokens (", max_new, ") = ", len + max_new, " exceeds MaxSeq = ",
              m.max_seq, " (raise --max-seq or lower max_tokens)"));
    const int64_t need = (len + max_new + m.page_size - 1) / m.page_size;
    if (need > m.pages)
      bad("max_tokens", str(which, " + max_tokens needs ", need, " pages of ", m.page_size,
                            " positions, but the KV pool has ", m.pages, " (raise --kv-cache-memory)"));
    c.max_tokens.push_back(max_new);
  }
  s.max_new_tokens = asked;
  return c;
}

std::string token_text(const Tokenizer& tok, int32_t id) {
  bool at_start = false;
  std::string s;
  tok.decode_token(id, false, at_start, s);
  return s;
}

std::string echo_text(const Tokenizer& tok, const PromptIn& p) {
  return p.is_text ? p.text : tok.decode(std::span<const TokenId>(p.ids.data(), p.ids.size()), true);
}

json logprobs_json(const Tokenizer& tok, const PromptIn& prompt, const ChoiceResult& r, bool echo,
                   size_t first_generated, size_t text_offset) {
  std::vector<int32_t> all = prompt.ids;
  all.insert(all.end(), r.tokens.begin(), r.tokens.end());
  json tokens = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  const size_t from = echo ? 0 : prompt.ids.size() + first_generated;
  size_t offset = text_offset;
  for (size_t p = from; p < all.size(); ++p) {
    const std::string t = token_text(tok, all[p]);
    tokens.push_back(t);
    offsets.push_back(offset);
    offset += t.size();
    if (p == 0 || p - 1 >= r.token_logprobs.size()) {
      lps.push_back(nullptr);
      tops.push_back(nullptr);
      continue;
    }
    lps.push_back(r.token_logprobs[p - 1]);
    json top = json::object();
    if (p - 1 < r.top.size())
      for (const auto& [id, lp] : r.top[p - 1]) {
        const std::string key = token_text(tok, id);
        if (!top.contains(key)) top[key] = lp;  // two ids with one text: the likelier
      }
    tops.push_back(std::move(top));
  }
  return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

json completion_body(const std::string& id, int64_t created, const std::string& model, const CompletionParams& p,
                     const std::vector<ChoiceResult>& results, const Tokenizer& tok) {
  json choices = json::array();
  int64_t prompt_tokens = 0, completion_tokens = 0;
  for (const PromptIn& pr : p.prompts) prompt_tokens += static_cast<int64_t>(pr.ids.size());
  for (size_t i = 0; i < results.size(); ++i) {
    const ChoiceResult& r = results[i];
    const PromptIn& pr = p.prompts[i / static_cast<size_t>(p.n)];
    completion_tokens += static_cast<int64_t>(r.tokens.size());
    const std::string text = p.echo ? echo_text(tok, pr) + r.text : r.text;
    choices.push_back({{"index", i},
                       {"text", text},
                       {"logprobs", p.logprobs >= 0 ? logprobs_json(tok, pr, r, p.echo) : json(nullptr)},
                       {"finish_reason", r.finish_reason}});
  }
  return {{"id", id},
          {"object", "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", choices},
          {"usage",
           {{"prompt_tokens", prompt_tokens},
            {"completion_tokens", completion_tokens},
            {"total_tokens", prompt_tokens + completion_tokens}}}};
}

json stream_chunk(const std::string& id, int64_t created, const std::string& model, size_t index,
                  const std::string& text, const json& logprobs, const json& finish_reason) {
  return {{"id", id},
          {"object", "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", json::array({{{"index", index}, {"text", text}, {"logprobs", logprobs}, {"finish_reason", finish_reason}}})}};
}

}  // namespace linnet::cli
