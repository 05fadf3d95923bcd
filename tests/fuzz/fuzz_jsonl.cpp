// The JSON Lines of `linnet generate` and `linnet eval`: each line read, then its request
// fields held to the shared rules (engine/request_rules.h) with a real tokenizer.
#include "engine/request_rules.h"
#include "core/error.h"
#include "fuzz_util.h"
#include "launcher/input_lines.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto tok = linnet::load_tokenizer(linnet::fuzz::source("tests/fixtures/lm_eval/model"));
  const std::string path = linnet::fuzz::as_file(data, size, "in.jsonl");
  try {
    for (const auto& line : linnet::cli::read_input_lines(
             path, {"id", "text", "tokens", "max_new_tokens", "temperature", "top_k", "top_p", "seed", "stop",
                    "ignore_eos", "messages"})) {
      if (!line.error.empty()) continue;
      try {
        (void)linnet::engine::read_sampling(line.value, {});
        if (line.value.contains("text") && line.value["text"].is_string())
          (void)linnet::engine::encode_text(*tok, line.value["text"].get<std::string>(), true, 1398, "text");
        if (line.value.contains("tokens")) (void)linnet::engine::token_ids(line.value["tokens"], "tokens", 1398);
        (void)linnet::engine::read_integer(line.value, "max_new_tokens", 1, 1 << 30, 16, "a positive integer");
      } catch (const linnet::Error&) {
      }
    }
  } catch (const linnet::Error&) {
  }
  return 0;
}
