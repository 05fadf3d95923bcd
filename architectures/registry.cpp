// The architectures linnet runs, by model_type: each defined in its own file under architectures/.
// Adding one is its file and one line here (its order is the order errors list them in).
#include "architectures/architecture.h"

namespace linnet {

extern const Architecture kLlama, kQwen2, kMistral, kQwen3, kGemma2, kGemma3Text, kPhi3, kOlmo2, kGranite, kSmolLm3,
    kOlmo3, kMixtral, kQwen3Moe, kOlmoe, kGlm4Moe, kDeepseekV2, kDeepseekV3, kMistral4, kGptOss, kQwen3_5Text, kQwen3_5MoeText, kQwen3Next;

const std::vector<const Architecture*>& architectures() {
  static const std::vector<const Architecture*> all = {
      &kLlama, &kQwen2, &kMistral, &kQwen3, &kGemma2, &kGemma3Text, &kPhi3, &kOlmo2, &kGranite, &kSmolLm3,
      &kOlmo3,  // issue 36
      // Mixtures of experts (issue 30).
      &kMixtral, &kQwen3Moe, &kOlmoe,
      // DeepSeek's experts (issue 38).
      &kGlm4Moe, &kDeepseekV2, &kDeepseekV3, &kMistral4,
      // Attention sinks and clamped experts (issue 39).
      &kGptOss,
      // Gated DeltaNet beside gated attention (issue 40).
      &kQwen3_5Text, &kQwen3_5MoeText, &kQwen3Next,
  };
  return all;
}

const Architecture* find_architecture(const std::string& model_type) {
  for (const Architecture* a : architectures())
    if (model_type == a->model_type) return a;
  return nullptr;
}

}  // namespace linnet
