// linnet eval: log-likelihoods as lm-evaluation-harness's hf backend computes them — rolling
// over whole texts (perplexity) and of continuations after a context (multiple choice) —
// scored in packed token budgets (engine/evaluator.h), written in input order (docs/usage.md).
#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <cstdio>

#include "engine/evaluator.h"
#include "engine/request_rules.h"
#include "launcher/job_io.h"
#include "launcher/options.h"
#include "launcher/model_command.h"
#include "tokenizer/tokenizer.h"

namespace linnet::cli {

namespace {

using nlohmann::json;

// One input line's work: a text scored whole (rolling), or continuations after a context.
struct Task {
  bool rolling = false;
  bool listed = false;                // continuation given as a list (multiple choice)
  std::vector<size_t> windows;        // its windows, in order (one per continuation, or the text's)
  std::vector<size_t> per_choice;     // rolling: unused; else the window of each continuation
  int64_t words = 0, bytes = 0;       // rolling: lm-eval's counts of the text
};

// A list of token ids (empty: an empty context) under the shared rule.
std::vector<int32_t> ids_of(const json& v, const std::string& what, int64_t vocab) {
  if (v.is_array() && v.empty()) return {};
  return engine::token_ids(v, what, vocab);
}

// How lm-eval's hf backend encodes (HFLM.tok_encode): with the tokenizer's own special tokens
// — BOS where the checkpoint's tokenizer adds it — unless the text starts with BOS's text.
struct Encoder {
  const Tokenizer& tok;
  bool add_bos;
  std::string bos_text;
  int64_t vocab;
  std::vector<int32_t> operator()(const std::string& s, bool special = true) const {
    const bool bos = special && add_bos && !(!bos_text.empty() && s.rfind(bos_text, 0) == 0);
    return engine::encode_text(tok, s, bos, vocab, "text");
  }
};

// Python's str.isspace() for one UTF-8 character at s[i] (its byte length in `len`): what
// lm-eval's re.split(r"\s+") and str.rstrip() take for whitespace.
bool python_space(const std::string& s, size_t i, size_t& len) {
  const auto b = [&](size_t k) { return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : 0u; };
  len = 1;
  const unsigned c = b(0);
  if (c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f)) return true;
  if (c == 0xc2 && (b(1) == 0x85 || b(1) == 0xa0)) return len = 2, true;
  if (c == 0xe1 && b(1) == 0x9a && b(2) == 0x80) return len = 3, true;                       // U+1680
  if (c == 0xe2 && b(1) == 0x80 && ((b(2) >= 0x80 && b(2) <= 0x8a) || b(2) == 0xa8 || b(2) == 0xa9 || b(2) == 0xaf))
    return len = 3, true;                                                                      // U+2000–200A, 2028, 2029, 202F
  if (c == 0xe2 && b(1) == 0x81 && b(2) == 0x9f) return len = 3, true;                       // U+205F
  if (c == 0xe3 && b(1) == 0x80 && b(2) == 0x80) return len = 3, true;                       // U+3000
  return false;
}

// lm-eval's word count: len(re.split(r"\s+", doc)) — runs of whitespace split; an empty
// piece at either end counts.
int64_t lm_eval_words(const std::string& s) {
  int64_t n = 1;
  bool in_space = false;
  for (size_t i = 0, len = 1; i < s.size(); i += len) {
    const bool sp = python_space(s, i, len);
    if (sp && !in_space) ++n;
    in_space = sp;
  }
  return n;
}

// s without its trailing whitespace (str.rstrip()).
size_t rstrip_length(const std::string& s) {
  size_t keep = 0;
  for (size_t i = 0, len = 1; i < s.size(); i += len)
    if (!python_space(s, i, len)) keep = i + len;
  return keep;
}

// The windows of one line. Context/continuation text is split as lm-eval's _encode_pair does:
// the context's trailing spaces go to the continuation, the pair is encoded whole, and the
// continuation is what follows the context's own encoding.
Task make_task(const json& j, size_t request, std::vector<engine::Window>& windows, const Encoder& encode,
               int32_t prefix, int64_t max_len, int64_t vocab) {
  Task t;
  const bool text = j.contains("text"), pair = j.contains("context") || j.contains("continuation");
  const bool ids = j.contains("context_tokens") || j.contains("continuation_tokens");
  if (text + pair + ids != 1)
    throw Error("give \"text\", or \"context\" + \"continuation\", or \"context_tokens\" + \"continuation_tokens\"");
  if (text) {
    if (!j["text"].is_string() || j["text"].get<std::string>().empty()) throw Error("\"text\" must be a non-empty string");
    const std::string s = j["text"].get<std::string>();
    const auto tokens = encode(s);
    if (tokens.empty()) throw Error("\"text\" has no tokens");
    t.rolling = true;
    t.words = lm_eval_words(s);
    t.bytes = static_cast<int64_t>(s.size());
    for (auto& w : engine::rolling_windows(request, tokens, prefix, max_len)) {
      t.windows.push_back(windows.size());
      windows.push_back(std::move(w));
    }
    return t;
  }
  const char* ckey = pair ? "context" : "context_tokens";
  const char* kkey = pair ? "continuation" : "continuation_tokens";
  if (!j.contains(ckey) || !j.contains(kkey)) throw Error(str("\"", ckey, "\" needs \"", kkey, "\" beside it"));
  const json& conts = j[kkey];
  t.listed = pair ? conts.is_array() : (conts.is_array() && !conts.empty() && conts[0].is_array());
  const json list = t.listed ? conts : json::array({conts});
  if (list.empty()) throw Error(str("\"", kkey, "\" is an empty list"));
  for (const json& c : list) {
    std::vector<int32_t> context, continuation;
    if (pair) {
      if (!j[ckey].is_string()) throw Error("\"context\" must be a string");
      if (!c.is_string() || c.get<std::string>().empty()) throw Error("a continuation must be a non-empty string");
      std::string ctx = j[ckey].get<std::string>(), cont = c.get<std::string>();
      if (ctx.empty()) {
        // An empty context is the prefix token (TemplateLM.loglikelihood), and the
        // continuation is encoded without special tokens; when it starts with the prefix
        // itself, that first token is the context.
        continuation = encode(cont, false);
        if (!continuation.empty() && continuation[0] == prefix) {
          context = {prefix};
          continuation.erase(continuation.begin());
        }
      } else {
        const size_t keep = rstrip_length(ctx);
        cont = ctx.substr(keep) + cont;
        ctx.resize(keep);
        const auto whole = encode(ctx + cont);
        context = encode(ctx);
        if (context.size() > whole.size()) throw Error("the context encodes longer than context + continuation");
        continuation.assign(whole.begin() + static_cast<std::ptrdiff_t>(context.size()), whole.end());
      }
    } else {
      context = ids_of(j[ckey], ckey, vocab);
      continuation = ids_of(c, kkey, vocab);
    }
    if (continuation.empty()) throw Error("a continuation has no tokens of its own");
    t.per_choice.push_back(windows.size());
    t.windows.push_back(windows.size());
    windows.push_back(engine::continuation_window(request, std::move(context), continuation, prefix, max_len));
  }
  return t;
}

}  // namespace

int cmd_eval(const Args& args) {
  po::options_description desc("linnet eval");
  desc.add_options()
      ("checkpoint", po::value<std::string>()->required(), "Hugging Face checkpoint directory (with its tokenizer)")
      ("data", po::value<std::string>()->required(), "IN.jsonl: {\"text\"} or {\"context\", \"continuation\"} lines")
      ("output", po::value<std::string>()->required(), "OUT.jsonl: one result per line, in input order")
      ("max-length", po::value<int64_t>()->default_value(0),
       "tokens a window holds (0: max_position_embeddings, as lm-eval's max_length)")
      ("prefix-token", po::value<int64_t>(),
       "the token before a text's first window, and an empty context (default: BOS, else EOS, as lm-eval)")
      ("max-batch-tokens", po::value<int64_t>()->default_value(2048), "tokens per packed call")
      ("on-error", po::value<std::string>()->default_value("stop"), "a bad input line: stop (before any work) or skip")
      ("backend", po::value<std::string>()->default_value("auto"), "cpu, cuda or auto")
      ("tp", po::value<int>()->default_value(0), "ranks per model replica (default: all ranks)");
  add_output_options(desc);
  add_progress_option(desc);
  add_bos_option(desc);
  add_run_options(desc);
  po::variables_map vm;
  if (!parse(args, desc, vm, "linnet eval"))
    return 0;
  const OnError on_error = on_error_option(vm["on-error"].as<std::string>());
  const int64_t budget = positive_option(vm, "max-batch-tokens");
  ModelCommand cmd = ModelCommand::open(vm, true);
  Ranks& ranks = *cmd.ranks;
  const ModelConfig& config = cmd.config;
  const Tokenizer* tok = cmd.tok.get();
  const ProgressOutput progress_to = progress_output(vm, ranks);
  const std::string& dir = cmd.source;
  const std::string in_path = vm["data"].as<std::string>();
  const int64_t max_len = vm["max-length"].as<int64_t>() > 0 ? vm["max-length"].as<int64_t>() : config.max_position;
  int64_t prefix = 0;
  if (vm.count("prefix-token")) {
    prefix = vm["prefix-token"].as<int64_t>();
    if (prefix >= config.vocab)
      throw UsageError(str("--prefix-token ", prefix, " is not a token id in [0, Vocab=", config.vocab, ")"));
  } else {
    prefix = tok->bos_id() >= 0 ? tok->bos_id() : tok->eos_id();
    if (prefix < 0)
      throw UsageError(str("--prefix-token: the tokenizer has neither BOS nor EOS; give an id in [0, ", config.vocab, ")"));
    if (prefix >= config.vocab)
      throw Error(str("the tokenizer's ", tok->bos_id() >= 0 ? "BOS" : "EOS", " id ", prefix,
                      " is beyond the model's Vocab=", config.vocab, " (the checkpoint's tokenizer and config disagree)"));
  }
  const TokenId bos = tok->bos_id();
  const Encoder encoder{*tok, add_bos_from(vm, dir, *tok), bos >= 0 ? tok->decode(std::vector<TokenId>{bos}) : "",
                        config.vocab};
  auto lines = read_job_input(in_path, ranks, {"id", "text", "context", "continuation", "context_tokens", "continuation_tokens"});
  std::vector<engine::Window> windows;
  std::vector<Task> tasks(lines.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    if (!lines[i].error.empty()) continue;
    const size_t first = windows.size();
    try {
      tasks[i] = make_task(lines[i].value, i, windows, encoder, static_cast<int32_t>(prefix), max_len, config.vocab);
    } catch (const Error& e) {
      windows.resize(first);
      lines[i].error = str(in_path, ":", lines[i].line, ": ", e.what());
    }
  }
  report_input_errors(in_path, lines, on_error, ranks.world_rank() == 0);
  JobOutput out(vm["output"].as<std::string>(), in_path, output_policy(vm), ranks, lines);

  // This replica's windows, in its lines' order. The model needs no cache for packed scoring:
  // the smallest one (MaxSeq = PageSize) is bound, windows are positions 0 … max_len − 1.
  std::vector<engine::Window> mine;
  std::vector<std::vector<size_t>> where(lines.size());  // line → its windows in `mine`
  for (size_t i : out.mine())
    for (size_t w : tasks[i].windows) {
      where[i].push_back(mine.size());
      mine.push_back(windows[w]);
    }
  cmd.options.batch = 1;
  if (cmd.options.max_seq == 0) cmd.options.max_seq = cmd.options.page_size;
  LoadedModel loaded = cmd.load();
  engine::Evaluator evaluator(*loaded.model, std::max(budget, max_len));

  // Progress counts lines as they are written and the tokens the model reads (a window's
  // context and scored tokens: what its time goes with).
  std::vector<int64_t> read_before(mine.size() + 1, 0);  // tokens of mine[0, w)
  for (size_t w = 0; w < mine.size(); ++w)
    read_before[w + 1] = read_before[w] + static_cast<int64_t>(mine[w].context.size() + mine[w].scored.size());
  Progress progress("eval", "documents", out.mine().size(), read_before.back(), progress_to);
  const auto& order = out.mine();
  size_t next_line = 0;  // lines of mine() written so far
  int64_t scored_tokens = 0;
  std::vector<engine::WindowScore> scores;
  auto emit_ready = [&](size_t done_windows) {
    for (; next_line < order.size(); ++next_line) {
      const size_t i = order[next_line];
      if (!lines[i].error.empty()) {
        out.put(i, nlohmann::ordered_json{{"id", lines[i].id}, {"error", lines[i].error}});
        progress.finished(0, 0);
        continue;
      }
      if (!where[i].empty() && where[i].back() >= done_windows) break;
      int64_t read = 0;
      for (size_t w : where[i]) read += read_before[w + 1] - read_before[w];
      progress.finished(read, read);
      const Task& t = tasks[i];
      nlohmann::ordered_json r = {{"id", lines[i].id}};
      if (t.rolling) {
        double ll = 0;
        int64_t n = 0;
        for (size_t w : where[i]) ll += scores[w].loglikelihood, n += scores[w].tokens;
        r["loglikelihood"] = ll;
        r["tokens"] = n;
        r["words"] = t.words;
        r["bytes"] = t.bytes;
        r["word_perplexity"] = std::exp(-ll / static_cast<double>(t.words));
        r["byte_perplexity"] = std::exp(-ll / static_cast<double>(t.bytes));
        r["bits_per_byte"] = -ll / static_cast<double>(t.bytes) / std::log(2.0);
        scored_tokens += n;
      } else {
        nlohmann::ordered_json ll = nlohmann::ordered_json::array(), n = ll, greedy = ll;
        for (size_t w : where[i]) {
          ll.push_back(scores[w].loglikelihood);
          n.push_back(scores[w].tokens);
          greedy.push_back(scores[w].greedy);
          scored_tokens += scores[w].tokens;
        }
        r["loglikelihood"] = t.listed ? ll : ll[0];
        r["tokens"] = t.listed ? n : n[0];
        r["is_greedy"] = t.listed ? greedy : greedy[0];
      }
      out.put(i, r);
    }
    progress.update(read_before[done_windows]);
  };
  const auto t0 = std::chrono::steady_clock::now();
  evaluator.score(mine, scores, emit_ready);
  emit_ready(mine.size());
  progress.end();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  spdlog::info("replica {}: {} windows in {} packed calls, {} tokens scored, {:.2f} s", ranks.replica(), mine.size(),
               evaluator.calls(), scored_tokens, seconds);
  out.finish();
  int64_t errors = 0;
  if (ranks.world_rank() == 0) {
    // Over every line this run scored: lm-eval's aggregates (weighted by tokens, words, bytes).
    double ll = 0, rolling_ll = 0;
    int64_t docs = 0, tokens = 0, words = 0, bytes = 0;
    std::FILE* summary = out.summary_stream();
    for (const json& r : out.results_of_this_run()) {
      if (r.contains("error")) {
        ++errors;
        continue;
      }
      ++docs;
      const auto sum = [](const json& v) {
        double s = 0;
        for (const json& x : v.is_array() ? v : json::array({v})) s += x.get<double>();
        return s;
      };
      ll += sum(r["loglikelihood"]);
      tokens += static_cast<int64_t>(sum(r["tokens"]));
      if (r.contains("words")) {
        rolling_ll += r["loglikelihood"].get<double>();
        words += r["words"].get<int64_t>();
        bytes += r["bytes"].get<int64_t>();
      }
    }
    const double nll = tokens ? -ll / static_cast<double>(tokens) : 0;
    std::fprintf(summary, "eval: %lld documents (%lld errors, %zu already done), %lld tokens scored in %.2f s (%.1f tok/s): "
                "mean NLL %.6f, perplexity %.4f",
                static_cast<long long>(docs), static_cast<long long>(errors), out.skipped_done(),
                static_cast<long long>(tokens), seconds, static_cast<double>(scored_tokens) / seconds, nll, std::exp(nll));
    if (words > 0)
      std::fprintf(summary, "; rolling: word_perplexity %.4f, byte_perplexity %.4f, bits_per_byte %.6f",
                  std::exp(-rolling_ll / static_cast<double>(words)), std::exp(-rolling_ll / static_cast<double>(bytes)),
                  -rolling_ll / static_cast<double>(bytes) / std::log(2.0));
    std::fprintf(summary, "\n");
    if (errors) spdlog::error("{} of the lines ended in an error (their lines in {} say why); exit code {}", errors,
                              vm["output"].as<std::string>(), kExitSomeLinesFailed);
  }
  return errors ? kExitSomeLinesFailed : 0;
}

}  // namespace linnet::cli
