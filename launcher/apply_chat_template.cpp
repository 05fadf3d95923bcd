// linnet apply-chat-template: the prompt a conversation becomes — the checkpoint's chat
// template (or another) rendered as the server and `generate` render it, printed exactly
// (or its token ids, no BOS added: the template writes its own). docs/usage.md.
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/files.h"
#include "engine/chat_request.h"
#include "engine/request_rules.h"
#include "launcher/options.h"
#include "chat/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace linnet::cli {

using ojson = nlohmann::ordered_json;

int cmd_apply_chat_template(const Args& args) {
  po::options_description desc("linnet apply-chat-template");
  desc.add_options()
      ("checkpoint", po::value<std::string>()->required(), "checkpoint directory (its tokenizer and chat template)")
      ("messages", po::value<std::string>()->required(),
       "FILE.json: a list of {\"role\", \"content\"} messages, or a chat request's object (messages, "
       "chat_template_kwargs, …)")
      ("no-generation-prompt", "end after the last message (no assistant turn opened)")
      ("continue-final-message", "leave the last message open, for the model to continue it")
      ("tools", po::value<std::string>(), "FILE.json: a list of tools (JSON schemas) for the template")
      ("template", po::value<std::string>(), "NAME of one of the checkpoint's templates (\"tool_use\"), or a FILE to use instead")
      ("kwargs", po::value<std::string>(), "JSON object of the template's other variables, e.g. '{\"enable_thinking\": false}'")
      ("ids", "print the token ids of the text instead (space-separated; no BOS added)");
  po::variables_map vm;
  if (!parse(args, desc, vm, "linnet apply-chat-template")) return 0;
  const std::string dir = vm["checkpoint"].as<std::string>();
  const std::string file = vm["messages"].as<std::string>();

  // The conversation, its keys in the order written.
  ojson request = parse_ordered_json(read_text_file(file, "conversation"), file);
  if (request.is_array()) request = ojson{{"messages", request}};
  if (!request.is_object())
    throw Error(str(file, ": expected a JSON list of messages, or an object with \"messages\""));
  if (vm.count("no-generation-prompt")) request["add_generation_prompt"] = false;
  if (vm.count("continue-final-message")) request["continue_final_message"] = true;
  if (vm.count("tools")) {
    const std::string tools = vm["tools"].as<std::string>();
    request["tools"] = parse_ordered_json(read_text_file(tools, "tools"), tools);
  }
  if (vm.count("kwargs")) request["chat_template_kwargs"] = parse_ordered_json(vm["kwargs"].as<std::string>(), "--kwargs");

  // --template: a file that exists is a template; anything else names one of the checkpoint's.
  std::string override_file;
  std::optional<std::string> name;
  if (vm.count("template")) {
    const std::string t = vm["template"].as<std::string>();
    std::error_code ec;
    if (std::filesystem::exists(t, ec)) override_file = t;
    else name = t;
  }
  const ChatTemplate chat = [&] {
    try {
      return ChatTemplate::load(dir, override_file);
    } catch (const Error& e) {
      if (!override_file.empty()) throw;
      // As the server says it (with its own option's name): what to give instead.
      throw Error(str(e.what(), "; give one with --template FILE"));
    }
  }();
  if (const std::string p = chat.problem(); !p.empty())
    throw Error(str(override_file.empty() ? dir : override_file, ": the chat template does not parse: ", p));
  auto tok = load_tokenizer(dir);
  engine::ChatPrompt prompt;
  try {
    prompt = engine::chat_prompt(chat, engine::read_chat_request(request, chat, name), *tok,
                                 static_cast<int64_t>(tok->vocab_size()));
  } catch (const engine::FieldError& e) {
    throw Error(str(file, ": ", e.what()));
  }
  if (vm.count("ids")) {
    std::string line;
    for (size_t i = 0; i < prompt.ids.size(); ++i) {
      if (i) line += ' ';
      line += std::to_string(prompt.ids[i]);
    }
    std::printf("%s\n", line.c_str());
  } else {
    std::fwrite(prompt.text.data(), 1, prompt.text.size(), stdout);  // exactly: no newline added
  }
  return 0;
}

}  // namespace linnet::cli
