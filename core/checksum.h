// Checksums of large byte ranges (a packed file's matrices, a file's header): XXH3-64 from
// libxxhash over 8 MiB pieces, the pieces in parallel, then XXH3-64 of the pieces' hashes —
// so a 16 GB file is checked at the speed memory reads it, not one core's.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace linnet {

uint64_t content_checksum(const void* data, size_t bytes);
// As 16 lowercase hex digits (how files store it).
std::string checksum_hex(uint64_t sum);

}  // namespace linnet
