// Text in, text out: the tokenizers of the checkpoints users have.
//
// load_tokenizer(dir) picks an implementation from what the checkpoint directory holds
// (see docs/tokenizers.md), in this order of preference:
//   1. tokenizer.json   — Hugging Face tokenizers, BPE model (byte-level or
//                         SentencePiece-style with byte fallback);
//   2. tokenizer.model  — a SentencePiece protobuf (through libsentencepiece), or a
//                         tiktoken rank file (Llama 3's original release);
//   3. tokenizer.bin    — llama2.c's vocabulary file, with llama2.c's encoder.
//
// Texts are byte strings: they need not be valid UTF-8, and decode returns the bytes the
// tokens stand for (a byte-level or byte-fallback tokenizer round-trips any bytes).
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace linnet {

using TokenId = std::int32_t;

class Decoder;

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Token ids of `text`; with add_bos the BOS id comes first (throws if there is none).
  // Special tokens written in the text ("<|eot_id|>", "<s>" for tokenizer.json files)
  // are matched as such before anything else.
  virtual std::vector<TokenId> encode(std::string_view text, bool add_bos = false) const = 0;

  // The text of `ids`. Special tokens are written out unless skip_special (control
  // tokens of a SentencePiece model, like <s>, never produce text, as in sentencepiece).
  std::string decode(std::span<const TokenId> ids, bool skip_special = false) const;

  // An incremental decoder: feed ids one at a time, get only complete UTF-8 characters.
  Decoder decoder(bool skip_special = false) const;

  virtual std::size_t vocab_size() const = 0;
  virtual TokenId bos_id() const = 0;  // -1 when the vocabulary has none
  virtual TokenId eos_id() const = 0;  // -1 when the vocabulary has none
  // Whether the format itself puts BOS first (a tokenizer.json post-processor that starts
  // with it; SentencePiece, tiktoken and llama2.c vocabularies of Llama models do).
  virtual bool adds_bos() const { return bos_id() >= 0; }
  // What was loaded, e.g. "tokenizer.json (BPE, byte-level)".
  virtual std::string description() const = 0;

  // Low level, used by decode and Decoder: appends the bytes of one token to `out`.
  // `at_start` is true until a token with text has been decoded (SentencePiece-style
  // decoders drop the dummy-prefix space of the first token); implementations clear it.
  virtual void decode_token(TokenId id, bool skip_special, bool& at_start, std::string& out) const = 0;
};

// Incremental decoding: push() returns the text the new token completes, holding back a
// trailing incomplete UTF-8 sequence until the next tokens complete it (bytes that cannot
// start or continue a valid UTF-8 character are not held). The concatenation of every
// push() and a final flush() equals Tokenizer::decode of the same ids.
class Decoder {
 public:
  Decoder(const Tokenizer& tokenizer, bool skip_special = false)
      : tok_(&tokenizer), skip_special_(skip_special) {}
  std::string push(TokenId id);
  std::string flush();  // whatever is held back (an incomplete sequence at the end)

 private:
  const Tokenizer* tok_;
  bool skip_special_;
  bool at_start_ = true;
  std::string pending_;
};

// The tokenizer of a checkpoint directory (see the order above); throws linnet::Error
// naming the file and what is unsupported.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& checkpoint_dir);

// Whether text for this checkpoint starts with BOS, as transformers 5.24's
// AutoTokenizer.from_pretrained(checkpoint_dir) decides it (docs/tokenizers.md has the
// table): a tokenizer.json's post-processor (add_bos_token is not read then); for a
// tokenizer.model, tokenizer_config.json's add_bos_token (default false) and the class's
// bos_token; for llama2.c's tokenizer.bin (which transformers cannot read), add_bos_token
// when set, else BOS. Never true when the vocabulary has no BOS token.
struct BosChoice {
  bool add;
  std::string why;  // the rule that decided, for messages
};
BosChoice choose_add_bos(const std::string& checkpoint_dir, const Tokenizer& tokenizer);
bool add_bos_by_default(const std::string& checkpoint_dir, const Tokenizer& tokenizer);

// The individual loaders, for tests and tools.
std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& tokenizer_json_path);
std::unique_ptr<Tokenizer> load_sentencepiece_tokenizer(const std::string& model_path);
std::unique_ptr<Tokenizer> load_tiktoken_tokenizer(const std::string& rank_file_path);
std::unique_ptr<Tokenizer> load_llama2c_tokenizer(const std::string& tokenizer_bin_path,
                                                  std::size_t vocab_size = 0);

// Length of the trailing bytes of `s` that are an incomplete (so far valid) UTF-8 sequence.
std::size_t utf8_incomplete_tail(std::string_view s);

}  // namespace linnet
