// Shared command-line plumbing for the subcommands (Boost.Program_options).
#pragma once
#include <boost/program_options.hpp>
#include <iostream>

#include "launcher/commands.h"
#include "layers/generics.h"

namespace linnet::cli {

namespace po = boost::program_options;

// Parses args against desc; prints usage and returns false for --help.
bool parse(const Args& args, po::options_description& desc, po::variables_map& vm, const char* usage);

// --batch, --max-seq, --page-size, --shards, --dtype.
void add_run_options(po::options_description& desc);
RunOptions run_options(const po::variables_map& vm);

}  // namespace linnet::cli
