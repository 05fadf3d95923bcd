// The JSON Lines of `linnet generate` and `linnet eval`: each line read, then its request
// fields held to the shared rules (engine/request_rules.h) with a real tokenizer, and a
// conversation (`messages`) read and rendered as generate does (engine/chat_request.h).
#include "core/files.h"
#include "engine/chat_request.h"
#include "engine/request_rules.h"
#include "core/error.h"
#include "fuzz_util.h"
#include "launcher/input_lines.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto tok = linnet::load_tokenizer(linnet::fuzz::source("tests/fixtures/lm_eval/model"));
  static const linnet::ChatTemplate chat = linnet::ChatTemplate::single(
      "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
      "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
      {});
  const std::string path = linnet::fuzz::as_file(data, size, "in.jsonl");
  try {
    for (const auto& line : linnet::cli::read_input_lines(
             path, {"id", "text", "tokens", "max_new_tokens", "temperature", "top_k", "top_p", "seed", "stop",
                    "ignore_eos", "messages", "add_generation_prompt", "continue_final_message", "chat_template_kwargs",
                    "documents"})) {
      if (!line.error.empty()) continue;
      try {
        (void)linnet::engine::read_sampling(line.value, {});
        if (line.value.contains("text") && line.value["text"].is_string())
          (void)linnet::engine::encode_text(*tok, line.value["text"].get<std::string>(), true, 1398, "text");
        if (line.value.contains("tokens")) (void)linnet::engine::token_ids(line.value["tokens"], "tokens", 1398);
        (void)linnet::engine::read_integer(line.value, "max_new_tokens", 1, 1 << 30, 16, "a positive integer");
        if (line.value.contains("messages"))
          (void)linnet::engine::chat_prompt(
              chat, linnet::engine::read_chat_request(linnet::parse_ordered_json(line.text, "line"), chat), *tok, 1398);
      } catch (const linnet::Error&) {
      }
    }
  } catch (const linnet::Error&) {
  }
  return 0;
}
