// A quantized checkpoint as its config.json's quantization_config describes it: how its linear
// layers' matrices are stored (core/weight_layout.h) and which modules stay unconverted. The
// parameter table asks it, for each linear layer, whether that matrix is stored quantized.
#pragma once
#include <string>
#include <vector>

#include "core/weight_layout.h"

namespace linnet {

struct Quantization {
  std::string method;  // quant_method: "fp8"
  WeightLayout matrices;
  // modules_to_not_convert (transformers' FP8) / ignore (compressed-tensors): patterns of
  // module names kept in the checkpoint's dtype; lm_head always is.
  std::vector<std::string> not_converted;
  // How not_converted names modules: transformers' should_convert_module (below), or
  // compressed-tensors' `ignore` (a module's whole name, or "re:" and a regular expression
  // matched from the name's start).
  bool compressed_tensors_names = false;
  // compressed-tensors' config groups where they differ (their targets, or their schemes:
  // "mixed-precision"), each its targets and layout; `matrices` is the first one's. Empty:
  // `matrices` for every converted linear layer.
  struct Scheme {
    std::vector<std::string> targets;  // "Linear", "re:" + a pattern, or a module's whole name
    WeightLayout layout;
  };
  std::vector<Scheme> schemes;

  // Whether transformers converts the linear module `module` ("model.layers.0.mlp.down_proj"):
  // not when a pattern matches its name from the start up to a module boundary (as a regular
  // expression: "model.layers.1" matches model.layers.1.mlp, not model.layers.11.mlp), or its
  // end ("o_proj"); transformers' should_convert_module. (compressed_tensors_names: as above.)
  bool converts(const std::string& module) const;
  // How the linear module `module` is stored: nullptr where it is not converted. With schemes,
  // compressed-tensors' rule: its most specific matching target names the scheme (a module's
  // whole name, then re: patterns in the targets' sorted order, then Linear); no target, none.
  const WeightLayout* layout_of(const std::string& module) const;
  // "fp8 8×16 (modules_to_not_convert: lm_head)": for inspect and errors.
  std::string describe() const;
};

}  // namespace linnet
