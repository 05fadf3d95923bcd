// The paged KV pool as the engine hands it out (docs/entries.md "The cache and its pages":
// Batch·MaxSeq/PageSize pages of PageSize positions). A free list; a page goes back to it when its
// last user lets go. Full pages of prompt tokens are shared by reference count: a page is known by
// the hash of every token from the sequence's start to its own end, so n samples of one prompt, or
// prompts with one system prompt, hold their common full pages once.
#pragma once
#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace linnet::engine {

class PageAllocator {
 public:
  PageAllocator(int64_t num_pages, int64_t page_size);

  int64_t page_size() const { return page_size_; }
  int64_t num_pages() const { return static_cast<int64_t>(refs_.size()); }
  int64_t free_pages() const { return static_cast<int64_t>(free_.size()); }
  int64_t used_pages() const { return num_pages() - free_pages(); }

  // A fresh page (reference count 1), or -1 when none is free.
  int32_t allocate();
  // Drops one reference; the page is free again (and forgotten as a prefix) at zero.
  void release(int32_t page);

  // The published page holding page j of `tokens` (tokens [j·PageSize, (j+1)·PageSize))
  // after `parent` (the page before it in the sequence, -1 for j = 0), if any: its reference
  // count is raised. Else -1. A page is the same only when its tokens and its parent are:
  // by induction, when every token from the sequence's start is.
  int32_t share(const std::vector<int32_t>& tokens, int64_t j, int32_t parent);
  // Records that `page` now holds page j of `tokens` after `parent` (its K/V written), so
  // later sequences with the same first (j+1)·PageSize tokens can share it.
  void publish(int32_t page, const std::vector<int32_t>& tokens, int64_t j, int32_t parent);

  int32_t refs(int32_t page) const { return refs_[static_cast<size_t>(page)]; }
  // The published page share() would give, without taking a reference; -1 if none.
  int32_t find(const std::vector<int32_t>& tokens, int64_t j, int32_t parent) const;

 private:
  struct Published {
    int32_t parent = -1;
    std::vector<int32_t> tokens;  // the page's own PageSize tokens
  };
  uint64_t key(const std::vector<int32_t>& tokens, int64_t j, int32_t parent) const;
  bool same(int32_t page, const std::vector<int32_t>& tokens, int64_t j, int32_t parent) const;

  int64_t page_size_;
  std::vector<int32_t> refs_;
  std::vector<int32_t> free_;                           // a stack: the last freed is reused first
  std::unordered_multimap<uint64_t, int32_t> by_key_;   // published pages by key()
  std::vector<Published> published_;                    // per page; empty tokens: not published
};

}  // namespace linnet::engine
