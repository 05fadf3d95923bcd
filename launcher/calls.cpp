#include "launcher/calls.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <functional>
#include <limits>
#include <set>
#include <nlohmann/json.hpp>

#include "core/files.h"
#include "layers/card.h"

namespace linnet::cli {

namespace {

using nlohmann::json;

// The largest finite value of a float dtype.
double float_max(DType t) {
  if (t == DType::f16) return 65504.0;
  if (t == DType::bf16) return 3.3895313892515355e38;
  return FLT_MAX;
}

// One JSON number as an element of dtype `dt`, or an error saying why it does not fit.
double element(const json& x, DType dt, const std::string& where) {
  if (!x.is_number()) throw Error(str(where, " = ", x.dump(), ": expected a number"));
  if (is_float(dt)) {
    const double v = x.get<double>();
    if (!std::isfinite(v) || std::fabs(v) > float_max(dt))
      throw Error(str(where, " = ", x.dump(), " is not a finite ", dtype_name(dt), " value"));
    return v;
  }
  if (!x.is_number_integer())
    throw Error(str(where, " = ", x.dump(), " is not an integer (", dtype_name(dt), " takes JSON integers only)"));
  const int64_t lo = dt == DType::i32 ? std::numeric_limits<int32_t>::min() : std::numeric_limits<int64_t>::min();
  const int64_t hi = dt == DType::i32 ? std::numeric_limits<int32_t>::max() : std::numeric_limits<int64_t>::max();
  const bool too_big = x.is_number_unsigned() && x.get<uint64_t>() > static_cast<uint64_t>(hi);
  if (too_big || x.get<int64_t>() < lo || x.get<int64_t>() > hi)
    throw Error(str(where, " = ", x.dump(), " does not fit ", dtype_name(dt), " [", lo, ", ", hi, "]"));
  return static_cast<double>(x.get<int64_t>());
}

// A JSON array nested to the argument's rank (or a number, for a scalar) as a tensor of its dtype.
Tensor inline_tensor(const json& v, const card::Arg& arg, DType t, const std::string& where) {
  const DType dt = parse_dtype(arg.dtype == "T" ? dtype_name(t) : arg.dtype);
  const size_t rank = arg.is_tensor ? arg.dims.size() : 0;
  std::vector<int64_t> dims;
  const json* cur = &v;
  for (size_t d = 0; d < rank; ++d) {
    if (!cur->is_array())
      throw Error(str(where, ": expected a rank-", rank, " array (", card::format_type(arg), "), got ", d,
                      " level(s) of nesting"));
    dims.push_back(static_cast<int64_t>(cur->size()));
    if (cur->empty()) break;
    cur = &(*cur)[0];
  }
  if (dims.size() < rank) dims.resize(rank, 0);  // an empty array: zero elements
  std::vector<int64_t> ints;
  std::vector<float> floats;
  std::vector<int64_t> index(rank, 0);
  // Row-major walk (recursion as deep as the rank, at most 3), checking every row has its dims' length.
  std::function<void(const json&, size_t)> walk = [&](const json& x, size_t depth) {
    if (depth == rank) {
      std::string at = arg.name;
      if (rank) {
        at += "[";
        for (size_t i = 0; i < rank; ++i) at += (i ? ", " : "") + std::to_string(index[i]);
        at += "]";
      }
      const double e = element(x, dt, str(where, ": ", at));
      if (is_float(dt)) floats.push_back(static_cast<float>(e));
      else ints.push_back(static_cast<int64_t>(e));
      return;
    }
    if (!x.is_array() || static_cast<int64_t>(x.size()) != dims[depth])
      throw Error(str(where, ": ", arg.name, " is a ragged array (every row needs ", dims[depth], " elements, ",
                      card::format_type(arg), ")"));
    for (size_t i = 0; i < x.size(); ++i) {
      index[depth] = static_cast<int64_t>(i);
      walk(x[i], depth + 1);
    }
  };
  walk(v, 0);  // depth ≤ the argument's rank (≤ 2): no deep recursion
  if (is_float(dt)) return Tensor::from_floats(Shape(dims), floats, dt);
  return Tensor::from_ints(Shape(dims), ints, dt);
}

// "B: Dim, Steps: Dim" → {"B", "Steps"}.
std::vector<std::string> generic_names(const card::Function& f) {
  std::vector<std::string> names;
  size_t at = 0;
  while (at < f.generics.size()) {
    const size_t colon = f.generics.find(':', at);
    std::string n = f.generics.substr(at, colon - at);
    n.erase(0, n.find_first_not_of(' '));
    names.push_back(n);
    const size_t comma = f.generics.find(',', colon);
    at = comma == std::string::npos ? f.generics.size() : comma + 1;
  }
  return names;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s.empty() ? "none" : s;
}

Call read_call(const json& c, const std::string& where, const std::map<std::string, Tensor>& inputs, const Generics& g) {
  if (!c.is_object() || !c.contains("entry") || !c["entry"].is_string())
    throw Error(str(where, ": needs \"entry\": \"<name>\""));
  for (const auto& [key, v] : c.items())
    if (key != "entry" && key != "args" && key != "generics" && key != "outputs")
      throw Error(str(where, ": unknown key '", key, "' (a call has entry, args, generics, outputs)"));
  Call call;
  call.entry = c["entry"].get<std::string>();
  const card::Function* fp = nullptr;
  try {
    fp = &card::entry(call.entry);
  } catch (const Error& e) {
    throw Error(str(where, ": ", e.what()));
  }
  const card::Function& f = *fp;
  const std::string at = str(where, " (", call.entry, ")");
  const json args = c.value("args", json::object());
  if (!args.is_object()) throw Error(str(at, ": \"args\" must be an object"));
  for (const auto& [name, v] : args.items()) {
    const card::Arg* arg = nullptr;
    for (const auto& a : f.args)
      if (a.name == name) arg = &a;
    if (!arg) throw Error(str(at, ": no argument '", name, "' (signature: ", card::format_signature(f), ")"));
    if (v.is_string()) {
      auto it = inputs.find(v.get<std::string>());
      if (it == inputs.end()) throw Error(str(at, ": input tensor '", v.get<std::string>(), "' is not in --inputs"));
      call.args[name] = it->second;
    } else if (v.is_array() || v.is_number()) {  // a scalar, or a small tensor written inline
      call.args[name] = inline_tensor(v, *arg, g.t, at);
    } else {
      throw Error(str(at, ": argument '", name, "' must name an input tensor, or be a number or an array"));
    }
  }
  const json generics = c.value("generics", json::object());
  if (!generics.is_object()) throw Error(str(at, ": \"generics\" must be an object"));
  const auto allowed = generic_names(f);
  for (const auto& [name, v] : generics.items()) {
    if (std::find(allowed.begin(), allowed.end(), name) == allowed.end())
      throw Error(str(at, ": unknown generic '", name, "' (", call.entry, "'s generics: ", join(allowed), ")"));
    if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT32_MAX)) ||
        v.get<int64_t>() < 1 || v.get<int64_t>() > INT32_MAX)
      throw Error(str(at, ": generic ", name, " = ", v.dump(), " must be an integer in [1, ", INT32_MAX, "]"));
    call.generics[name] = v.get<int64_t>();
  }
  const json outputs = c.value("outputs", json::array());
  if (!outputs.is_array()) throw Error(str(at, ": \"outputs\" must be a list of names"));
  for (const auto& o : outputs) {
    if (!o.is_string()) throw Error(str(at, ": outputs must be names, got ", o.dump()));
    call.outputs.push_back(o.get<std::string>());
  }
  if (!call.outputs.empty() && call.outputs.size() != f.results.size())
    throw Error(str(at, ": ", call.entry, " returns ", f.results.size(), " result(s), but ", call.outputs.size(),
                    " output name(s) were given"));
  try {
    EntryCheck(call.entry, call.args, g, call.generics);  // the signature, as the model will check it
  } catch (const Error& e) {
    throw Error(str(where, ": ", e.what()));
  }
  return call;
}

}  // namespace

std::vector<Call> read_calls(const std::string& path, const std::map<std::string, Tensor>& inputs, const Generics& g) {
  const json j = read_json_file(path, "calls file");
  if (!j.is_array()) throw Error(str(path, ": expected a list of calls"));
  std::vector<Call> calls;
  std::set<std::string> names;
  for (size_t i = 0; i < j.size(); ++i) {
    calls.push_back(read_call(j[i], str(path, ": call ", i), inputs, g));
    for (const auto& o : calls.back().outputs)
      if (!names.insert(o).second) throw Error(str(path, ": call ", i, ": output name '", o, "' is used twice"));
  }
  return calls;
}

}  // namespace linnet::cli
