#include "engine/evaluator.h"

#include <algorithm>

#include "core/error.h"
#include "layers/model.h"

namespace linnet::engine {

std::vector<Window> rolling_windows(size_t request, const std::vector<int32_t>& tokens, int32_t prefix,
                                    int64_t max_len) {
  std::vector<Window> out;
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n == 0) return out;
  const int64_t first = std::min(max_len, n);
  Window w{request, {prefix}, {}};
  w.scored.assign(tokens.begin(), tokens.begin() + first);
  out.push_back(std::move(w));
  for (int64_t predicted = first; predicted < n;) {
    const int64_t len = std::min(n - predicted, max_len), end = predicted + len;
    // Input positions end − max_len − 1 … end − 2; the disjoint context is what precedes the
    // scored tokens there.
    const int64_t ctx_begin = std::max<int64_t>(0, end - max_len - 1);
    Window v{request, {}, {}};
    v.context.assign(tokens.begin() + ctx_begin, tokens.begin() + predicted);
    v.scored.assign(tokens.begin() + predicted, tokens.begin() + end);
    out.push_back(std::move(v));
    predicted = end;
  }
  return out;
}

Window continuation_window(size_t request, std::vector<int32_t> context, const std::vector<int32_t>& continuation,
                           int32_t prefix, int64_t max_len) {
  // lm-eval would slice the wrong logits for it (logits[inplen - contlen : inplen] with
  // contlen > inplen): a line of its own error instead.
  if (static_cast<int64_t>(continuation.size()) > max_len)
    throw Error(str("the continuation is ", continuation.size(), " tokens, more than a window can score: a window "
                    "holds max_length = ", max_len, " tokens after at least one of context (--max-length; "
                    "lm-eval's max_length)"));
  if (context.empty()) context = {prefix};
  // The model sees the last max_len tokens of context + continuation minus its last token.
  const int64_t total = static_cast<int64_t>(context.size() + continuation.size());
  const int64_t drop = std::max<int64_t>(0, total - (max_len + 1));
  Window w{request, {}, continuation, true};
  if (drop < static_cast<int64_t>(context.size())) w.context.assign(context.begin() + drop, context.end());
  else w.scored.erase(w.scored.begin(), w.scored.begin() + (drop - static_cast<int64_t>(context.size())));
  return w;
}

Evaluator::Evaluator(Model& model, int64_t token_budget) : model_(model), budget_(token_budget) {}

void Evaluator::score(const std::vector<Window>& windows, std::vector<WindowScore>& out,
                      const std::function<void(size_t)>& progress) {
  out.assign(windows.size(), WindowScore{});
  size_t next = 0;
  while (next < windows.size()) {
    // One packed call: windows in order while they fit the budget; each is one segment at
    // positions 0 … its length − 1; targets are the next token where it is scored, else −1.
    std::vector<int64_t> tok, pos, seg, tgt;
    std::vector<std::pair<size_t, size_t>> spans;  // window → its first scored position in the call
    size_t first = next;
    bool want_greedy = false;
    const int64_t top_n = windows[first].top;  // one call asks one n of likeliest tokens
    const bool want_ranks = windows[first].ranks;  // and ranks or not
    while (next < windows.size()) {
      const Window& w = windows[next];
      const int64_t len = static_cast<int64_t>(w.context.size() + w.scored.size()) - 1;
      if (next > first && (static_cast<int64_t>(tok.size()) + len > budget_ || w.top != top_n || w.ranks != want_ranks))
        break;
      if (w.context.empty() || w.scored.empty())
        throw Error(str("eval: a window needs a context and tokens to score (request ", w.request, ")"));
      std::vector<int32_t> all = w.context;
      all.insert(all.end(), w.scored.begin(), w.scored.end());
      spans.emplace_back(next, tok.size() + w.context.size() - 1);
      want_greedy |= w.greedy;
      for (int64_t i = 0; i < len; ++i) {
        tok.push_back(all[static_cast<size_t>(i)]);
        pos.push_back(i);
        seg.push_back(static_cast<int64_t>(next - first));
        tgt.push_back(i + 1 >= static_cast<int64_t>(w.context.size()) ? all[static_cast<size_t>(i + 1)] : -1);
      }
      ++next;
    }
    const int64_t p = static_cast<int64_t>(tok.size());
    TopTokens top;
    top.n = top_n;
    top.want_ranks = want_ranks;
    auto [lp, greedy] = model_.score_packed(Tensor::from_ints({p}, tok), Tensor::from_ints({p}, pos),
                                            Tensor::from_ints({p}, seg), Tensor::from_ints({p}, tgt, DType::i64),
                                            want_greedy, top_n > 0 || want_ranks ? &top : nullptr);
    ++calls_;
    const float* v = lp.ptr<float>();
    for (auto [wi, at] : spans) {
      WindowScore& s = out[wi];
      const Window& w = windows[wi];
      s.tokens = static_cast<int64_t>(w.scored.size());
      for (int64_t k = 0; k < s.tokens; ++k) {
        s.loglikelihood += v[at + k];
        s.greedy = s.greedy && (!w.greedy || greedy[at + k]);
      }
      if (w.per_token) s.token_logprobs.assign(v + at, v + at + s.tokens);
      if (want_ranks) s.ranks.assign(top.ranks.begin() + static_cast<std::ptrdiff_t>(at),
                                     top.ranks.begin() + static_cast<std::ptrdiff_t>(at) + s.tokens);
      if (top_n > 0) {
        s.top.resize(static_cast<size_t>(s.tokens));
        for (int64_t k = 0; k < s.tokens; ++k)
          for (int64_t j = 0; j < top_n; ++j) {
            const size_t i = static_cast<size_t>((static_cast<int64_t>(at) + k) * top_n + j);
            if (top.ids[i] >= 0) s.top[static_cast<size_t>(k)].emplace_back(top.ids[i], top.logprobs[i]);
          }
      }
    }
    if (progress) progress(next);
  }
}

}  // namespace linnet::engine
