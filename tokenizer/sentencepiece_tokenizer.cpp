// tokenizer.model as a SentencePiece protobuf, through libsentencepiece.
#include "core/error.h"
#include "tokenizer/internal.h"

#if LINNET_HAVE_SENTENCEPIECE
#include <sentencepiece_processor.h>
#endif

namespace linnet {

#if LINNET_HAVE_SENTENCEPIECE
namespace {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(const std::string& path) : path_(path) {
    auto status = sp_.Load(path);
    if (!status.ok())
      throw Error(str(path, ": not a SentencePiece model (", status.ToString(), ")"));
    const int n = sp_.GetPieceSize();
    text_.resize(std::size_t(n));
    kind_.resize(std::size_t(n));
    for (int i = 0; i < n; ++i) {
      std::string piece = sp_.IdToPiece(i);
      if (sp_.IsControl(i)) {
        kind_[i] = kControl;
      } else if (sp_.IsUnknown(i)) {
        kind_[i] = kUnknown;
        text_[i] = " \xE2\x81\x87 ";  // sentencepiece's default surface for <unk>: " ⁇ "
      } else if (sp_.IsByte(i)) {
        kind_[i] = kByte;
        text_[i] = std::string(1, char(std::stoi(piece.substr(3, 2), nullptr, 16)));
      } else {
        kind_[i] = kNormal;
        std::string t;
        for (std::size_t p = 0; p < piece.size();) {
          if (piece.compare(p, 3, "\xE2\x96\x81") == 0) {
            t.push_back(' ');
            p += 3;
          } else {
            t.push_back(piece[p++]);
          }
        }
        text_[i] = std::move(t);
      }
    }
  }

  std::vector<TokenId> encode(std::string_view text, bool add_bos) const override {
    std::vector<int> ids;
    auto status = sp_.Encode(text, &ids);
    if (!status.ok()) throw Error(str(path_, ": encode failed: ", status.ToString()));
    std::vector<TokenId> out;
    out.reserve(ids.size() + 1);
    if (add_bos) {
      if (sp_.bos_id() < 0) throw Error(str(path_, ": the model has no BOS token"));
      out.push_back(sp_.bos_id());
    }
    out.insert(out.end(), ids.begin(), ids.end());
    return out;
  }

  void decode_token(TokenId id, bool, bool& at_start, std::string& out) const override {
    if (id < 0 || std::size_t(id) >= text_.size())
      throw Error(str("token id ", id, " is out of range (vocabulary of ", text_.size(), ")"));
    if (kind_[id] == kControl) return;
    const std::string& t = text_[id];
    if (at_start && kind_[id] == kNormal && !t.empty() && t[0] == ' ') {
      out.append(t, 1);
    } else {
      out += t;
    }
    if (!t.empty()) at_start = false;
  }

  std::size_t vocab_size() const override { return text_.size(); }
  TokenId bos_id() const override { return sp_.bos_id(); }
  TokenId eos_id() const override { return sp_.eos_id(); }
  std::string description() const override { return "tokenizer.model (SentencePiece)"; }

 private:
  enum Kind : std::uint8_t { kNormal, kControl, kUnknown, kByte };
  std::string path_;
  sentencepiece::SentencePieceProcessor sp_;
  std::vector<std::string> text_;
  std::vector<Kind> kind_;
};

}  // namespace

std::unique_ptr<Tokenizer> load_sentencepiece_tokenizer(const std::string& model_path) {
  return std::make_unique<SentencePieceTokenizer>(model_path);
}
#else
std::unique_ptr<Tokenizer> load_sentencepiece_tokenizer(const std::string& model_path) {
  throw Error(str(model_path, ": linnet was built without libsentencepiece"));
}
#endif

}  // namespace linnet
