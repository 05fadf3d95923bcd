#include "launcher/served_model.h"

#include <spdlog/spdlog.h>

#include <filesystem>

#include "core/error.h"
#include "engine/reasoning.h"
#include "launcher/options.h"

namespace linnet::cli {

void add_served_model_option(po::options_description& desc) {
  desc.add_options()("served-model-name", po::value<std::string>(),
                     "the model's name in the API (default: the checkpoint folder's name)")(
      "reasoning-parser", po::value<std::string>(),
      "chat answers split into reasoning_content and content: deepseek_r1, gpt_oss, qwen3, or none "
      "(default: gpt_oss for a harmony chat template, else none)");
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
  m.reasoning_parser = vm.count("reasoning-parser") ? vm["reasoning-parser"].as<std::string>()
                       : m.chat                     ? engine::reasoning_parser_for_template(m.chat->source(false))
                                                    : "";
  if (m.reasoning_parser == "none") m.reasoning_parser.clear();
  if (m.reasoning_parser.empty()) return m;
  const bool asked = vm.count("reasoning-parser") > 0;
  try {
    engine::make_reasoning_parser(m.reasoning_parser, *cmd.tok);  // its markers are in this vocabulary
  } catch (const Error& e) {
    if (asked) throw;
    // The template's format without its tokens: the answers as they are, said once.
    spdlog::warn("the chat template writes the {} format, but {}: chat answers are not split", m.reasoning_parser,
                 e.what());
    m.reasoning_parser.clear();
    return m;
  }
  spdlog::info("chat answers split by the {} reasoning parser{}", m.reasoning_parser,
               asked ? "" : " (the chat template's format; --reasoning-parser none turns it off)");
  return m;
}

}  // namespace linnet::cli
