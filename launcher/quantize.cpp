// linnet quantize: a checkpoint's linear layers rewritten quantized (runtime/quantize_checkpoint.h).
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <sstream>

#include "core/error.h"
#include "launcher/options.h"
#include "runtime/quantize_checkpoint.h"

namespace linnet::cli {

int cmd_quantize(const Args& args) {
  po::options_description desc("linnet quantize");
  desc.add_options()
      ("checkpoint", po::value<std::string>()->required(), "a bf16, f16 or f32 Hugging Face checkpoint directory")
      ("out", po::value<std::string>()->required(), "the directory to write (new, or empty)")
      ("scheme", po::value<std::string>()->default_value("fp8-block"),
       (std::string("how to store the linear layers: ") + quantize_schemes()).c_str())
      ("block", po::value<std::string>()->default_value("128,128"),
       "fp8-block: the rows,cols a scale covers (DeepSeek-V3 and Qwen3-FP8: 128,128)")
      ("group", po::value<int64_t>()->default_value(128), "w4a16, w4a16-asym: the columns of a row a scale covers (a multiple of 8)");
  po::variables_map vm;
  if (!parse(args, desc, vm, "linnet quantize")) return 0;
  QuantizeOptions o;
  o.scheme = vm["scheme"].as<std::string>();
  const std::string block = vm["block"].as<std::string>();
  std::istringstream in(block);
  char comma = 0;
  if (!(in >> o.block_rows >> comma >> o.block_cols) || comma != ',' || !in.eof() || o.block_rows <= 0 || o.block_cols <= 0)
    throw UsageError(str("linnet quantize: --block '", block, "' must be rows,cols (two positive sizes, as 128,128)"));
  const auto t0 = std::chrono::steady_clock::now();
  o.group = vm["group"].as<int64_t>();
  quantize_checkpoint(vm["checkpoint"].as<std::string>(), vm["out"].as<std::string>(), o);
  const std::string unit = o.scheme.starts_with("w4a16") ? str("groups of ", o.group)
                           : o.scheme == "fp8-block"      ? str(o.block_rows, "x", o.block_cols)
                                                          : std::string("per channel");
  spdlog::info("wrote {} ({} {}, round to nearest) in {:.1f} s", vm["out"].as<std::string>(), o.scheme, unit,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return 0;
}

}  // namespace linnet::cli
