// What an OpenAI request may ask of the model, the same for `linnet serve` and
// `linnet run-batch`: its name in the API (--served-model-name, default the checkpoint
// folder's name), Vocab, MaxSeq, whether texts start with BOS, and the chat template.
#pragma once
#include <boost/program_options.hpp>

#include "launcher/model_command.h"
#include "serve/openai_api.h"

namespace linnet::cli {

void add_served_model_option(boost::program_options::options_description& desc);
// Before the model loads: the pool is taken to hold one MaxSeq (as every pool does);
// `linnet serve` sets the pool it got.
serve::ServedModel served_model(const boost::program_options::variables_map& vm, const ModelCommand& cmd);

}  // namespace linnet::cli
