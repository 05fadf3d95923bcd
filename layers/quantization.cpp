#include "layers/quantization.h"

#if LINNET_HAVE_PCRE2
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#endif

#include <algorithm>
#include <map>

#include "core/error.h"

namespace linnet {

namespace {

#if LINNET_HAVE_PCRE2
// Python's re.match(rf"(?:{pattern}){boundary}", module) with transformers' boundary: the match
// runs from the start to the name's end, to just before a '.', or to just after one. PCRE2,
// with a match limit: a pattern from a config file must not hang a load.
bool matches_at_boundary(const std::string& pattern, const std::string& module, bool boundary = true) {
  const std::string full = boundary ? "(?:" + pattern + ")(?:(?<=\\.)|(?=\\.|$))" : pattern;
  int err = 0;
  PCRE2_SIZE off = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(full.data()), full.size(), PCRE2_ANCHORED | PCRE2_UTF, &err, &off, nullptr);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    throw Error(str("quantization_config: the module pattern '", pattern, "' is not a regular expression: ",
                    reinterpret_cast<const char*>(msg)));
  }
  pcre2_match_context* ctx = pcre2_match_context_create(nullptr);
  pcre2_set_match_limit(ctx, 100000);
  pcre2_set_depth_limit(ctx, 1000);
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
  const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(module.data()), module.size(), 0, 0, md, ctx);
  pcre2_match_data_free(md);
  pcre2_match_context_free(ctx);
  pcre2_code_free(code);
  if (rc >= 0) return true;
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  throw Error(str("quantization_config: the module pattern '", pattern, "' cannot be matched against '", module,
                  "' within PCRE2's limits (error ", rc, ")"));
}
#else
// Without PCRE2 (not a supported build: scripts/deps installs it): literal prefixes only.
bool matches_at_boundary(const std::string& pattern, const std::string& module, bool = true) {
  return module.rfind(pattern, 0) == 0 &&
         (module.size() == pattern.size() || module[pattern.size()] == '.' || pattern.back() == '.');
}
#endif

}  // namespace

bool Quantization::converts(const std::string& module) const {
  if (module == "lm_head") return false;
  if (compressed_tensors_names) {
    for (const std::string& p : not_converted)
      if (p == module || (p.rfind("re:", 0) == 0 && matches_at_boundary(p.substr(3), module, false))) return false;
    return true;
  }
  for (const std::string& p : not_converted) {
    if (p.empty()) continue;
    if (module.size() >= p.size() && module.compare(module.size() - p.size(), p.size(), p) == 0) return false;
    if (matches_at_boundary(p, module)) return false;
  }
  return true;
}

const WeightLayout* Quantization::layout_of(const std::string& module) const {
  if (!converts(module)) return nullptr;
  if (schemes.empty()) return &matrices;
  // compressed-tensors' apply_quantization_config: each target names the last group that lists
  // it; a module's matching targets, sorted (names before re: patterns, each alphabetically),
  // then Linear (its class); the first one's scheme.
  std::map<std::string, const WeightLayout*> scheme_of;
  for (const Scheme& s : schemes)
    for (const std::string& t : s.targets) scheme_of[t] = &s.layout;
  std::vector<std::string> targets;
  for (const auto& [t, l] : scheme_of) targets.push_back(t);
  std::sort(targets.begin(), targets.end(), [](const std::string& a, const std::string& b) {
    const bool ra = a.rfind("re:", 0) == 0, rb = b.rfind("re:", 0) == 0;
    return ra != rb ? rb : a < b;
  });
  for (const std::string& t : targets) {
    const bool re = t.rfind("re:", 0) == 0;
    if (re ? matches_at_boundary(t.substr(3), module, false) : t == module) return scheme_of[t];
  }
  const auto linear = scheme_of.find("Linear");
  return linear == scheme_of.end() ? nullptr : linear->second;
}

std::string Quantization::describe() const {
  std::string s = schemes.empty() ? matrices.describe() : "";
  for (const Scheme& g : schemes) {  // "Linear: int4 groups of 16; re:.*self_attn.*: fp8 per channel"
    s += s.empty() ? "" : "; ";
    for (size_t i = 0; i < g.targets.size(); ++i) s += (i ? ", " : "") + g.targets[i];
    s += ": " + g.layout.describe();
  }
  if (!not_converted.empty()) {
    s += " (not converted:";
    for (const auto& p : not_converted) s += " " + p;
    s += ")";
  }
  return s;
}

}  // namespace linnet
