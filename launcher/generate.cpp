// linnet generate: completions for a file of prompts, by continuous batching on the paged
// cache (engine/), in input order, line by line (docs/usage.md).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <limits>
#include <map>
#include <set>

#include "core/files.h"
#include "engine/chat_request.h"
#include "engine/completion_text.h"
#include "engine/generator.h"
#include "engine/request_rules.h"
#include "launcher/job_io.h"
#include "launcher/kv_memory.h"
#include "launcher/options.h"
#include "launcher/model_command.h"
#include "engine/request_fields.h"
#include "tokenizer/tokenizer.h"

namespace linnet::cli {

namespace {

using nlohmann::json;
using engine::Request;
using engine::SamplingParams;

// A prompt line made into a request; throws Error naming the line and what is wrong. The
// sampling fields and the token checks are the server's own (engine/request_rules.h).
struct Prompt {
  Request request;
  std::vector<std::string> stop;
  engine::TextOptions text;
  std::string chat_error;  // a bad conversation (or one the template refuses): this line's error, not the run's
};

// The keys of a line whose prompt is a conversation, beside "messages".
const char* const kChatKeys[] = {"add_generation_prompt", "continue_final_message", "chat_template_kwargs", "documents",
                                 "reasoning_effort"};

// max_new_tokens not given anywhere (max_seq_fit > 0): at most what fits in MaxSeq after
// the prompt, as vLLM does when max_tokens is left out.
Prompt make_prompt(const InputLine& in, const std::string& where, const engine::SamplingFields& defaults,
                   const Tokenizer& tok, const ChatTemplate* chat, const std::string& no_chat, bool add_bos,
                   int64_t vocab, int64_t max_seq_fit) try {
  const json& j = in.value;
  auto fail = [&](const std::string& why) -> void { throw Error(why); };
  const int given = static_cast<int>(j.contains("text")) + j.contains("tokens") + j.contains("messages");
  if (given != 1) fail("give exactly one of \"text\", \"tokens\" and \"messages\"");
  if (!j.contains("messages"))
    for (const char* key : kChatKeys)
      if (j.contains(key)) fail(str("\"", key, "\" goes with \"messages\" (a conversation)"));
  Prompt p;
  const engine::SamplingFields f = engine::read_sampling(j, defaults, &tok, vocab);
  p.request.params = f.params;
  p.stop = f.stop;
  p.text = {f.skip_special, f.include_stop_str, f.params.min_tokens};
  if (j.contains("messages")) {
    if (!chat) fail(str("this line is a conversation (\"messages\"), but ", no_chat));
    // The conversation as written (its keys in order), then as the server renders it. A bad
    // conversation is this line's error line, whatever --on-error says: the others run.
    try {
      const ChatRequest request = engine::read_chat_request(parse_ordered_json(in.text, where), *chat);
      p.request.prompt = engine::chat_prompt(*chat, request, tok, vocab).ids;
    } catch (const engine::FieldError& e) {
      p.chat_error = str(where, ": ", e.what());
      p.request.prompt = {0};  // never run: the line's result is its error
    }
  } else if (j.contains("text")) {
    if (!j["text"].is_string()) fail("\"text\" must be a string");
    const std::string text = j["text"].get<std::string>();
    if (text.empty()) fail("\"text\" is empty");
    // add_special_tokens false: no BOS, whatever --add-bos says.
    p.request.prompt =
        engine::encode_text(tok, text, add_bos && engine::read_boolean(j, "add_special_tokens", true), vocab, "text");
  } else {
    p.request.prompt = engine::token_ids(j["tokens"], "tokens", vocab);
  }
  if (j.contains("messages") && engine::read_boolean(j, "add_special_tokens", false) && add_bos && tok.bos_id() >= 0)
    p.request.prompt.insert(p.request.prompt.begin(), tok.bos_id());
  engine::truncate_prompt(j, p.request.prompt, max_seq_fit > 0 ? max_seq_fit : std::numeric_limits<int32_t>::max());
  if (p.request.prompt.empty()) fail("the prompt has no tokens");
  SamplingParams& s = p.request.params;
  if (max_seq_fit > 0 && !j.contains("max_new_tokens"))
    s.max_new_tokens = std::max<int64_t>(
        1, engine::default_max_new(static_cast<int64_t>(p.request.prompt.size()), s.max_new_tokens,
                                   engine::PoolLimits{max_seq_fit, 1, std::numeric_limits<int64_t>::max()}));
  s.max_new_tokens = engine::read_integer(j, "max_new_tokens", 1, std::numeric_limits<int64_t>::max(),
                                          s.max_new_tokens, "a positive integer");
  engine::check_min_tokens(s, "max_new_tokens");
  return p;
} catch (const Error& e) {
  throw Error(str(where, ": ", e.what()));
}

}  // namespace

int cmd_generate(const Args& args) {
  po::options_description desc("linnet generate");
  desc.add_options()
      ("checkpoint", po::value<std::string>()->required(), "Hugging Face checkpoint directory (with its tokenizer)")
      ("prompts", po::value<std::string>()->required(),
       "IN.jsonl: one {\"text\": …}, {\"tokens\": […]} or {\"messages\": […]} per line")
      ("output", po::value<std::string>()->required(), "OUT.jsonl: one result per prompt, in input order")
      ("max-new-tokens", po::value<int64_t>()->default_value(256),
       "tokens to generate at most, per prompt (unset: 256, or what fits in MaxSeq)")
      ("temperature", po::value<float>()->default_value(0), "0: greedy; > 0: sampling")
      ("top-k", po::value<int64_t>()->default_value(0), "sample among the k most likely tokens (0: all)")
      ("top-p", po::value<float>()->default_value(1), "sample within the smallest set of probability ≥ p (1: all)")
      ("seed", po::value<uint64_t>()->default_value(0), "sampling seed (a prompt's own \"seed\" overrides it)")
      ("stop", po::value<std::vector<std::string>>()->composing(), "stop at this string (repeatable)")
      ("ignore-eos", "do not stop at end-of-sequence tokens (benchmarks)")
      ("on-error", po::value<std::string>()->default_value("stop"), "a bad input line: stop (before any work) or skip");
  add_engine_options(desc);
  add_output_options(desc);
  add_progress_option(desc);
  add_bos_option(desc);
  add_chat_template_option(desc);
  add_run_options(desc);
  po::variables_map vm;
  if (!parse(args, desc, vm, "linnet generate"))
    return 0;
  engine::SamplingFields defaults;
  SamplingParams& d = defaults.params;
  d.max_new_tokens = positive_option(vm, "max-new-tokens");
  d.temperature = vm["temperature"].as<float>();
  d.top_k = vm["top-k"].as<int64_t>();
  d.top_p = vm["top-p"].as<float>();
  d.seed = vm["seed"].as<uint64_t>();
  d.ignore_eos = vm.count("ignore-eos") > 0;
  if (!(d.temperature >= 0)) throw UsageError("--temperature must be 0 (greedy) or more");
  if (!(d.top_p > 0 && d.top_p <= 1)) throw UsageError("--top-p must be in (0, 1]");
  defaults.stop = vm.count("stop") ? vm["stop"].as<std::vector<std::string>>() : std::vector<std::string>{};
  for (const auto& s : defaults.stop)
    if (s.empty()) throw UsageError("--stop \"\" would end every completion at once: a stop string is not empty");
  const OnError on_error = on_error_option(vm["on-error"].as<std::string>());
  const EngineOptions engine_options = engine_options_from(vm);
  const engine::SchedulerLimits& limits = engine_options.limits;
  const KvMemory& kv_memory = engine_options.kv_memory;
  ModelCommand cmd = ModelCommand::open(vm, true, true);
  Ranks& ranks = *cmd.ranks;
  const ModelConfig& config = cmd.config;
  const Tokenizer* tok = cmd.tok.get();
  const ProgressOutput progress_to = progress_output(vm, ranks);

  // The prompts, checked before the weights load.
  const std::string in_path = vm["prompts"].as<std::string>();
  const bool add_bos = add_bos_from(vm, cmd.source, *tok);
  const bool max_new_given = !vm["max-new-tokens"].defaulted();
  const int64_t max_seq = cmd.max_seq();
  const auto names = engine::field_names(engine::Route::generate_line);  // engine/request_fields.cpp
  const std::set<std::string> keys(names.begin(), names.end());
  auto lines = read_job_input(in_path, ranks, keys);
  std::vector<Prompt> prompts(lines.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    if (!lines[i].error.empty()) continue;
    try {
      prompts[i] = make_prompt(lines[i], str(in_path, ":", lines[i].line), defaults, *tok, cmd.chat.get(), cmd.no_chat,
                               add_bos, config.vocab, max_new_given ? 0 : max_seq);
      prompts[i].request.index = i;
    } catch (const Error& e) {
      lines[i].error = e.what();
    }
  }
  report_input_errors(in_path, lines, on_error, ranks.world_rank() == 0);
  JobOutput out(vm["output"].as<std::string>(), in_path, output_policy(vm), ranks, lines);

  // The pool: what this replica's requests can use at once, within the memory given to it.
  std::vector<int64_t> lengths;
  for (size_t i : out.mine())
    if (lines[i].error.empty() && prompts[i].chat_error.empty())
      lengths.push_back(static_cast<int64_t>(prompts[i].request.prompt.size()) + prompts[i].request.params.max_new_tokens);
  if (vm["batch"].defaulted()) cmd.options.batch = pool_batch(config, cmd.options, ranks, kv_memory, lengths);  // else --batch
  LoadedModel loaded = cmd.load();
  engine::Generator gen(*loaded.model, limits, engine::end_of_sequence_ids(config, *tok));
  spdlog::info("KV pool: {} pages of {} positions (Batch {} × MaxSeq {}); {} prompts on this replica", gen.pages().num_pages(),
               loaded.generics.page_size, loaded.generics.batch, loaded.generics.max_seq, out.mine().size());

  std::map<size_t, engine::CompletionText> texts;
  size_t failed = 0;    // lines answered with their error before any step
  int64_t budget = 0;   // the submitted prompts' max_new_tokens together
  for (size_t i : out.mine()) {
    if (!lines[i].error.empty()) {
      out.put(i, nlohmann::ordered_json{{"id", lines[i].id}, {"error", lines[i].error}});
      ++failed;
      continue;
    }
    if (!prompts[i].chat_error.empty()) {  // a bad conversation
      out.warn_line(prompts[i].chat_error + " (the other prompts carry on)");
      out.put(i, nlohmann::ordered_json{{"id", lines[i].id}, {"error", prompts[i].chat_error}});
      ++failed;
      continue;
    }
    const std::string why = gen.submit(prompts[i].request);
    if (!why.empty()) {
      const std::string msg = str(in_path, ":", lines[i].line, ": ", why);
      out.warn_line(msg + " (the other prompts carry on)");
      out.put(i, nlohmann::ordered_json{{"id", lines[i].id}, {"error", msg}});
      ++failed;
      continue;
    }
    texts.emplace(i, engine::CompletionText(*tok, prompts[i].request.prompt, prompts[i].stop, prompts[i].text));
    budget += prompts[i].request.params.max_new_tokens;
  }
  Progress progress("generate", "prompts", out.mine().size(), budget, progress_to);
  for (size_t k = 0; k < failed; ++k) progress.finished(0, 0);
  const engine::StopCheck stop = [&](size_t index, const std::vector<int32_t>& generated) {
    return texts.at(index).push(generated.back());
  };
  const auto t0 = std::chrono::steady_clock::now();
  while (!gen.idle()) {
    for (engine::Completion& c : gen.step(stop)) {
      engine::CompletionText& text = texts.at(c.index);
      text.finish(c);
      nlohmann::ordered_json result{{"id", lines[c.index].id},
                                    {"text", text.text()},
                                    {"tokens", c.tokens},
                                    {"finish_reason", engine::finish_reason_name(c.reason)},
                                    {"prompt_tokens", c.prompt_tokens},
                                    {"completion_tokens", c.tokens.size()}};
      // vLLM's stop_reason: the stop string or stop id that ended it.
      if (!text.stop_string().empty()) result["stop_reason"] = text.stop_string();
      else if (c.stop_token >= 0) result["stop_reason"] = c.stop_token;
      out.put(c.index, result);
      texts.erase(c.index);
      progress.finished(prompts[c.index].request.params.max_new_tokens, static_cast<int64_t>(c.tokens.size()));
    }
    progress.update(gen.stats().generated_tokens);
  }
  progress.end();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto& st = gen.stats();
  spdlog::info("replica {}: {} steps, {} prompt tokens computed{}, {} generated, {} preemptions, peak {} of {} pages, {:.2f} s",
               ranks.replica(), st.steps, st.prefill_tokens,
               st.restored_tokens > 0 ? str(" (", st.restored_tokens, " more restored from state snapshots)") : std::string(),
               st.generated_tokens, st.preemptions, st.peak_pages, gen.pages().num_pages(), seconds);
  out.finish();
  int64_t errors = 0;
  if (ranks.world_rank() == 0) {
    int64_t n = 0, prompt_tokens = 0, completion_tokens = 0;
    std::FILE* summary = out.summary_stream();
    for (const json& r : out.results_of_this_run()) {
      if (r.contains("error")) {
        ++errors;
        continue;
      }
      ++n;
      prompt_tokens += r.value("prompt_tokens", int64_t{0});
      completion_tokens += r.value("completion_tokens", int64_t{0});
    }
    std::fprintf(summary, "generate: %lld completions (%lld errors, %zu already done), %lld prompt tokens, %lld generated in "
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
