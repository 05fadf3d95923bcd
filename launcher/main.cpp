// linnet: one command, several subcommands (see `linnet help`).
#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <map>

#include "core/error.h"
#include "launcher/commands.h"

namespace {

struct Subcommand {
  const char* name;
  const char* summary;
  std::function<int(const linnet::cli::Args&)> run;
};

const std::vector<Subcommand>& subcommands() {
  using namespace linnet::cli;
  static const std::vector<Subcommand> table = {
      {"inspect", "print the model card a checkpoint binds, and per-rank sizes", cmd_inspect},
  };
  return table;
}

void usage(FILE* out) {
  std::fprintf(out, "usage: linnet <subcommand> [options]   (linnet <subcommand> --help)\n\n");
  for (const auto& s : subcommands()) std::fprintf(out, "  %-16s %s\n", s.name, s.summary);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "help") || !std::strcmp(argv[1], "--help") ||
      !std::strcmp(argv[1], "-h")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  for (const auto& s : subcommands()) {
    if (std::strcmp(argv[1], s.name) != 0) continue;
    try {
      return s.run(linnet::cli::Args(argv + 2, argv + argc));
    } catch (const std::exception& e) {
      spdlog::error("{}", e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "linnet: unknown subcommand '%s'\n\n", argv[1]);
  usage(stderr);
  return 2;
}
