#include "launcher/served_model.h"

#include <spdlog/spdlog.h>

#include <filesystem>

#include "launcher/options.h"

namespace linnet::cli {

void add_served_model_option(po::options_description& desc) {
  desc.add_options()("served-model-name", po::value<std::string>(),
                     "the model's name in the API (default: the checkpoint folder's name)");
}

serve::ServedModel served_model(const po::variables_map& vm, const ModelCommand& cmd) {
  serve::ServedModel m;
  const std::string& dir = cmd.source;
  m.name = vm.count("served-model-name") ? vm["served-model-name"].as<std::string>()
                                         : std::filesystem::path(dir).lexically_normal().filename().string();
  if (m.name.empty()) m.name = std::filesystem::absolute(dir).parent_path().filename().string();
  m.root = dir;
  m.vocab = cmd.config.vocab;
  m.max_seq = cmd.max_seq();
  m.page_size = cmd.options.page_size;
  m.pages = (m.max_seq + m.page_size - 1) / m.page_size;
  m.add_bos = add_bos_from(vm, dir, *cmd.tok);
  m.chat = cmd.chat.get();
  m.no_chat = cmd.no_chat;
  if (!m.chat) spdlog::info("conversations (/v1/chat/completions) are refused: {}", cmd.no_chat);
  return m;
}

}  // namespace linnet::cli
