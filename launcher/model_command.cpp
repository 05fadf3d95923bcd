#include "launcher/model_command.h"

#include <spdlog/spdlog.h>

#include "architectures/hf_config.h"
#include "architectures/presets.h"
#include "launcher/options.h"

namespace linnet::cli {

ModelCommand ModelCommand::open(const po::variables_map& vm, bool with_tokenizer, bool with_chat) {
  // The benchmarks' two sources of a model: a checkpoint, or a config's shapes with random
  // weights — never both, never a config without the flag that says what it is for.
  if (vm.count("random-weights") && !vm.count("config")) throw UsageError("--random-weights needs --config");
  if (vm.count("checkpoint") && (vm.count("random-weights") || vm.count("config")))
    throw UsageError("--checkpoint runs a checkpoint's weights, --config CFG --random-weights a config's shapes "
                     "with random ones: give one or the other");
  if (vm.count("config") && !vm.count("random-weights"))
    throw UsageError("--config needs --random-weights (a config alone has no weights)");
  if (!vm.count("random-weights") && !vm.count("checkpoint"))
    throw UsageError("give --checkpoint DIR, or --config CFG --random-weights");
  ModelCommand c;
  c.options = run_options(vm);
  const int tp = vm.count("tp") ? tp_option(vm) : 0;
  const PipelineOption pipeline = pp_option(vm);
  // Pipeline stages (issue 41): the layout's rules are checked on every rank before anything
  // is built; running the stages is not built yet.
  const WorldConfig world = pipeline.pp > 1 ? WorldConfig::make(job_world_size(), tp, pipeline.pp) : WorldConfig{};
  c.random = vm.count("random-weights") > 0;
  if (c.random) {
    const std::string cfg = vm["config"].as<std::string>();
    c.config = preset_or_config(cfg);
    if (vm.count("layers")) c.config.layers = positive_option(vm, "layers");
    c.source = cfg + " (random weights)";
  } else {
    c.source = vm["checkpoint"].as<std::string>();
    c.config = load_hf_config(c.source);
  }
  if (pipeline.pp > 1 || !pipeline.counts.empty()) {
    const std::vector<StageLayers> stages = stage_layers(c.config.layers, pipeline.pp, pipeline.counts);
    if (pipeline.pp > 1) {
      const std::string last = stages.size() > 1 ? str(", …, stage ", stages.size() - 1, " layers ", stages.back().begin,
                                                        "–", stages.back().end - 1)
                                                  : std::string();
      throw Error(str("--pp ", pipeline.pp, ": ", world.describe(), ", stage 0 layers 0–", stages[0].end - 1, last,
                      ": pipeline stages are planned and checked (linnet inspect --pp prints each stage's layers and "
                      "bytes) but do not run yet; run with --pp 1 (issue 41)"));
    }
  }
  c.ranks = std::make_unique<Ranks>(tp, vm["backend"].as<std::string>(), threads_option(vm));
  if (c.options.page_size == 0) {  // resolved once here, so the pool, the server and eval see the bound value
    c.options.page_size = default_page_size(c.max_seq());
    if (c.options.page_size != kDefaultPageSize)
      spdlog::info("PageSize {}: MaxSeq {} is below the default page size {} (--page-size chooses another)",
                   c.options.page_size, c.max_seq(), kDefaultPageSize);
  }
  if (with_tokenizer) c.tok = load_tokenizer(c.source);
  if (with_chat) {
    if (c.random) c.no_chat = "a model with random weights from --config has no chat template";
    else c.chat = chat_template_from(vm, c.source, c.no_chat);
  }
  return c;
}

LoadedModel ModelCommand::load() { return load(ranks->backend(), ranks->shards()); }

LoadedModel ModelCommand::load(Backend& backend, Communicator& comm) {
  if (random) return random_model(config, options, backend, comm, ranks->sharing_memory());
  return load_model(source, options, backend, comm, ranks->sharing_memory());
}

}  // namespace linnet::cli
