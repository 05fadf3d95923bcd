// A chat template (a tokenizer_config.json's chat_template, or --chat-template FILE): parsed,
// then rendered over a small conversation. Templates are code: an error must stay an error.
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "fuzz_util.h"
#include "chat/jinja/jinja.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const nlohmann::ordered_json context = nlohmann::ordered_json::parse(R"({
    "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi \u00e9"},
                 {"role": "assistant", "content": [{"type": "text", "text": "Hello"}]}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>", "tools": null})");
  try {
    const auto t = linnet::jinja::Template::parse(std::string_view(reinterpret_cast<const char*>(data), size),
                                                  linnet::jinja::Options{true, true, false});
    // Small limits: the fuzzer explores what templates do, not how long they may run.
    linnet::jinja::Limits limits;
    limits.max_bytes = std::size_t{4} << 20;
    limits.max_steps = 1'000'000;
    (void)t.render(context, {}, limits);
  } catch (const linnet::Error&) {
  }
  return 0;
}
