// A request body of `linnet serve`: parsed with the nesting limit, then checked as the
// server checks it (serve/openai_api.h), with the tokenizer a real checkpoint brings.
#include "core/files.h"
#include "core/error.h"
#include "fuzz_util.h"
#include "serve/openai_api.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto tok = linnet::load_tokenizer(linnet::fuzz::source("tests/fixtures/lm_eval/model"));
  static const linnet::serve::ServedModel model = [] {
    linnet::serve::ServedModel m;
    m.name = "tiny", m.vocab = 1398, m.max_seq = 64, m.pages = 8, m.page_size = 16;
    return m;
  }();
  try {
    const auto body = linnet::parse_json(std::string(reinterpret_cast<const char*>(data), size), "the request body");
    (void)linnet::serve::parse_completion(body, *tok, model);
  } catch (const linnet::serve::ApiError&) {
  } catch (const linnet::Error&) {
  }
  return 0;
}
