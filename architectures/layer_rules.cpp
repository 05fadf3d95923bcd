// Layer rules more than one architecture shares (architectures/architecture.h).
#include "core/error.h"
#include "architectures/architecture.h"

namespace linnet {

void window_not_applied(const ConfigReader& r, ModelConfig& c, LayerParse& l) {
  if (given(r.j, "sliding_window") || r.boolean("use_sliding_window", false))
    c.unapplied_window = given(r.j, "sliding_window") ? std::optional<int64_t>(r.positive("sliding_window"))
                                                      : std::optional<int64_t>(4096);
  for (const auto& t : l.types)
    if (t == "sliding_attention") {
      if (!given(r.j, "sliding_window")) r.fail("layers use sliding_attention, but 'sliding_window' is not set");
      c.unapplied_window = r.positive("sliding_window");
    }
  l.window.reset();
}

void every_layer_slides(const ConfigReader&, ModelConfig&, LayerParse& l) {
  for (size_t i = 0; i < l.sliding.size(); ++i) l.sliding[i] = l.window.has_value();
}

}  // namespace linnet
