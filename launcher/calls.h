// CALLS.json (docs/cli.md): the entries `linnet run` calls, read and checked against the card
// before any model is loaded, so a typo fails in a second rather than after the load.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "layers/generics.h"
#include "layers/validate.h"

namespace linnet::cli {

struct Call {
  std::string entry;
  EntryArgs args;
  std::map<std::string, int64_t> generics;  // the entry's own (Steps, MaxNew, …)
  std::vector<std::string> outputs;
};

// Parses the file, builds inline tensors (every value must fit its argument's dtype exactly),
// resolves names against `inputs`, and checks each call's signature (names, dtypes, shapes,
// generics) against the card as `g` binds it. Errors name the file, the call, the entry, the
// argument and the index.
std::vector<Call> read_calls(const std::string& path, const std::map<std::string, Tensor>& inputs, const Generics& g);

}  // namespace linnet::cli
