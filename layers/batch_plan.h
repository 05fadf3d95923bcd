// One engine step as the model runs it (vLLM's SchedulerOutput): built once by the engine
// from its scheduler's rows, and taken by the model as it is. The engine's pages and slots are
// right by construction, so the model checks only its own invariants here — the entries'
// checks stay for what comes from outside (CALLS.json, the card's entries).
#pragma once
#include <cstdint>
#include <vector>

#include "layers/choice.h"
#include "layers/token_plan.h"

namespace linnet {

struct BatchPlan {
  // Every token of the step, prefill chunks and decoding rows alike: its id, its position,
  // its row of the page table (cache attention) and the slot its K/V go to.
  TokenPlan tokens;
  int64_t rows = 0, pages = 0;     // the page table's shape
  std::vector<int32_t> table;      // [rows, pages]: row r's pages in order (-1: unused)
  std::vector<int32_t> sample;     // per row: the token whose logits choose its next one (-1: none)
  std::vector<RowChoice> choices;  // per row: how that choice is made
};

}  // namespace linnet
