// The `linnet` subcommands. Each takes its arguments (after the subcommand's name) and
// returns the process exit code; errors are thrown as linnet::Error and reported by main.
#pragma once
#include <string>
#include <vector>

namespace linnet::cli {

using Args = std::vector<std::string>;

int cmd_inspect(const Args& args);
int cmd_init(const Args& args);
int cmd_pack(const Args& args);
int cmd_quantize(const Args& args);  // launcher/quantize.cpp
int cmd_import_llama2c(const Args& args);
int cmd_run(const Args& args);
int cmd_bench(const Args& args);
int cmd_generate(const Args& args);
int cmd_eval(const Args& args);
int cmd_bench_engine(const Args& args);
int cmd_bench_sweep(const Args& args);  // launcher/bench_sweep.cpp
int cmd_serve(const Args& args);
int cmd_devices(const Args& args);
int cmd_tokenize(const Args& args);
int cmd_detokenize(const Args& args);
int cmd_apply_chat_template(const Args& args);
int cmd_run_batch(const Args& args);

}  // namespace linnet::cli
