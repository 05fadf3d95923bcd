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
  // Pipeline stages (docs/parallel.md): the layout's rules checked on every rank before anything
  // is built.
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
  // Each stage's layers (the rules checked on every rank before anything is built).
  c.stages = stage_layers(c.config.layers, pipeline.pp, pipeline.counts);
  c.ranks = std::make_unique<Ranks>(tp, vm["backend"].as<std::string>(), threads_option(vm), pipeline.pp);
  if (pipeline.pp > 1 && c.ranks->world_rank() == 0) {
    std::string ranges;
    for (size_t s = 0; s < c.stages.size(); ++s)
      ranges += str(s ? ", " : "", "stage ", s, " layers ", c.stages[s].begin, "–", c.stages[s].end - 1);
    spdlog::info("pipeline: {}; {} (the embedding on stage 0, the final norm, lm_head and the sampler on stage {})",
                 world.describe(), ranges, pipeline.pp - 1);
  }
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
  if (random) return random_model(config, options, backend, comm, ranks->sharing_memory(), stage_place());
  return load_model(source, options, backend, comm, ranks->sharing_memory(), stage_place());
}

StagePlace ModelCommand::stage_place() const {
  StagePlace p;
  if (ranks->stages() == 1) return p;
  const int s = ranks->stage();
  const StageLayers& l = stages[static_cast<size_t>(s)];
  p.share = {l.begin, l.end, s == 0, s + 1 == ranks->stages()};
  p.pipe = ranks->pipe();
  p.stage = s;
  p.stages = ranks->stages();
  return p;
}

}  // namespace linnet::cli
