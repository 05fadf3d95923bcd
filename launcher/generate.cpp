// linnet generate: completions for a file of prompts, by continuous batching on the paged
// cache (engine/), in input order, line by line (docs/usage.md).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>

#include "checkpoint/checkpoint_weights.h"
#include "checkpoint/hf_config.h"
#include "engine/generator.h"
#include "launcher/job_io.h"
#include "launcher/kv_memory.h"
#include "launcher/options.h"
#include "launcher/ranks.h"
#include "launcher/stop_text.h"
#include "tokenizer/tokenizer.h"

namespace linnet::cli {

namespace {

using nlohmann::json;
using engine::Request;
using engine::SamplingParams;

// A prompt line made into a request; throws Error naming the line and what is wrong.
struct Prompt {
  Request request;
  std::vector<std::string> stop;
};

// max_seq_fit > 0: max_new_tokens was not given anywhere, so it is at most what fits in
// MaxSeq after the prompt (as vLLM does when max_tokens is left out).
Prompt make_prompt(const InputLine& in, const std::string& where, const SamplingParams& defaults,
                   const std::vector<std::string>& default_stop, const Tokenizer& tok, bool add_bos, int64_t vocab,
                   int64_t max_seq_fit) {
  const json& j = in.value;
  Prompt p;
  p.request.params = defaults;
  p.stop = default_stop;
  auto fail = [&](const std::string& why) -> void { throw Error(str(where, ": ", why)); };
  if (j.contains("text") == j.contains("tokens")) fail("give exactly one of \"text\" and \"tokens\"");
  if (j.contains("text")) {
    if (!j["text"].is_string()) fail("\"text\" must be a string");
    const std::string text = j["text"].get<std::string>();
    if (text.empty()) fail("\"text\" is empty");
    for (TokenId t : tok.encode(text, add_bos)) {
      if (t < 0 || t >= vocab)
        fail(str("the tokenizer gives token id ", t, ", beyond the model's Vocab=", vocab,
                 " (the checkpoint's tokenizer and config disagree)"));
      p.request.prompt.push_back(t);
    }
  } else {
    if (!j["tokens"].is_array() || j["tokens"].empty()) fail("\"tokens\" must be a non-empty list of token ids");
    for (size_t i = 0; i < j["tokens"].size(); ++i) {
      const json& t = j["tokens"][i];
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab ||
          (t.is_number_unsigned() && t.get<uint64_t>() >= static_cast<uint64_t>(vocab)))
        fail(str("tokens[", i, "] = ", t.dump(), " is not a token id in [0, Vocab=", vocab, ")"));
      p.request.prompt.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
  }
  if (p.request.prompt.empty()) fail("the prompt has no tokens");
  SamplingParams& s = p.request.params;
  if (max_seq_fit > 0 && !j.contains("max_new_tokens"))
    s.max_new_tokens = std::max<int64_t>(1, std::min(s.max_new_tokens, max_seq_fit - static_cast<int64_t>(p.request.prompt.size())));
  if (j.contains("max_new_tokens")) {
    if (!j["max_new_tokens"].is_number_integer() || j["max_new_tokens"].get<int64_t>() < 1)
      fail(str("\"max_new_tokens\" must be a positive integer, got ", j["max_new_tokens"].dump()));
    s.max_new_tokens = j["max_new_tokens"].get<int64_t>();
  }
  auto number = [&](const char* key, float& v) {
    if (!j.contains(key)) return;
    if (!j[key].is_number() || !std::isfinite(j[key].get<double>())) fail(str("\"", key, "\" must be a number"));
    v = j[key].get<float>();
  };
  number("temperature", s.temperature);
  number("top_p", s.top_p);
  if (s.temperature < 0) fail(str("\"temperature\" = ", s.temperature, " must be 0 (greedy) or more"));
  if (!(s.top_p > 0 && s.top_p <= 1)) fail(str("\"top_p\" = ", s.top_p, " must be in (0, 1]"));
  if (j.contains("top_k")) {
    if (!j["top_k"].is_number_integer() || j["top_k"].get<int64_t>() < 0)
      fail(str("\"top_k\" must be 0 (off) or a positive integer, got ", j["top_k"].dump()));
    s.top_k = j["top_k"].get<int64_t>();
  }
  if (j.contains("seed")) {
    if (!j["seed"].is_number_integer() || (!j["seed"].is_number_unsigned() && j["seed"].get<int64_t>() < 0))
      fail(str("\"seed\" must be a non-negative integer, got ", j["seed"].dump()));
    s.seed = j["seed"].get<uint64_t>();
  }
  if (j.contains("ignore_eos")) {
    if (!j["ignore_eos"].is_boolean()) fail("\"ignore_eos\" must be true or false");
    s.ignore_eos = j["ignore_eos"].get<bool>();
  }
  if (j.contains("stop")) {
    const json& st = j["stop"];
    p.stop.clear();
    for (const json& x : st.is_array() ? st : json::array({st})) {
      if (!x.is_string() || x.get<std::string>().empty()) fail("\"stop\" must be a non-empty string or a list of them");
      p.stop.push_back(x.get<std::string>());
    }
  }
  return p;
}

// The text of a request as it is generated, for stop strings: decoded incrementally (special
// tokens, such as an end-of-sequence, give no text), cut where a stop string starts.
struct StopText {
  Decoder decoder;
  std::string text;
  std::vector<std::string> stop;
  bool stopped = false;
};

}  // namespace

int cmd_generate(const Args& args) {
  po::options_description desc("linnet generate");
  desc.add_options()
      ("checkpoint", po::value<std::string>()->required(), "Hugging Face checkpoint directory (with its tokenizer)")
      ("prompts", po::value<std::string>()->required(), "IN.jsonl: one {\"text\": …} or {\"tokens\": […]} per line")
      ("output", po::value<std::string>()->required(), "OUT.jsonl: one result per prompt, in input order")
      ("max-new-tokens", po::value<int64_t>()->default_value(256),
       "tokens to generate at most, per prompt (unset: 256, or what fits in MaxSeq)")
      ("temperature", po::value<float>()->default_value(0), "0: greedy; > 0: sampling")
      ("top-k", po::value<int64_t>()->default_value(0), "sample among the k most likely tokens (0: all)")
      ("top-p", po::value<float>()->default_value(1), "sample within the smallest set of probability ≥ p (1: all)")
      ("seed", po::value<uint64_t>()->default_value(0), "sampling seed (a prompt's own \"seed\" overrides it)")
      ("stop", po::value<std::vector<std::string>>()->composing(), "stop at this string (repeatable)")
      ("ignore-eos", "do not stop at end-of-sequence tokens (benchmarks)")
      ("on-error", po::value<std::string>()->default_value("stop"), "a bad input line: stop (before any work) or skip")
      ("kv-cache-memory", po::value<std::string>()->default_value("0.8"),
       "KV pool: bytes (e.g. 2GiB) or a fraction of the memory free after the weights")
      ("max-batch-tokens", po::value<int64_t>()->default_value(512), "tokens per step (prefill chunks + decoding rows)")
      ("max-rows", po::value<int64_t>()->default_value(256), "requests running at once")
      ("backend", po::value<std::string>()->default_value("auto"), "cpu, cuda or auto")
      ("tp", po::value<int>()->default_value(0), "ranks per model replica (default: all ranks)");
  add_output_options(desc);
  add_bos_option(desc);
  add_run_options(desc);
  po::variables_map vm;
  if (!parse(args, desc, vm,
             "linnet generate --checkpoint DIR --prompts IN.jsonl --output OUT.jsonl [--max-new-tokens N] "
             "[--temperature T] [--top-k K] [--top-p P] [--seed S] [--stop STR]… [--ignore-eos] [--resume [--resume-keep-errors] | --overwrite] "
             "[--on-error stop|skip] [--add-bos auto|yes|no] [--kv-cache-memory M] [--max-batch-tokens N] [--max-rows N] [--max-seq S] "
             "[--page-size P] [--shards N] [--dtype T] [--backend cpu|cuda|auto] [--tp K] [--threads N] [--quiet]"))
    return 0;
  SamplingParams defaults;
  defaults.max_new_tokens = positive_option(vm, "max-new-tokens");
  defaults.temperature = vm["temperature"].as<float>();
  defaults.top_k = vm["top-k"].as<int64_t>();
  defaults.top_p = vm["top-p"].as<float>();
  defaults.seed = vm["seed"].as<uint64_t>();
  defaults.ignore_eos = vm.count("ignore-eos") > 0;
  if (!(defaults.temperature >= 0)) throw UsageError("--temperature must be 0 (greedy) or more");
  if (defaults.top_k < 0) throw UsageError("--top-k must be 0 (off) or more");
  if (!(defaults.top_p > 0 && defaults.top_p <= 1)) throw UsageError("--top-p must be in (0, 1]");
  const std::vector<std::string> default_stop =
      vm.count("stop") ? vm["stop"].as<std::vector<std::string>>() : std::vector<std::string>{};
  for (const auto& s : default_stop)
    if (s.empty()) throw UsageError("--stop \"\" would end every completion at once: a stop string is not empty");
  const OnError on_error = on_error_option(vm["on-error"].as<std::string>());
  engine::SchedulerLimits limits;
  limits.token_budget = positive_option(vm, "max-batch-tokens");
  limits.max_rows = positive_option(vm, "max-rows");
  const KvMemory kv_memory = parse_kv_memory(vm["kv-cache-memory"].as<std::string>());
  RunOptions options = run_options(vm);
  Ranks ranks(tp_option(vm), vm["backend"].as<std::string>(), threads_option(vm));

  // The prompts, checked before the weights load.
  const std::string dir = vm["checkpoint"].as<std::string>(), in_path = vm["prompts"].as<std::string>();
  const ModelConfig config = load_hf_config(dir);
  const auto tok = load_tokenizer(dir);
  const bool add_bos = add_bos_from(vm, dir, *tok);
  const bool max_new_given = !vm["max-new-tokens"].defaulted();
  const int64_t max_seq = options.max_seq > 0 ? options.max_seq : config.max_position;
  auto lines = read_input_lines(in_path, {"id", "text", "tokens", "max_new_tokens", "temperature", "top_k", "top_p",
                                          "seed", "stop", "ignore_eos"});
  std::vector<Prompt> prompts(lines.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    if (!lines[i].error.empty()) continue;
    try {
      prompts[i] = make_prompt(lines[i], str(in_path, ":", lines[i].line), defaults, default_stop, *tok, add_bos,
                               config.vocab, max_new_given ? 0 : max_seq);
      prompts[i].request.index = i;
    } catch (const Error& e) {
      lines[i].error = e.what();
    }
  }
  report_input_errors(in_path, lines, on_error);
  JobOutput out(vm["output"].as<std::string>(), output_policy(vm), ranks, lines);

  // The pool: what this replica's requests can use at once, within the memory given to it.
  std::vector<int64_t> lengths;
  for (size_t i : out.mine())
    if (lines[i].error.empty())
      lengths.push_back(static_cast<int64_t>(prompts[i].request.prompt.size()) + prompts[i].request.params.max_new_tokens);
  if (vm["batch"].defaulted()) options.batch = pool_batch(config, options, ranks, kv_memory, lengths);  // else as --batch says
  LoadedModel loaded = load_model(dir, options, ranks.backend(), ranks.shards(), ranks.sharing_memory());
  std::vector<int32_t> eos(config.eos_token_ids.begin(), config.eos_token_ids.end());
  if (eos.empty() && tok->eos_id() >= 0) eos.push_back(tok->eos_id());
  engine::Generator gen(*loaded.model, limits, eos);
  spdlog::info("KV pool: {} pages of {} positions (Batch {} × MaxSeq {}); {} prompts on this replica", gen.pages().num_pages(),
               loaded.generics.page_size, loaded.generics.batch, loaded.generics.max_seq, out.mine().size());

  std::map<size_t, StopText> texts;
  size_t finished = 0;
  for (size_t i : out.mine()) {
    if (!lines[i].error.empty()) {
      out.put(i, nlohmann::ordered_json{{"id", lines[i].id}, {"error", lines[i].error}});
      ++finished;
      continue;
    }
    const std::string why = gen.submit(prompts[i].request);
    if (!why.empty()) {
      const std::string msg = str(in_path, ":", lines[i].line, ": ", why);
      spdlog::warn("{} (the other prompts carry on)", msg);
      out.put(i, nlohmann::ordered_json{{"id", lines[i].id}, {"error", msg}});
      ++finished;
      continue;
    }
    // The decoder reads the prompt first (its text discarded), so the completion's first
    // token keeps the space a SentencePiece vocabulary drops at the start of a text.
    StopText st{tok->decoder(true), "", prompts[i].stop, false};
    for (int32_t t : prompts[i].request.prompt) st.decoder.push(t);
    st.decoder.flush();
    texts.emplace(i, std::move(st));
  }
  const engine::StopCheck stop = [&](size_t index, const std::vector<int32_t>& generated) {
    StopText& st = texts.at(index);
    const size_t before = st.text.size();
    st.text += st.decoder.push(generated.back());
    if (cut_at_stop(st.text, before, st.stop)) st.stopped = true;
    return st.stopped;
  };
  Progress progress("generate", out.mine().size(), ranks.world_rank() == 0 && spdlog::get_level() <= spdlog::level::info);
  const auto t0 = std::chrono::steady_clock::now();
  while (!gen.idle()) {
    for (engine::Completion& c : gen.step(stop)) {
      StopText& st = texts.at(c.index);
      if (!st.stopped) st.text += st.decoder.flush();
      out.put(c.index, nlohmann::ordered_json{{"id", lines[c.index].id},
                        {"text", st.text},
                        {"tokens", c.tokens},
                        {"finish_reason", engine::finish_reason_name(c.reason)},
                        {"prompt_tokens", c.prompt_tokens},
                        {"completion_tokens", c.tokens.size()}});
      texts.erase(c.index);
      ++finished;
    }
    progress.update(finished, gen.stats().generated_tokens);
  }
  progress.end();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto& st = gen.stats();
  spdlog::info("replica {}: {} steps, {} prompt tokens computed, {} generated, {} preemptions, peak {} of {} pages, {:.2f} s",
               ranks.replica(), st.steps, st.prefill_tokens, st.generated_tokens, st.preemptions, st.peak_pages,
               gen.pages().num_pages(), seconds);
  out.finish();
  int64_t errors = 0;
  if (ranks.world_rank() == 0) {
    int64_t n = 0, prompt_tokens = 0, completion_tokens = 0;
    for (const json& r : out.results_of_this_run()) {
      if (r.contains("error")) {
        ++errors;
        continue;
      }
      ++n;
      prompt_tokens += r.value("prompt_tokens", int64_t{0});
      completion_tokens += r.value("completion_tokens", int64_t{0});
    }
    std::printf("generate: %lld completions (%lld errors, %zu already done), %lld prompt tokens, %lld generated in "
                "%.2f s: %.1f tok/s generated, %.1f tok/s in all\n",
                static_cast<long long>(n), static_cast<long long>(errors), out.skipped_done(),
                static_cast<long long>(prompt_tokens), static_cast<long long>(completion_tokens), seconds,
                static_cast<double>(completion_tokens) / seconds,
                static_cast<double>(prompt_tokens + completion_tokens) / seconds);
    if (errors) spdlog::error("{} of the prompts ended in an error (their lines in {} say why); exit code {}", errors,
                              vm["output"].as<std::string>(), kExitSomeLinesFailed);
  }
  return errors ? kExitSomeLinesFailed : 0;
}

}  // namespace linnet::cli
