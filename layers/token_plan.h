// One call's tokens as the layers see them. Every entry reduces to this: which tokens run,
// at which positions, how each attends (among the call's own packed runs, or over a cache
// row through the page table) and where its K/V go. An idle row simply has no token here.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace linnet {

struct TokenPlan {
  std::vector<int32_t> ids;        // token ids
  std::vector<int32_t> positions;  // RoPE position of each token
  std::vector<int32_t> run_start;  // packed attention: index of the run's first token, else -1
  std::vector<int32_t> cache_row;  // cache attention: logical row of the table, else -1
  std::vector<int32_t> slots;      // flat cache slot for this token's K/V, else -1
  // The recurrent state row this token reads and advances (Gated DeltaNet layers): its cache
  // row by default; a packed run written into a row (prefill_packed) names it; -1 (a packed run
  // that writes nothing): a scratch state of its own run, zeroed, for this call only.
  std::vector<int32_t> state_row;
  // Snapshots of the recurrent state (the engine's prefix sharing; docs/entries.md "Recurrent
  // state"): Generics::state_snapshots of them, numbered from 0. Before any token runs, each
  // restore copies a snapshot into a state row, which then goes on at `position` (the snapshot
  // must hold a sequence up to position − 1). keep: empty, or per token the snapshot that
  // receives its row's state as it stands after that token (−1: none).
  struct StateRestore {
    int32_t snapshot = 0, row = 0, position = 0;
  };
  std::vector<StateRestore> state_restores;
  std::vector<int32_t> state_keep;

  size_t size() const { return ids.size(); }
  // The tokens of cache rows `rows` (sorted), in order, with their keeps and the restores of
  // their state rows: a micro-batch of a step (cache-attending tokens only).
  TokenPlan rows_of(const std::vector<int32_t>& rows) const;
  // A token's index in a plan made by rows_of, from its index in this one's source; −1 if absent.
  int32_t index_of(int32_t source_index) const;
  std::vector<int32_t> source;  // rows_of: each token's index in the plan it came from
  void add(int32_t id, int32_t position, int32_t start, int32_t row, int32_t slot) {
    add(id, position, start, row, slot, row);
  }
  void add(int32_t id, int32_t position, int32_t start, int32_t row, int32_t slot, int32_t state) {
    ids.push_back(id);
    positions.push_back(position);
    run_start.push_back(start);
    cache_row.push_back(row);
    slots.push_back(slot);
    state_row.push_back(state);
  }
};

// The plan on the backend's device.
struct DevicePlan {
  int64_t n = 0;
  Tensor ids, positions, run_start, cache_row, slots, table;
  Tensor state_rows;  // [N] i32: each token's recurrent state row (models with such layers; else undefined)
  Tensor state_keep;  // [N] i32: the state row each token's row state is kept in after it, or −1 (undefined: none)
  bool any_packed = false, any_cache = false, any_write = false;
  int64_t span = 0;  // the longest position a cache-attending token has, + 1
  int64_t row_run = 0;  // the longest run of consecutive cache-attending tokens on one row
  // Each RoPE of the model (ModelConfig::LayerKind::rope): its inverse frequencies, [R/2] for
  // every token or [N, R/2] where they depend on each sequence's length in the call (dynamic
  // NTK, longrope), and the factor cos and sin are scaled by.
  std::vector<Tensor> rope_freq;
  std::vector<float> rope_scale;
};

// The residual stream after the last layer, and which of its rows go on to the head (index
// −1: a zero row), already on the device: uploaded with the plan, in the same one copy.
struct Hidden {
  Tensor x;       // [N, H]
  Tensor select;  // [R] i32 on the device
  int64_t rows = 0;
};

}  // namespace linnet
