#include "layers/validate.h"

#include <cctype>
#include <set>

#include "core/error.h"

namespace linnet {

namespace {

// The model's generics by their card names.
bool model_dim(const Generics& g, const std::string& name, int64_t& value) {
  const std::map<std::string, int64_t> dims = {{"Vocab", g.vocab}, {"H", g.hidden},     {"Heads", g.heads},
                                               {"KvHeads", g.kv_heads}, {"Inner", g.inner}, {"Layers", g.layers},
                                               {"Batch", g.batch}, {"MaxSeq", g.max_seq}};
  auto it = dims.find(name);
  if (it == dims.end()) return false;
  value = it->second;
  return true;
}

std::string expected_dims(const card::Arg& a) {
  std::string s = "[";
  for (size_t i = 0; i < a.dims.size(); ++i) s += (i ? ", " : "") + a.dims[i];
  return s + "]";
}

}  // namespace

EntryCheck::EntryCheck(const std::string& entry, const EntryArgs& args, const Generics& g,
                       const std::map<std::string, int64_t>& given)
    : entry_(entry), args_(args), dims_(given) {
  const card::Function& f = card::entry(entry);
  for (const auto& [name, t] : args) {
    bool known = false;
    for (const auto& a : f.args) known |= a.name == name;
    if (!known) fail(str("unexpected argument '", name, "' (signature: ", card::format_signature(f), ")"));
  }
  for (const auto& a : f.args) {
    auto it = args.find(a.name);
    if (it == args.end() || !it->second.defined())
      fail(str("missing argument '", a.name, "' (signature: ", card::format_signature(f), ")"));
    const Tensor& t = it->second;
    const DType want = parse_dtype(a.dtype == "T" ? dtype_name(g.t) : a.dtype);
    if (t.dtype() != want)
      fail(str(a.name, " has dtype ", dtype_name(t.dtype()), ", expected ", card::format_type(a)));
    if (t.rank() != a.dims.size())
      fail(str(a.name, " has shape ", t.shape().to_string(), ", expected ", card::format_type(a)));
    for (size_t i = 0; i < a.dims.size(); ++i) {
      const std::string& d = a.dims[i];
      const int64_t have = t.dim(i);
      int64_t want_v = 0;
      std::string rule;
      if (std::isdigit(static_cast<unsigned char>(d[0]))) {
        want_v = std::stoll(d);
      } else if (model_dim(g, d, want_v)) {
        rule = str(" with ", d, "=", want_v);
      } else if (auto b = dims_.find(d); b != dims_.end()) {
        want_v = b->second;
        rule = str(" with ", d, "=", want_v, " (bound earlier)");
      } else {
        if (have < 1) fail(str(a.name, " has shape ", t.shape().to_string(), ": ", d, " must be at least 1"));
        dims_[d] = want_v = have;
      }
      if (have != want_v)
        fail(str(a.name, " has shape ", t.shape().to_string(), ", expected ", expected_dims(a), rule));
    }
  }
  // Dims that only the caller can give (Steps, MaxNew).
  for (const auto& r : f.results)
    for (const auto& d : r.dims) {
      int64_t v;
      if (std::isdigit(static_cast<unsigned char>(d[0])) || model_dim(g, d, v) || d.find(' ') != std::string::npos)
        continue;
      auto b = dims_.find(d);
      if (b == dims_.end()) fail(str("generic ", d, " is not given (say how many, e.g. \"generics\": {\"", d, "\": 16})"));
      if (b->second < 1) fail(str("generic ", d, " = ", b->second, " must be at least 1"));
    }
}

void EntryCheck::fail(const std::string& what) const { throw Error(str(entry_, ": ", what)); }

std::string EntryCheck::at(const std::string& arg, int64_t flat) const {
  const Tensor& t = args_.at(arg);
  if (t.rank() == 0) return arg;
  std::string idx;
  for (size_t i = t.rank(); i-- > 0;) {
    idx = std::to_string(flat % t.dim(i)) + (idx.empty() ? "" : ", ") + idx;
    flat /= t.dim(i);
  }
  return arg + "[" + idx + "]";
}

void EntryCheck::in_range(const std::string& arg, int64_t lo, int64_t hi, const std::string& hi_name,
                          int64_t skip_below) const {
  const auto v = values(arg);
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] < skip_below) continue;
    if (v[i] < lo || v[i] >= hi)
      fail(str(at(arg, static_cast<int64_t>(i)), " = ", v[i], " is outside [", lo, ", ", hi_name, "=", hi, ")"));
  }
}

std::vector<int32_t> packed_runs(const EntryCheck& c) {
  const auto seg = c.values("segments"), pos = c.values("positions");
  std::vector<int32_t> start(seg.size());
  std::set<int64_t> ended;
  for (size_t p = 0; p < seg.size(); ++p) {
    if (p > 0 && seg[p] == seg[p - 1]) {
      start[p] = start[p - 1];
      if (pos[p] <= pos[p - 1])
        c.fail(str(c.at("positions", p), " = ", pos[p], " does not increase within its run (", c.at("positions", p - 1),
                   " = ", pos[p - 1], ")"));
      continue;
    }
    if (p > 0) ended.insert(seg[p - 1]);
    if (ended.count(seg[p]))
      c.fail(str(c.at("segments", p), " = ", seg[p], " reappears after its run ended (each segment is one contiguous run)"));
    start[p] = static_cast<int32_t>(p);
  }
  return start;
}

}  // namespace linnet
