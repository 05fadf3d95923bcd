#include "core/checksum.h"

#include <xxhash.h>

#include <cstdio>
#include <vector>

namespace linnet {

uint64_t content_checksum(const void* data, size_t bytes) {
  constexpr size_t kPiece = size_t{8} << 20;
  const size_t pieces = (bytes + kPiece - 1) / kPiece;
  std::vector<XXH64_hash_t> sums(pieces);
  const auto* p = static_cast<const unsigned char*>(data);
#pragma omp parallel for schedule(dynamic, 1) if (pieces > 1)
  for (size_t i = 0; i < pieces; ++i) {
    const size_t begin = i * kPiece, n = bytes - begin < kPiece ? bytes - begin : kPiece;
    sums[i] = XXH3_64bits(p + begin, n);
  }
  return XXH3_64bits(sums.data(), sums.size() * sizeof(XXH64_hash_t));
}

std::string checksum_hex(uint64_t sum) {
  char s[17];
  std::snprintf(s, sizeof s, "%016llx", static_cast<unsigned long long>(sum));
  return s;
}

}  // namespace linnet
