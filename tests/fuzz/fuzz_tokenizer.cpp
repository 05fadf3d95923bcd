// A checkpoint's tokenizer files: tokenizer.json (Hugging Face), tokenizer.model
// (SentencePiece protobuf or a tiktoken rank file) with a tokenizer_config.json beside it;
// each loaded, then used on a few texts.
#include <filesystem>

#include "core/error.h"
#include "fuzz_util.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const char* names[] = {"tokenizer.json", "tokenizer.model", "tokenizer_config.json"};
  const std::string name = names[data[0] % 3];
  const std::string path = linnet::fuzz::as_file(data + 1, size - 1, name);
  const std::string dir = linnet::fuzz::dir_of(path);
  // A config is read beside a real tokenizer (the one it would describe).
  const bool config = name == "tokenizer_config.json";
  if (config)
    std::filesystem::copy_file(linnet::fuzz::source("tests/fixtures/lm_eval/model/tokenizer.json"),
                               std::filesystem::path(dir) / "tokenizer.json",
                               std::filesystem::copy_options::overwrite_existing);
  try {
    const auto tok = linnet::load_tokenizer(dir);
    for (const char* text : {"Hello  world <|endoftext|> x", "", "\xff\xfe caf\xc3\xa9 \xe4\xb8\xad"}) {
      const auto ids = tok->encode(text, tok->bos_id() >= 0);
      (void)tok->decode(ids);
    }
    (void)linnet::choose_add_bos(dir, *tok);
  } catch (const linnet::Error&) {
  }
  std::filesystem::remove(path);
  if (config) std::filesystem::remove(std::filesystem::path(dir) / "tokenizer.json");
  return 0;
}
