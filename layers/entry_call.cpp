// Model::call: any entry by name, with inputs by argument name (the launcher's way in).
#include "layers/model.h"

namespace linnet {

namespace {
const Tensor& need(const EntryArgs& a, const std::string& entry, const char* name) {
  auto it = a.find(name);
  if (it == a.end()) throw Error(str(entry, ": missing argument '", name, "' (signature: ",
                                     card::format_signature(card::entry(entry)), ")"));
  return it->second;
}
// A scalar argument's value after the entry's own check has seen its dtype and rank.
int32_t as_i32(const Tensor& t) { return t.numel() == 1 ? static_cast<int32_t>(t.to_ints()[0]) : 0; }
float as_f32(const Tensor& t) { return t.numel() == 1 ? t.to_floats()[0] : 0.0f; }
int64_t given(const std::map<std::string, int64_t>& g, const std::string& entry, const char* name) {
  auto it = g.find(name);
  if (it == g.end())
    throw Error(str(entry, ": generic ", name, " is not given (say how many, e.g. \"generics\": {\"", name, "\": 16})"));
  return it->second;
}
}  // namespace

std::vector<Tensor> Model::call(const std::string& entry, const EntryArgs& a, const std::map<std::string, int64_t>& g) {
  card::entry(entry);  // unknown names fail here
  for (const auto& [name, t] : a) {
    bool known = false;
    for (const auto& arg : card::entry(entry).args) known |= arg.name == name;
    if (!known) throw Error(str(entry, ": unexpected argument '", name, "' (signature: ",
                                card::format_signature(card::entry(entry)), ")"));
  }
  auto in = [&](const char* name) -> const Tensor& { return need(a, entry, name); };
  // Scalars go through the entries' checks as tensors, so a wrong dtype is reported there.
  auto scalar_ok = [&](const char* name, DType want) {
    const Tensor& t = in(name);
    if (t.dtype() != want || t.rank() != 0)
      EntryCheck(entry, a, g_, g);  // reports the mismatch against the signature
  };
  if (entry == "forward") return {forward(in("tokens"))};
  if (entry == "next_token") return {next_token(in("tokens"))};
  if (entry == "decode") return scalar_ok("pos", DType::i32), std::vector<Tensor>{decode(in("token"), as_i32(in("pos")))};
  if (entry == "prefill")
    return scalar_ok("pos", DType::i32), std::vector<Tensor>{prefill(in("tokens"), as_i32(in("pos")))};
  if (entry == "decode_rows") return {decode_rows(in("tokens"), in("positions"))};
  if (entry == "prefill_slots") return {prefill_slots(in("tokens"), in("slots"), in("lengths"))};
  if (entry == "loss_packed")
    return {Tensor::scalar_f32(
        loss_packed(in("tokens"), in("positions"), in("segments"), in("targets"), in("weights")))};
  if (entry == "log_probs_packed") return {log_probs_packed(in("tokens"), in("positions"), in("segments"), in("targets"))};
  if (entry == "hidden_packed") return {hidden_packed(in("tokens"), in("positions"), in("segments"))};
  if (entry == "prefill_packed")
    return {prefill_packed(in("tokens"), in("rows"), in("positions"), in("segments"), in("last"))};
  if (entry == "step_packed")
    return {step_packed(in("tokens"), in("rows"), in("positions"), in("segments"), in("last"), in("step_tokens"),
                        in("step_positions"))};
  if (entry == "decode_paged") return {decode_paged(in("tokens"), in("positions"), in("table"))};
  if (entry == "prefill_paged")
    return {prefill_paged(in("tokens"), in("positions"), in("rows"), in("slots"), in("last"), in("table"))};
  if (entry == "step_paged")
    return {step_paged(in("tokens"), in("positions"), in("rows"), in("slots"), in("last"), in("step_tokens"),
                       in("step_positions"), in("table"))};
  if (entry == "generate")
    return scalar_ok("pos", DType::i32),
           std::vector<Tensor>{generate(in("token"), as_i32(in("pos")), given(g, entry, "Steps"))};
  if (entry == "sample")
    return scalar_ok("pos", DType::i32), scalar_ok("temperature", DType::f32),
           std::vector<Tensor>{sample(in("token"), as_i32(in("pos")), in("key"), as_f32(in("temperature")),
                                      given(g, entry, "Steps"))};
  // generate_until
  scalar_ok("pos", DType::i32);
  scalar_ok("eos", DType::i32);
  auto [tokens, n] = generate_until(in("token"), as_i32(in("pos")), as_i32(in("eos")), given(g, entry, "MaxNew"));
  return {tokens, Tensor::scalar_i32(n)};
}

}  // namespace linnet
