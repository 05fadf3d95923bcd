// `linnet tokenize` and `linnet detokenize`: text to token ids and back, with the
// tokenizer of a checkpoint directory (see docs/tokenizers.md).
#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "launcher/commands.h"
#include "tokenizer/tokenizer.h"

namespace linnet::cli {
namespace po = boost::program_options;
using nlohmann::json;

namespace {

// Parses args; returns false (after printing help) when --help was given.
bool parse(const Args& args, const po::options_description& desc, po::variables_map& vm, const char* usage) {
  po::store(po::command_line_parser(args).options(desc).run(), vm);
  if (vm.count("help")) {
    std::cout << usage << "\n\n" << desc << "\n";
    return false;
  }
  po::notify(vm);
  return true;
}

// Calls fn(line) for each line of FILE, or of standard input for "-".
template <class Fn>
void for_each_line(const std::string& file, Fn&& fn) {
  std::ifstream f;
  std::istream* in = &std::cin;
  if (file != "-") {
    f.open(file, std::ios::binary);
    if (!f) throw Error(str("cannot open ", file));
    in = &f;
  }
  std::string line;
  std::size_t n = 0;
  while (std::getline(*in, line)) {
    ++n;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    fn(line, n);
  }
}

std::string join_ids(const std::vector<TokenId>& ids) {
  std::string s;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (i) s.push_back(' ');
    s += std::to_string(ids[i]);
  }
  return s;
}

int bench(const Tokenizer& tok, const std::string& file, double seconds, bool per_line) {
  std::ifstream f(file, std::ios::binary);
  if (!f) throw Error(str("cannot open ", file));
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::string_view> lines;  // per_line: each line (without its newline) alone
  for (std::size_t pos = 0; per_line && pos < text.size();) {
    std::size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    lines.push_back(std::string_view(text).substr(pos, eol - pos));
    pos = eol + 1;
  }
  using clock = std::chrono::steady_clock;
  std::size_t tokens = 0, runs = 0;
  double best = 1e30;
  auto t_all = clock::now();
  do {
    auto t0 = clock::now();
    if (per_line) {
      tokens = 0;
      for (auto line : lines) tokens += tok.encode(line).size();
    } else {
      tokens = tok.encode(text).size();
    }
    best = std::min(best, std::chrono::duration<double>(clock::now() - t0).count());
    ++runs;
  } while (std::chrono::duration<double>(clock::now() - t_all).count() < seconds);
  std::printf("%s%s: %zu bytes -> %zu tokens; best of %zu runs %.3f s = %.2f MB/s (1 thread)\n",
              tok.description().c_str(), per_line ? ", line by line" : "", text.size(), tokens, runs, best,
              double(text.size()) / best / 1e6);
  return 0;
}

}  // namespace

int cmd_tokenize(const Args& args) {
  po::options_description desc("linnet tokenize options");
  desc.add_options()("help,h", "this help")(
      "checkpoint", po::value<std::string>()->required(), "checkpoint directory (tokenizer.json, tokenizer.model or tokenizer.bin)")(
      "text", po::value<std::string>(), "text to encode")(
      "jsonl", po::value<std::string>(), "file (or - for stdin): one JSON string or {\"text\": ...} per line; prints a JSON array per line")(
      "bos", po::bool_switch(), "prepend the BOS token")(
      "bench", po::value<std::string>(), "measure single-threaded encoding speed on this file")(
      "bench-lines", po::bool_switch(), "with --bench: encode each line of the file on its own")(
      "bench-seconds", po::value<double>()->default_value(3.0), "minimum duration of --bench");
  po::variables_map vm;
  if (!parse(args, desc, vm, "usage: linnet tokenize --checkpoint DIR [--text TEXT | --jsonl FILE|-] [--bos]")) return 0;
  auto tok = load_tokenizer(vm["checkpoint"].as<std::string>());
  const bool bos = vm["bos"].as<bool>();
  if (vm.count("bench")) return bench(*tok, vm["bench"].as<std::string>(), vm["bench-seconds"].as<double>(), vm["bench-lines"].as<bool>());
  if (vm.count("text") == vm.count("jsonl")) throw Error("tokenize: give exactly one of --text and --jsonl");
  if (vm.count("text")) {
    std::printf("%s\n", join_ids(tok->encode(vm["text"].as<std::string>(), bos)).c_str());
    return 0;
  }
  const std::string file = vm["jsonl"].as<std::string>();
  for_each_line(file, [&](const std::string& line, std::size_t n) {
    json j;
    try {
      j = json::parse(line);
    } catch (const json::exception& e) {
      throw Error(str(file, ":", n, ": not JSON (", e.what(), ")"));
    }
    if (j.is_object() && j.contains("text")) j = j["text"];
    if (!j.is_string()) throw Error(str(file, ":", n, ": expected a JSON string or {\"text\": ...}"));
    std::printf("%s\n", json(tok->encode(j.get<std::string>(), bos)).dump().c_str());
  });
  return 0;
}

int cmd_detokenize(const Args& args) {
  po::options_description desc("linnet detokenize options");
  desc.add_options()("help,h", "this help")(
      "checkpoint", po::value<std::string>()->required(), "checkpoint directory")(
      "ids", po::value<std::string>(), "token ids, space-separated")(
      "jsonl", po::value<std::string>(), "file (or - for stdin): one JSON array of ids per line; prints a JSON string per line")(
      "skip-special", po::bool_switch(), "leave special tokens out of the text");
  po::variables_map vm;
  if (!parse(args, desc, vm, "usage: linnet detokenize --checkpoint DIR [--ids \"1 2 3\" | --jsonl FILE|-]")) return 0;
  auto tok = load_tokenizer(vm["checkpoint"].as<std::string>());
  const bool skip = vm["skip-special"].as<bool>();
  if (vm.count("ids") == vm.count("jsonl")) throw Error("detokenize: give exactly one of --ids and --jsonl");
  if (vm.count("ids")) {
    std::vector<TokenId> ids;
    std::string s = vm["ids"].as<std::string>();
    std::size_t pos = 0;
    while (pos < s.size()) {
      std::size_t b = s.find_first_not_of(" \t,\n", pos);
      if (b == std::string::npos) break;
      std::size_t e = s.find_first_of(" \t,\n", b);
      if (e == std::string::npos) e = s.size();
      std::string w = s.substr(b, e - b);
      try {
        std::size_t used = 0;
        long v = std::stol(w, &used);
        if (used != w.size()) throw std::invalid_argument(w);
        ids.push_back(TokenId(v));
      } catch (const std::exception&) {
        throw Error(str("detokenize: '", w, "' is not a token id"));
      }
      pos = e;
    }
    std::string text = tok->decode(ids, skip);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fputc('\n', stdout);
    return 0;
  }
  const std::string file = vm["jsonl"].as<std::string>();
  for_each_line(file, [&](const std::string& line, std::size_t n) {
    std::vector<TokenId> ids;
    try {
      ids = json::parse(line).get<std::vector<TokenId>>();
    } catch (const json::exception& e) {
      throw Error(str(file, ":", n, ": expected a JSON array of token ids (", e.what(), ")"));
    }
    // Invalid UTF-8 (possible with byte tokens) is written as U+FFFD.
    std::printf("%s\n", json(tok->decode(ids, skip)).dump(-1, ' ', false, json::error_handler_t::replace).c_str());
  });
  return 0;
}

}  // namespace linnet::cli
