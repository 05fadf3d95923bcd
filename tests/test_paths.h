// Where the tests find the source tree, the linnet binary, their cache and mpi_comm_check:
// the build's own paths, unless the environment says otherwise (LINNET_TEST_SOURCE_DIR,
// LINNET_TEST_BINARY, LINNET_TEST_CACHE, LINNET_TEST_MPI_COMM_CHECK) — as on a GPU machine
// running binaries built elsewhere (scripts/build-gpu, scripts/gpu-check). Included into every
// test source by the build (-include).
#pragma once
#include <cstdlib>

namespace linnet::testing {
inline const char* test_path(const char* env, const char* built) {
  const char* v = std::getenv(env);
  return v && *v ? v : built;
}
}  // namespace linnet::testing

#define LINNET_SOURCE_DIR (::linnet::testing::test_path("LINNET_TEST_SOURCE_DIR", LINNET_BUILD_SOURCE_DIR))
#define LINNET_BINARY (::linnet::testing::test_path("LINNET_TEST_BINARY", LINNET_BUILD_BINARY))
#define LINNET_TEST_CACHE (::linnet::testing::test_path("LINNET_TEST_CACHE", LINNET_BUILD_TEST_CACHE))
#ifdef LINNET_BUILD_MPI_COMM_CHECK
#define LINNET_MPI_COMM_CHECK (::linnet::testing::test_path("LINNET_TEST_MPI_COMM_CHECK", LINNET_BUILD_MPI_COMM_CHECK))
#endif
