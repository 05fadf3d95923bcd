// chat_template_check CASES.json TEMPLATES_DIR [--only NAME]: renders every case that
// render_reference.py wrote (Python's jinja2 as transformers runs it) with linnet's
// ChatTemplate and compares byte for byte. Prints one line per template, then
// "N of M templates identical across K conversations"; exits 1 when any case differs or
// only one side refused it.
// chat_template_check --content-formats FORMATS.json TEMPLATES_DIR: each template's content
// format as vLLM detects it (content_format.py) against ChatTemplate::iterates_content; exits 1
// when any differs.
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>

#include "core/files.h"
#include "chat/chat_template.h"

using ojson = nlohmann::ordered_json;

namespace {

std::string shown(const std::string& s, std::size_t from, std::size_t n) {
  std::string out;
  for (std::size_t i = from; i < s.size() && i < from + n; ++i) {
    char c = s[i];
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else out += c;
  }
  return out;
}

std::time_t parse_now(const std::string& iso) {
  std::tm tm{};
  std::istringstream in(iso);
  in >> std::get_time(&tm, "%Y-%m-%dT%H:%M:%S");
  return timegm(&tm);
}

struct Outcome {
  bool ok = true;
  std::string detail;
};

}  // namespace

// --content-formats: "openai" where linnet hands content parts to the template as a list.
int check_content_formats(const std::string& formats_path, const std::string& dir) {
  const ojson formats = ojson::parse(linnet::read_text_file(formats_path, "content formats"));
  int same = 0, differ = 0;
  for (auto it = formats.begin(); it != formats.end(); ++it) {
    const std::string source = linnet::read_text_file(dir + "/" + it.key(), "template");
    const bool parts = linnet::ChatTemplate::single(source, ojson::object()).iterates_content(false);
    const std::string linnet_format = parts ? "openai" : "string";
    if (linnet_format == it.value().get<std::string>()) {
      ++same;
    } else {
      ++differ;
      std::cout << "DIFFERS  " << it.key() << ": vLLM " << it.value().get<std::string>() << ", linnet " << linnet_format
                << "\n";
    }
  }
  std::cout << same << " of " << same + differ << " templates: the content format vLLM detects\n";
  return differ ? 1 : 0;
}

int main(int argc, char** argv) {
  if (argc == 4 && std::string(argv[1]) == "--content-formats") try {
      return check_content_formats(argv[2], argv[3]);
    } catch (const std::exception& e) {
      std::cerr << "chat_template_check: " << e.what() << "\n";
      return 2;
    }
  if (argc < 3) {
    std::cerr << "usage: chat_template_check CASES.json TEMPLATES_DIR [--only TEMPLATE]\n"
                 "       chat_template_check --content-formats FORMATS.json TEMPLATES_DIR\n";
    return 2;
  }
  std::string only = argc >= 5 && std::string(argv[3]) == "--only" ? argv[4] : "";
  // strftime_now formats the fixed moment in UTC, as Python formats its naive datetime.
  setenv("TZ", "UTC", 1);
  tzset();
  ojson all;
  try {
    all = ojson::parse(linnet::read_text_file(argv[1], "cases"));
  } catch (const std::exception& e) {
    std::cerr << "chat_template_check: " << e.what() << "\n";
    return 2;
  }
  std::time_t now = parse_now(all["now"].get<std::string>());
  const ojson& conversations = all["conversations"];

  std::map<std::string, std::vector<const ojson*>> by_template;
  for (const auto& c : all["cases"]) by_template[c["template"].get<std::string>()].push_back(&c);

  int identical = 0, failed = 0, rendered_by_python = 0;
  std::size_t cases = 0;
  for (const auto& [name, list] : by_template) {
    if (!only.empty() && name != only) continue;
    std::string source = linnet::read_text_file(std::string(argv[2]) + "/" + name, "template");
    linnet::ChatTemplate tmpl = linnet::ChatTemplate::single(source, all["special_tokens"]);
    tmpl.set_clock([now] { return now; });
    int agree = 0, python_rendered = 0;
    std::string first_problem;
    for (const ojson* c : list) {
      ++cases;
      const ojson& conv = conversations[(*c)["conversation"].get<std::string>()];
      linnet::ChatRequest req;
      req.messages = conv["messages"];
      if (conv.contains("tools")) req.tools = conv["tools"];
      if (conv.contains("documents")) req.documents = conv["documents"];
      if (conv.contains("kwargs")) req.kwargs = conv["kwargs"];
      req.add_generation_prompt = (*c)["add_generation_prompt"].get<bool>();
      if ((*c)["continue_final_message"].get<bool>()) req.continue_final_message = "content";
      std::string label = (*c)["conversation"].get<std::string>() + (req.add_generation_prompt ? "+prompt" : "");
      std::string got, error;
      try {
        got = tmpl.render(req);
      } catch (const std::exception& e) {
        error = e.what();
      }
      bool python_error = c->contains("error");
      std::string problem;
      if (python_error && error.empty()) {
        problem = label + ": python refused (" + (*c)["error"].get<std::string>() + ") but linnet rendered";
      } else if (!python_error && !error.empty()) {
        problem = label + ": linnet refused (" + error + ") but python rendered";
      } else if (!python_error) {
        const std::string want = (*c)["expected"].get<std::string>();
        if (got != want) {
          std::size_t at = 0;
          while (at < got.size() && at < want.size() && got[at] == want[at]) ++at;
          std::size_t from = at > 40 ? at - 40 : 0;
          problem = label + ": differs at byte " + std::to_string(at) + "\n      python: \"" + shown(want, from, 120) +
                    "\"\n      linnet: \"" + shown(got, from, 120) + "\"";
        }
      }
      if (!python_error) ++python_rendered;
      if (problem.empty()) ++agree;
      else if (first_problem.empty()) first_problem = problem;
    }
    if (python_rendered) ++rendered_by_python;
    if (agree == int(list.size())) {
      ++identical;
      std::cout << "identical  " << name << " (" << python_rendered << " of " << list.size() << " cases rendered, the rest refused by both)\n";
    } else {
      ++failed;
      std::cout << "FAILED     " << name << " (" << list.size() - std::size_t(agree) << " of " << list.size() << " cases)\n    " << first_problem << "\n";
    }
  }
  std::cout << identical << " of " << identical + failed << " templates identical across " << conversations.size()
            << " conversations (" << cases << " cases; " << rendered_by_python << " templates rendered by Python)\n";
  return failed ? 1 : 0;
}
