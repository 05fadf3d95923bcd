// A request body of `linnet serve` (and a run-batch line's body): parsed with the nesting
// limit, then checked as the server checks it (serve/openai_api.h) — as /v1/completions, as
// /v1/chat/completions (rendered by a chat template, tokenized), as /tokenize and as
// /detokenize — with the tokenizer a real checkpoint brings.
#include "core/files.h"
#include "core/error.h"
#include "fuzz_util.h"
#include "serve/openai_api.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto tok = linnet::load_tokenizer(linnet::fuzz::source("tests/fixtures/lm_eval/model"));
  // A ChatML template that loops over list content, and one that does not (joined text parts).
  static const linnet::ChatTemplate parts = linnet::ChatTemplate::single(
      "{% for m in messages %}{% if m.role not in ['system', 'user', 'assistant'] %}{{ raise_exception('bad role') }}"
      "{% endif %}<|im_start|>{{ m.role }}\n{% if m.content is string %}{{ m.content }}{% else %}"
      "{% for p in m.content %}{{ p.text }}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
      "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
      {{"bos_token", "<s>"}, {"eos_token", "</s>"}});
  static const linnet::ChatTemplate text = linnet::ChatTemplate::single(
      "{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content | trim }}{{ eos_token }}{% endfor %}"
      "{% if add_generation_prompt %}[assistant] {% endif %}{% if enable_thinking is defined %}{{ enable_thinking }}{% endif %}",
      {{"bos_token", "<s>"}, {"eos_token", "</s>"}});
  static const auto model = [](const linnet::ChatTemplate* chat) {
    linnet::serve::ServedModel m;
    m.name = "tiny", m.vocab = 1398, m.max_seq = 64, m.pages = 8, m.page_size = 16;
    m.chat = chat;
    m.no_chat = "no chat template";
    return m;
  };
  static const linnet::serve::ServedModel with_parts = model(&parts), with_text = model(&text), without = model(nullptr);
  const std::string body_text(reinterpret_cast<const char*>(data), size);
  nlohmann::json body;
  nlohmann::ordered_json ordered;
  try {
    body = linnet::parse_json(body_text, "the request body");
    ordered = linnet::parse_ordered_json(body_text, "the request body");
  } catch (const linnet::Error&) {
    return 0;
  }
  auto guarded = [](auto&& fn) {
    try {
      fn();
    } catch (const linnet::serve::ApiError&) {
    } catch (const linnet::Error&) {
    }
  };
  guarded([&] { (void)linnet::serve::parse_completion(body, *tok, with_parts); });
  for (const auto* m : {&with_parts, &with_text, &without}) {
    guarded([&] { (void)linnet::serve::parse_chat_completion(body, ordered, *tok, *m); });
    guarded([&] { (void)linnet::serve::tokenize_body(body, ordered, *tok, *m); });
  }
  guarded([&] { (void)linnet::serve::detokenize_body(body, *tok, with_parts); });
  return 0;
}
