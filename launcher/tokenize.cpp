// `linnet tokenize` and `linnet detokenize`: text to token ids and back, with the
// tokenizer of a checkpoint directory (see docs/tokenizers.md).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/files.h"
#include "launcher/options.h"
#include "tokenizer/tokenizer.h"

namespace linnet::cli {
using nlohmann::json;

namespace {

// Calls fn(line) for each line of FILE, or of standard input for "-".
template <class Fn>
void for_each_line(const std::string& file, Fn&& fn) {
  std::ifstream f;
  std::istream* in = &std::cin;
  if (file != "-") {
    require_regular_file(file, "input");
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
  const std::string text = read_text_file(file, "benchmark text");
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
  desc.add_options()(
      "checkpoint", po::value<std::string>()->required(), "checkpoint directory (tokenizer.json, tokenizer.model or tokenizer.bin)")(
      "text", po::value<std::string>(), "text to encode")(
      "jsonl", po::value<std::string>(), "file (or - for stdin): one JSON string or {\"text\": ...} per line; prints a JSON array per line")(
      "bos", po::bool_switch(), "prepend the BOS token (as --add-bos yes)")(
      "add-bos", po::value<std::string>()->default_value("no"),
      "auto (as transformers' tokenizer for the checkpoint adds it: what generate, eval and serve do), yes or no")(
      "bench", po::value<std::string>(), "measure single-threaded encoding speed on this file")(
      "bench-lines", po::bool_switch(), "with --bench: encode each line of the file on its own")(
      "bench-seconds", po::value<double>()->default_value(3.0), "minimum duration of --bench");
  po::variables_map vm;
  if (!parse(args, desc, vm, "linnet tokenize")) return 0;
  if (!vm.count("bench") && vm.count("text") == vm.count("jsonl"))
    throw UsageError("tokenize: give exactly one of --text and --jsonl");
  auto tok = load_tokenizer(vm["checkpoint"].as<std::string>());
  if (vm["bos"].as<bool>() && !vm["add-bos"].defaulted()) throw UsageError("tokenize: --bos is --add-bos yes: give one");
  const bool bos = vm["bos"].as<bool>() || add_bos_from(vm, vm["checkpoint"].as<std::string>(), *tok);
  if (vm.count("bench")) return bench(*tok, vm["bench"].as<std::string>(), vm["bench-seconds"].as<double>(), vm["bench-lines"].as<bool>());
  if (vm.count("text")) {
    std::printf("%s\n", join_ids(tok->encode(vm["text"].as<std::string>(), bos)).c_str());
    return 0;
  }
  const std::string file = vm["jsonl"].as<std::string>();
  for_each_line(file, [&](const std::string& line, std::size_t n) {
    json j;
    j = parse_json(line, str(file, ":", n));
    if (j.is_object() && j.contains("text")) j = j["text"];
    if (!j.is_string()) throw Error(str(file, ":", n, ": expected a JSON string or {\"text\": ...}"));
    std::printf("%s\n", json(tok->encode(j.get<std::string>(), bos)).dump().c_str());
  });
  return 0;
}

int cmd_detokenize(const Args& args) {
  po::options_description desc("linnet detokenize options");
  desc.add_options()(
      "checkpoint", po::value<std::string>()->required(), "checkpoint directory")(
      "ids", po::value<std::string>(), "token ids, space-separated")(
      "jsonl", po::value<std::string>(), "file (or - for stdin): one JSON array of ids per line; prints a JSON string per line")(
      "skip-special", po::bool_switch(), "leave special tokens out of the text");
  po::variables_map vm;
  if (!parse(args, desc, vm, "linnet detokenize")) return 0;
  if (vm.count("ids") == vm.count("jsonl")) throw UsageError("detokenize: give exactly one of --ids and --jsonl");
  auto tok = load_tokenizer(vm["checkpoint"].as<std::string>());
  const bool skip = vm["skip-special"].as<bool>();
  const int64_t vocab = static_cast<int64_t>(tok->vocab_size());
  auto check_id = [&](int64_t v, const std::string& where) {
    if (v < 0 || v >= vocab) throw Error(str(where, ": token id ", v, " is outside [0, vocab size=", vocab, ")"));
    return static_cast<TokenId>(v);
  };
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
      long long v = 0;
      std::size_t used = 0;
      try {
        v = std::stoll(w, &used);
      } catch (const std::exception&) {
        used = 0;  // not a number, or beyond 64 bits: either way not a token id
      }
      if (used != w.size() || w.empty()) throw Error(str("detokenize: --ids: '", w, "' is not a token id"));
      ids.push_back(check_id(v, str("detokenize: --ids[", ids.size(), "]")));
      pos = e;
    }
    std::string text = tok->decode(ids, skip);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fputc('\n', stdout);
    return 0;
  }
  const std::string file = vm["jsonl"].as<std::string>();
  for_each_line(file, [&](const std::string& line, std::size_t n) {
    const json j = parse_json(line, str(file, ":", n));
    if (!j.is_array()) throw Error(str(file, ":", n, ": expected a JSON array of token ids"));
    std::vector<TokenId> ids;
    for (size_t i = 0; i < j.size(); ++i) {
      const std::string where = str(file, ":", n, ": [", i, "]");
      if (!j[i].is_number_integer()) throw Error(str(where, ": ", j[i].dump(), " is not a token id"));
      if (j[i].is_number_unsigned() && j[i].get<uint64_t>() >= uint64_t(vocab))
        throw Error(str(where, ": token id ", j[i].get<uint64_t>(), " is outside [0, vocab size=", vocab, ")"));
      ids.push_back(check_id(j[i].get<int64_t>(), where));
    }
    // Invalid UTF-8 (possible with byte tokens) is written as U+FFFD.
    std::printf("%s\n", json(tok->decode(ids, skip)).dump(-1, ' ', false, json::error_handler_t::replace).c_str());
  });
  return 0;
}

}  // namespace linnet::cli
