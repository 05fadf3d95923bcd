// docs/entries.md "Bad input": every violation is an error naming the entry, argument, index and
// rule, raised before any state changes: the KV cache stays bit-for-bit as it was.
#include <gtest/gtest.h>

#include <cstring>

#include "model_fixtures.h"

using namespace linnet;
using namespace linnet::testing;

namespace {

Tensor i32(std::vector<int64_t> v) { return Tensor::from_ints({static_cast<int64_t>(v.size())}, v); }
Tensor col(std::vector<int64_t> v) { return Tensor::from_ints({static_cast<int64_t>(v.size()), 1}, v); }
Tensor scalar(int64_t v) { return Tensor::from_ints({}, {v}); }

struct BadCall {
  std::string entry;
  EntryArgs args;
  std::string message;
  std::map<std::string, int64_t> given = {};
};

}  // namespace

TEST(BadInput, EveryViolationNamesItsRuleAndLeavesTheCache) {
  TinyModel m;  // Vocab 97, Batch 4, MaxSeq 32, PageSize 8 → NumPages 16
  m->prefill(Tensor::from_ints({4, 3}, std::vector<int64_t>(12, 5)), 0);
  const auto before = m->cache_snapshot();
  const Tensor seg4 = i32({0, 0, 1, 1}), pos4 = i32({0, 1, 0, 1}), ok4 = i32({1, 2, 3, 4});
  const Tensor table = Tensor::from_ints({2, 2}, {0, 1, 2, 3});
  const std::vector<BadCall> calls = {
      {"forward", {{"tokens", Tensor::from_ints({2}, {1, 2})}}, "forward: tokens has shape [2], expected Tensor[B, S; i32]"},
      {"forward", {{"tokens", Tensor::from_ints({1, 2}, {1, 97})}}, "forward: tokens[0, 1] = 97 is outside [0, Vocab=97)"},
      {"forward", {{"tokens", Tensor::from_ints({1, 2}, {1, 2}, DType::i64)}}, "forward: tokens has dtype i64, expected Tensor[B, S; i32]"},
      {"decode", {{"token", col({1, 2, 3})}, {"pos", scalar(3)}}, "decode: token has shape [3, 1], expected [Batch, 1] with Batch=4"},
      {"decode", {{"token", col({1, 2, 3, 4})}, {"pos", scalar(32)}}, "decode: pos = 32 is outside [0, MaxSeq=32)"},
      {"decode", {{"token", col({1, 2, 3, -4})}, {"pos", scalar(3)}}, "decode: token[3, 0] = -4 is outside [0, Vocab=97)"},
      {"decode", {{"token", col({1, 2, 3, 4})}}, "decode: missing argument 'pos'"},
      {"decode", {{"token", col({1, 2, 3, 4})}, {"pos", scalar(1)}, {"bogus", scalar(1)}}, "decode: unexpected argument 'bogus'"},
      {"prefill", {{"tokens", Tensor::from_ints({4, 2}, std::vector<int64_t>(8, 1))}, {"pos", scalar(31)}},
       "prefill: pos = 31 with S = 2 writes positions [31, 33), outside [0, MaxSeq=32)"},
      {"decode_rows", {{"tokens", col({1, 2, 3, 4})}, {"positions", i32({0, 1, 2, 40})}},
       "decode_rows: positions[3] = 40 is outside [0, MaxSeq=32)"},
      {"prefill_slots", {{"tokens", Tensor::from_ints({2, 2}, {1, 2, 3, 4})}, {"slots", i32({1, 1})}, {"lengths", i32({2, 2})}},
       "prefill_slots: slots[1] = 1 repeats slots[0]"},
      {"prefill_slots", {{"tokens", Tensor::from_ints({2, 2}, {1, 2, 3, 4})}, {"slots", i32({0, 4})}, {"lengths", i32({2, 2})}},
       "prefill_slots: slots[1] = 4 is outside [0, Batch=4)"},
      {"prefill_slots", {{"tokens", Tensor::from_ints({2, 2}, {1, 2, 3, 4})}, {"slots", i32({0, 1})}, {"lengths", i32({2, 3})}},
       "prefill_slots: lengths[1] = 3 is outside [1, S=2]"},
      {"loss_packed", {{"tokens", ok4}, {"positions", pos4}, {"segments", i32({0, 1, 0, 1})}, {"targets", Tensor::from_ints({4}, {1, 1, 1, 1}, DType::i64)}, {"weights", Tensor::from_floats({4}, {1, 1, 1, 1})}},
       "loss_packed: segments[2] = 0 reappears after its run ended"},
      {"loss_packed", {{"tokens", ok4}, {"positions", i32({0, 0, 0, 1})}, {"segments", seg4}, {"targets", Tensor::from_ints({4}, {1, 1, 1, 1}, DType::i64)}, {"weights", Tensor::from_floats({4}, {1, 1, 1, 1})}},
       "loss_packed: positions[1] = 0 does not increase within its run"},
      {"loss_packed", {{"tokens", ok4}, {"positions", pos4}, {"segments", seg4}, {"targets", Tensor::from_ints({4}, {1, 97, 1, 1}, DType::i64)}, {"weights", Tensor::from_floats({4}, {1, 1, 1, 1})}},
       "loss_packed: targets[1] = 97 is outside [0, Vocab=97) (its weight is 1)"},
      {"loss_packed", {{"tokens", ok4}, {"positions", pos4}, {"segments", seg4}, {"targets", Tensor::from_ints({4}, {1, 1, 1, 1})}, {"weights", Tensor::from_floats({4}, {1, 1, 1, 1})}},
       "loss_packed: targets has dtype i32, expected Tensor[P; i64]"},
      {"log_probs_packed", {{"tokens", ok4}, {"positions", pos4}, {"segments", i32({0, 0, 1})}, {"targets", Tensor::from_ints({4}, {1, 1, 1, 1}, DType::i64)}},
       "log_probs_packed: segments has shape [3], expected [P] with P=4 (bound earlier)"},
      {"prefill_packed", {{"tokens", ok4}, {"rows", i32({0, 0, 0, 0})}, {"positions", i32({0, 1, 0, 1})}, {"segments", seg4}, {"last", i32({1, 3, -1, -1})}},
       "prefill_packed: tokens[2] (row 0, position 0) and tokens[0] (row 0, position 0) both write cache slot 0"},
      {"prefill_packed", {{"tokens", ok4}, {"rows", i32({0, 0, 1, 1})}, {"positions", pos4}, {"segments", seg4}, {"last", i32({1, 4, -1, -1})}},
       "prefill_packed: last[1] = 4 is outside [0, P=4)"},
      {"step_packed", {{"tokens", ok4}, {"rows", i32({0, 0, 1, 1})}, {"positions", pos4}, {"segments", seg4}, {"last", i32({1, 3, -1, -1})}, {"step_tokens", col({1, 1, 1, 1})}, {"step_positions", i32({1, -1, -1, -1})}},
       "step_packed: step_tokens[0] (row 0, position 1) and tokens[1] (row 0, position 1) both write cache slot 1"},
      {"decode_paged", {{"tokens", col({1, 2})}, {"positions", i32({3, 16})}, {"table", table}},
       "decode_paged: tokens[1] at position 16 needs page 2 of table row 1, but the table has Pages=2"},
      {"decode_paged", {{"tokens", col({1, 2})}, {"positions", i32({3, 9})}, {"table", Tensor::from_ints({2, 2}, {0, 1, 2, 16})}},
       "decode_paged: table[1, 1] = 16 is outside [0, NumPages=16)"},
      {"decode_paged", {{"tokens", col({1, 2})}, {"positions", i32({3, 3})}, {"table", Tensor::from_ints({2, 2}, {5, 1, 5, 3})}},
       "decode_paged: tokens[1] and tokens[0] both write cache slot 43"},
      {"prefill_paged", {{"tokens", i32({1, 2})}, {"positions", i32({0, 1})}, {"rows", i32({0, 0})}, {"slots", i32({0, 2})}, {"last", i32({1, -1})}, {"table", table}},
       "prefill_paged: slots[1] = 2 disagrees with table[0, 0] = 0 (position 1 of row 0 is slot 1)"},
      {"prefill_paged", {{"tokens", i32({1, 2})}, {"positions", i32({0, 1})}, {"rows", i32({0, 2})}, {"slots", i32({0, 1})}, {"last", i32({1, -1})}, {"table", table}},
       "prefill_paged: rows[1] = 2 is outside [0, Rows=2)"},
      {"generate", {{"token", col({1, 2, 3, 4})}, {"pos", scalar(30)}}, "generate: pos = 30 with Steps = 3 writes positions [30, 33)", {{"Steps", 3}}},
      {"generate", {{"token", col({1, 2, 3, 4})}, {"pos", scalar(0)}}, "generate: generic Steps is not given"},
      {"sample", {{"token", col({1, 2, 3, 4})}, {"pos", scalar(0)}, {"key", Tensor::from_ints({2}, {1, 2}, DType::i64)}, {"temperature", Tensor::from_floats({}, {-1.0f})}},
       "sample: temperature = -1 must be a number ≥ 0", {{"Steps", 2}}},
      {"sample", {{"token", col({1, 2, 3, 4})}, {"pos", scalar(0)}, {"key", Tensor::from_ints({2}, {1, 2}, DType::i64)}, {"temperature", Tensor::from_floats({}, {NAN})}},
       "sample: temperature = nan must be a number ≥ 0", {{"Steps", 2}}},
      {"sample", {{"token", col({1, 2, 3, 4})}, {"pos", scalar(0)}, {"key", Tensor::from_ints({2}, {1, 2})}, {"temperature", Tensor::from_floats({}, {1.0f})}},
       "sample: key has dtype i32, expected Tensor[2; i64]", {{"Steps", 2}}},
      {"generate_until", {{"token", col({1, 2, 3, 4})}, {"pos", scalar(0)}, {"eos", scalar(97)}},
       "generate_until: eos = 97 is outside [0, Vocab=97)", {{"MaxNew", 2}}},
      {"nonsense", {}, "unknown entry 'nonsense'"},
  };
  for (const auto& call : calls) {
    try {
      m->call(call.entry, call.args, call.given);
      ADD_FAILURE() << call.entry << ": no error, expected: " << call.message;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(call.message), std::string::npos)
          << "got:      " << e.what() << "\nexpected: " << call.message;
    }
    const auto after = m->cache_snapshot();
    for (size_t i = 0; i < after.size(); ++i)
      ASSERT_EQ(std::memcmp(after[i].data(), before[i].data(), after[i].nbytes()), 0) << call.entry << ": cache changed";
  }
}
