// Entry input checks (docs/entries.md "Bad input"): against the card's signature first (ranks,
// dims, dtypes), then the entry's rules (ids, positions, rows, slots, pages, packing). Every check
// runs before an entry touches state, and a failure names the entry, argument, index and rule.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "layers/card.h"
#include "layers/generics.h"

namespace linnet {

// The call's named inputs, in any order; scalars are 0-d tensors.
using EntryArgs = std::map<std::string, Tensor>;

class EntryCheck {
 public:
  // Checks args against the entry's signature, binding its per-call dims. `given` binds
  // dims that no input fixes (Steps, MaxNew).
  EntryCheck(const std::string& entry, const EntryArgs& args, const Generics& g,
             const std::map<std::string, int64_t>& given = {});

  int64_t dim(const std::string& name) const { return dims_.at(name); }
  const Tensor& arg(const std::string& name) const { return args_.at(name); }
  std::vector<int64_t> values(const std::string& name) const { return args_.at(name).to_ints(); }

  [[noreturn]] void fail(const std::string& what) const;
  // Each element of arg in [lo, hi); `hi_name` shows the bound's meaning ("Vocab").
  // Elements below skip_below are allowed as "idle"/"padding" (pass lo to allow none).
  void in_range(const std::string& arg, int64_t lo, int64_t hi, const std::string& hi_name,
                int64_t skip_below) const;
  // arg[index] = value formatted with the tensor's multi-index.
  std::string at(const std::string& arg, int64_t flat) const;

 private:
  std::string entry_;
  EntryArgs args_;  // a copy: callers pass temporaries (tensors are handles)
  std::map<std::string, int64_t> dims_;
};

// The packing rules (docs/entries.md "The entries") over args "segments" and "positions": each
// segment value is one contiguous run and positions strictly increase inside it. Returns, per
// token, the index of its run's first token.
std::vector<int32_t> packed_runs(const EntryCheck& c);

}  // namespace linnet
