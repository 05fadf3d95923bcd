// The k largest of a row as torch.topk picks them on the CPU, ties included: what a
// mixture-of-experts router chooses (transformers' routers call torch.topk(probs, k)).
//
// PyTorch's CPU topk puts (value, index) pairs in a buffer and calls the C++ standard
// library on them with the comparator "NaN first, then the larger value" — which never
// looks at the index. So which of two equal values comes first (and which of two tied
// experts is chosen at all) is whatever libstdc++'s algorithms leave there:
//   k·64 ≤ n:  std::partial_sort(first, first + k, last)     (a heap of k, then sorted)
//   else:      std::nth_element(first, first + k − 1, last)   (introselect), then
//              std::sort(first, first + k − 1)                 (introsort; the k-th stays last)
// This header carries those algorithms as libstdc++ runs them (median of three moved to the
// front, unguarded partition, insertion sort below 4 / 16 elements, heap select when the depth
// runs out), written out so the CUDA kernel runs the very same steps on the device. Every
// backend chooses with it; tests/moe_test.cpp checks it against std:: on tie-heavy rows and
// the conformance fixtures check it against torch (a router of zeros: every expert tied).
//
// Header-only and host/device-neutral (no std:: algorithms, no recursion); n, k small
// (experts per layer).
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define LINNET_TOPK_HD __host__ __device__ inline
#else
#define LINNET_TOPK_HD inline
#endif

namespace linnet::topk {

struct Entry {
  float value;
  int32_t index;
};

// torch's "largest" comparator: a goes before b.
LINNET_TOPK_HD bool before(const Entry& a, const Entry& b) {
  const bool a_nan = a.value != a.value, b_nan = b.value != b.value;
  return (a_nan && !b_nan) || a.value > b.value;
}

LINNET_TOPK_HD void swap_entries(Entry* a, Entry* b) {
  const Entry t = *a;
  *a = *b;
  *b = t;
}

LINNET_TOPK_HD int floor_log2(int64_t n) {
  int r = 0;
  while (n > 1) n >>= 1, ++r;
  return r;
}

// ---- heaps (a "max-heap" under `before`: the root is the entry every other is not before) ----

// Moves `value` up from `hole` towards `top`, past parents it goes before... (libstdc++'s push).
LINNET_TOPK_HD void sift_up(Entry* e, int64_t hole, int64_t top, Entry value) {
  int64_t parent = (hole - 1) / 2;
  while (hole > top && before(e[parent], value)) {
    e[hole] = e[parent];
    hole = parent;
    parent = (hole - 1) / 2;
  }
  e[hole] = value;
}

// The hole at `hole` sinks to a leaf along the larger child, then `value` rises from there.
LINNET_TOPK_HD void adjust(Entry* e, int64_t hole, int64_t len, Entry value) {
  const int64_t top = hole;
  int64_t child = hole;
  while (child < (len - 1) / 2) {
    child = 2 * (child + 1);                        // right child
    if (before(e[child], e[child - 1])) --child;  // the left one when the right goes before it
    e[hole] = e[child];
    hole = child;
  }
  if ((len & 1) == 0 && child == (len - 2) / 2) {  // a last parent with a left child only
    child = 2 * (child + 1);
    e[hole] = e[child - 1];
    hole = child - 1;
  }
  sift_up(e, hole, top, value);
}

LINNET_TOPK_HD void make_heap(Entry* e, int64_t len) {
  if (len < 2) return;
  for (int64_t parent = (len - 2) / 2;; --parent) {
    adjust(e, parent, len, e[parent]);
    if (parent == 0) return;
  }
}

// The root goes to *out, *out's old entry into the heap [e, e + len).
LINNET_TOPK_HD void pop_heap_into(Entry* e, int64_t len, Entry* out) {
  const Entry value = *out;
  *out = e[0];
  adjust(e, 0, len, value);
}

// [e, e + mid) becomes a heap of the mid entries no later one goes before (std::__heap_select).
LINNET_TOPK_HD void heap_select(Entry* e, int64_t mid, int64_t n) {
  make_heap(e, mid);
  for (int64_t i = mid; i < n; ++i)
    if (before(e[i], e[0])) pop_heap_into(e, mid, e + i);
}

LINNET_TOPK_HD void sort_heap(Entry* e, int64_t len) {
  while (len > 1) {
    --len;
    pop_heap_into(e, len, e + len);
  }
}

// ---- insertion sorts and the partition ---------------------------------------------------------

// Moves e[i] left while it goes before its neighbour; needs a stop to its left.
LINNET_TOPK_HD void linear_insert(Entry* e, int64_t i) {
  const Entry value = e[i];
  while (before(value, e[i - 1])) {
    e[i] = e[i - 1];
    --i;
  }
  e[i] = value;
}

LINNET_TOPK_HD void insertion_sort(Entry* e, int64_t n) {
  for (int64_t i = 1; i < n; ++i) {
    if (before(e[i], e[0])) {  // goes to the front: shift the sorted prefix one right
      const Entry value = e[i];
      for (int64_t j = i; j > 0; --j) e[j] = e[j - 1];
      e[0] = value;
    } else {
      linear_insert(e, i);
    }
  }
}

// The median of a, b, c (by `before`) swapped into *front.
LINNET_TOPK_HD void median_to_front(Entry* front, Entry* a, Entry* b, Entry* c) {
  if (before(*a, *b)) {
    if (before(*b, *c)) swap_entries(front, b);
    else if (before(*a, *c)) swap_entries(front, c);
    else swap_entries(front, a);
  } else if (before(*a, *c)) {
    swap_entries(front, a);
  } else if (before(*b, *c)) {
    swap_entries(front, c);
  } else {
    swap_entries(front, b);
  }
}

// Partitions (lo, hi) around the pivot *p (outside it, to the left); returns the cut.
LINNET_TOPK_HD Entry* partition(Entry* lo, Entry* hi, const Entry* p) {
  for (;;) {
    while (before(*lo, *p)) ++lo;
    --hi;
    while (before(*p, *hi)) --hi;
    if (!(lo < hi)) return lo;
    swap_entries(lo, hi);
    ++lo;
  }
}

LINNET_TOPK_HD Entry* partition_by_median(Entry* first, Entry* last) {
  Entry* mid = first + (last - first) / 2;
  median_to_front(first, first + 1, mid, last - 1);
  return partition(first + 1, last, first);
}

// std::nth_element: e[nth] becomes what a full sort would put there, no earlier entry after
// it, no later one before it.
LINNET_TOPK_HD void nth_element(Entry* first, Entry* nth, Entry* last) {
  if (first == last || nth == last) return;
  int depth = 2 * floor_log2(last - first);
  while (last - first > 3) {
    if (depth == 0) {
      heap_select(first, nth - first + 1, last - first);
      swap_entries(first, nth);  // the heap's root is the nth
      return;
    }
    --depth;
    Entry* cut = partition_by_median(first, last);
    if (cut <= nth) first = cut;
    else last = cut;
  }
  insertion_sort(first, last - first);
}

constexpr int64_t kSortThreshold = 16;  // libstdc++'s _S_threshold

// std::__introsort_loop, with its recursion (the right part first, then the loop goes on with
// the left) kept as an explicit stack in the same order: device code runs it without a call stack.
LINNET_TOPK_HD void introsort_loop(Entry* first, Entry* last, int depth) {
  struct Part {
    Entry* first;
    Entry* last;
    int depth;
  };
  Part pending[64];  // at most 2·log2(n) + 1 parts wait at once
  int waiting = 0;
  pending[waiting++] = {first, last, depth};
  while (waiting > 0) {
    Part p = pending[--waiting];
    while (p.last - p.first > kSortThreshold) {
      if (p.depth == 0) {  // std::__partial_sort(first, last, last)
        heap_select(p.first, p.last - p.first, p.last - p.first);
        sort_heap(p.first, p.last - p.first);
        break;
      }
      --p.depth;
      Entry* cut = partition_by_median(p.first, p.last);
      pending[waiting++] = {p.first, cut, p.depth};  // the left part, once the right one is done
      p.first = cut;
    }
  }
}

// std::sort.
LINNET_TOPK_HD void sort(Entry* first, Entry* last) {
  const int64_t n = last - first;
  if (n < 2) return;
  introsort_loop(first, last, 2 * floor_log2(n));
  if (n > kSortThreshold) {
    insertion_sort(first, kSortThreshold);
    for (int64_t i = kSortThreshold; i < n; ++i) linear_insert(first, i);  // unguarded: a smaller one sits left
  } else {
    insertion_sort(first, n);
  }
}

// torch.topk(values, k, largest=True, sorted) on the CPU: e[0 … k) are its k entries in its
// order. e holds the row's n (value, index) pairs in index order on entry; 1 ≤ k ≤ n. Unsorted,
// torch skips the sort after nth_element (the same k entries, in introselect's order).
LINNET_TOPK_HD void torch_top_k(Entry* e, int64_t n, int64_t k, bool sorted = true) {
  if (k * 64 <= n) {  // std::partial_sort(e, e + k, e + n), sorted or not
    heap_select(e, k, n);
    sort_heap(e, k);
  } else {
    nth_element(e, e + k - 1, e + n);
    if (sorted) sort(e, e + k - 1);
  }
}

}  // namespace linnet::topk
