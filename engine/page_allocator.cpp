#include "engine/page_allocator.h"

#include <algorithm>

#include "core/error.h"

namespace linnet::engine {

PageAllocator::PageAllocator(int64_t num_pages, int64_t page_size)
    : page_size_(page_size), refs_(static_cast<size_t>(num_pages), 0), published_(static_cast<size_t>(num_pages)) {
  LINNET_CHECK(num_pages > 0 && page_size > 0, "a pool of ", num_pages, " pages of ", page_size);
  for (int64_t p = num_pages - 1; p >= 0; --p) free_.push_back(static_cast<int32_t>(p));  // page 0 first
}

int32_t PageAllocator::allocate() {
  if (free_.empty()) return -1;
  const int32_t p = free_.back();
  free_.pop_back();
  refs_[static_cast<size_t>(p)] = 1;
  return p;
}

void PageAllocator::release(int32_t page) {
  int32_t& r = refs_[static_cast<size_t>(page)];
  LINNET_CHECK(r > 0, "releasing free page ", page);
  if (--r > 0) return;
  Published& pub = published_[static_cast<size_t>(page)];
  if (!pub.tokens.empty()) {
    const uint64_t k = key(pub.tokens, 0, pub.parent);
    for (auto [it, end] = by_key_.equal_range(k); it != end; ++it)
      if (it->second == page) {
        by_key_.erase(it);
        break;
      }
    pub = Published{};
  }
  free_.push_back(page);
}

// FNV-1a over the parent page and the page's tokens (`tokens` from index j·PageSize).
uint64_t PageAllocator::key(const std::vector<int32_t>& tokens, int64_t j, int32_t parent) const {
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&](uint32_t v) {
    h ^= v;
    h *= 0x100000001b3ull;
  };
  mix(static_cast<uint32_t>(parent));
  for (int64_t i = j * page_size_; i < (j + 1) * page_size_; ++i) mix(static_cast<uint32_t>(tokens[static_cast<size_t>(i)]));
  return h;
}

bool PageAllocator::same(int32_t page, const std::vector<int32_t>& tokens, int64_t j, int32_t parent) const {
  const Published& pub = published_[static_cast<size_t>(page)];
  return pub.parent == parent && std::equal(pub.tokens.begin(), pub.tokens.end(), tokens.begin() + j * page_size_);
}

int32_t PageAllocator::find(const std::vector<int32_t>& tokens, int64_t j, int32_t parent) const {
  for (auto [it, end] = by_key_.equal_range(key(tokens, j, parent)); it != end; ++it)
    if (same(it->second, tokens, j, parent)) return it->second;
  return -1;
}

int32_t PageAllocator::share(const std::vector<int32_t>& tokens, int64_t j, int32_t parent) {
  const int32_t page = find(tokens, j, parent);
  if (page >= 0) ++refs_[static_cast<size_t>(page)];
  return page;
}

void PageAllocator::publish(int32_t page, const std::vector<int32_t>& tokens, int64_t j, int32_t parent) {
  Published& pub = published_[static_cast<size_t>(page)];
  if (!pub.tokens.empty()) return;
  for (auto [it, end] = by_key_.equal_range(key(tokens, j, parent)); it != end; ++it)
    if (same(it->second, tokens, j, parent)) return;  // another page holds it already: that one is shared
  pub.parent = parent;
  pub.tokens.assign(tokens.begin() + j * page_size_, tokens.begin() + (j + 1) * page_size_);
  by_key_.emplace(key(tokens, j, parent), page);
}

}  // namespace linnet::engine
