// render_chat CHECKPOINT_DIR TEMPLATE.jinja: prints the prompt a two-message conversation
// becomes, as docs/chat_templates.md shows the library's use.
#include <cstdio>
#include <exception>
#include <string>

#include "chat/chat_template.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: render_chat CHECKPOINT_DIR TEMPLATE.jinja\n");
    return 2;
  }
  try {
    const linnet::ChatTemplate t = linnet::ChatTemplate::load(argv[1], argv[2]);
    linnet::ChatRequest r;
    r.messages = nlohmann::ordered_json::parse(R"([{"role": "system", "content": "Be brief."},
                                                   {"role": "user", "content": "Hi"}])");
    r.add_generation_prompt = true;
    r.kwargs = {{"enable_thinking", false}};
    const std::string prompt = t.render(r);
    std::fwrite(prompt.data(), 1, prompt.size(), stdout);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "render_chat: %s\n", e.what());
    return 1;
  }
  return 0;
}
