// What every command that runs a model does first, in one order and one place: its options →
// the ranks (replicas × shards, the backend; launcher/ranks.h) → the model's config → the
// tokenizer (for the commands that read text) and chat template (for those that read
// conversations) → after the command's own checks of its
// inputs, the model (runtime/loader.h).
#pragma once
#include <boost/program_options.hpp>
#include <memory>
#include <string>

#include "launcher/ranks.h"
#include "layers/model_config.h"
#include "parallel/world_config.h"
#include "runtime/loader.h"
#include "chat/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace linnet::cli {

struct ModelCommand {
  RunOptions options;  // --batch, --max-seq, --page-size, --shards, --dtype (Shards resolved at load)
  std::unique_ptr<Ranks> ranks;
  std::string source;  // the checkpoint directory, or "CFG (random weights)"
  bool random = false;
  ModelConfig config;
  std::unique_ptr<Tokenizer> tok;  // when asked for
  std::unique_ptr<ChatTemplate> chat;  // when asked for and the checkpoint (or --chat-template) has one
  std::string no_chat;                 // else why not
  std::vector<StageLayers> stages;     // --pp's layer ranges (one stage: the whole model)


  // From --checkpoint DIR, or --config CFG --random-weights [--layers L] (the benchmarks);
  // --backend, --tp (where the command has it) and --threads; with_chat: the chat template
  // too (--chat-template, else the checkpoint's; options.h chat_template_from).
  static ModelCommand open(const boost::program_options::variables_map& vm, bool with_tokenizer,
                           bool with_chat = false);
  // MaxSeq as the run will bind it: --max-seq, else max_position_embeddings.
  int64_t max_seq() const { return options.max_seq > 0 ? options.max_seq : config.max_position; }
  // This rank's model, on its backend and shard group (or on wrappers of them: bench times
  // the ops and collectives through its own).
  LoadedModel load();
  LoadedModel load(Backend& backend, Communicator& comm);
  // This rank's pipeline stage (its layers, ends and the communicator between stages).
  StagePlace stage_place() const;
};

}  // namespace linnet::cli
