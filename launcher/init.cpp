// linnet init / linnet import-llama2c: make a Hugging Face checkpoint directory; linnet pack:
// save its matrices in the CPU backend's layout beside it (checkpoint/packed_file.h).
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>

#include "runtime/loader.h"
#include "architectures/hf_config.h"
#include "checkpoint/packed_file.h"
#include "architectures/presets.h"
#include "runtime/write_checkpoint.h"
#include "core/error.h"
#include "launcher/options.h"
#include "parallel/communicator.h"

namespace linnet::cli {

int cmd_init(const Args& args) {
  std::string presets;
  for (const auto& n : preset_names()) presets += (presets.empty() ? "" : ", ") + n;
  po::options_description desc("linnet init");
  desc.add_options()
      ("out", po::value<std::string>()->required(), "checkpoint directory to write")
      ("preset", po::value<std::string>(), ("a named configuration: " + presets).c_str())
      ("config", po::value<std::string>(), "a Hugging Face config.json (or a directory holding one)")
      ("dtype", po::value<std::string>(), "bf16, f16 or f32 (default: the config's torch_dtype)")
      ("layers", po::value<int64_t>(), "override num_hidden_layers (smaller benchmarks of real shapes)")
      ("seed", po::value<uint64_t>()->default_value(0), "random seed: the same seed writes the same weights");
  po::variables_map vm;
  if (!parse(args, desc, vm, "linnet init"))
    return 0;
  if (vm.count("preset") == vm.count("config")) throw UsageError("linnet init: give exactly one of --preset and --config");
  ModelConfig c = vm.count("preset") ? preset_config(vm["preset"].as<std::string>())
                                     : load_hf_config(vm["config"].as<std::string>());
  if (vm.count("layers")) {
    c.layers = positive_option(vm, "layers");
  }
  const DType dtype = vm.count("dtype") ? parse_dtype(vm["dtype"].as<std::string>()) : c.dtype;
  if (!is_float(dtype)) throw UsageError("--dtype must be bf16, f16 or f32");
  const std::string out = vm["out"].as<std::string>();
  write_random_checkpoint(c, out, dtype, vm["seed"].as<uint64_t>());
  spdlog::info("wrote {} ({} layers, hidden {}, vocab {}, {})", out, c.layers, c.hidden, c.vocab, dtype_name(dtype));
  return 0;
}

int cmd_pack(const Args& args) {
  po::options_description desc("linnet pack");
  desc.add_options()
      ("checkpoint", po::value<std::string>()->required(), "a checkpoint directory (the packed file is written into it)")
      ("dtype", po::value<std::string>(), "bf16, f16 or f32: the T later runs use (default: the config's torch_dtype)")
      ("verify", "check the checkpoint's packed file instead (its source files and every matrix's checksum); exit 1 "
                 "when a load would not use it whole");
  po::variables_map vm;
  if (!parse(args, desc, vm, "linnet pack")) return 0;
  const std::string dir = vm["checkpoint"].as<std::string>();
  if (vm.count("verify")) {
    if (vm.count("dtype")) throw UsageError("--verify checks the file as written; it takes no --dtype");
    const auto t0 = std::chrono::steady_clock::now();
    const auto problems = verify_packed_file(dir);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (const auto& p : problems) spdlog::error("{}/{}: {}", dir, kPackedFileName, p);
    std::printf("%s/%s: %s (%.2f s)\n", dir.c_str(), kPackedFileName,
                problems.empty() ? "sound: made from these files, every matrix matches its checksum"
                                 : str(problems.size(), " problem(s); loads will not use it whole").c_str(), s);
    return problems.empty() ? 0 : 1;
  }
  RunOptions o{1, 64, 1, 64, std::nullopt};
  if (vm.count("dtype")) {
    o.dtype = parse_dtype(vm["dtype"].as<std::string>());
    if (!is_float(*o.dtype)) throw UsageError("--dtype must be bf16, f16 or f32");
  }
  // The CPU backend lays the matrices out as its loads would; the file is those bytes.
  if (load_hf_config(dir).quantization)
    throw UsageError(str("linnet pack: ", dir, " is quantized; its matrices are read as stored, not packed"));
  auto backend = make_cpu_backend();
  SingleCommunicator comm;
  const auto t0 = std::chrono::steady_clock::now();
  LoadedModel m = load_model(dir, o, *backend, comm);
  write_packed_file(dir, m.model->matrices(), m.generics.t, backend->packed_format());
  spdlog::info("wrote {}/{} ({} matrices, {}, layout {}) in {:.1f} s", dir, kPackedFileName, m.model->matrices().size(),
               dtype_name(m.generics.t), backend->packed_format(),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return 0;
}

int cmd_import_llama2c(const Args& args) {
  po::options_description desc("linnet import-llama2c");
  desc.add_options()
      ("input", po::value<std::string>()->required(), "llama2.c checkpoint (e.g. stories15M.bin)")
      ("out", po::value<std::string>()->required(), "Hugging Face checkpoint directory to write");
  po::variables_map vm;
  if (!parse(args, desc, vm, "linnet import-llama2c")) return 0;
  const ModelConfig c = import_llama2c(vm["input"].as<std::string>(), vm["out"].as<std::string>());
  spdlog::info("wrote {} ({} layers, hidden {}, vocab {}, f32)", vm["out"].as<std::string>(), c.layers, c.hidden, c.vocab);
  return 0;
}

}  // namespace linnet::cli
