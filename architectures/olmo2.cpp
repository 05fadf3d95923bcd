// OLMo 2 (Olmo2ForCausalLM): no norms before the blocks, norms after them, q/k norms over the
// whole projection; no sliding window.
#include "architectures/architecture.h"

namespace linnet {

extern const Architecture kOlmo2{
    .model_type = "olmo2",
    .class_name = "Olmo2ForCausalLM",
    .rms_norm_eps = 1e-5,
    .layers = window_not_applied,
    .finish =
        [](const ConfigReader&, ModelConfig& c) {
          c.qk_norm = ModelConfig::QkNorm::whole;
          c.pre_norms = false;
          c.post_norms = true;
        },
};

}  // namespace linnet
