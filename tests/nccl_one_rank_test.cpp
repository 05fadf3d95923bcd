// The NCCL communicator on one GPU: one rank (mpirun -np 1) and a NcclCommunicator over
// MPI_COMM_SELF, which one GPU can host (two ranks on one GPU rightly take the MPI staging
// path, so the multi-rank tests never reach NCCL there). tests/mpi_comm_check.cpp
// --nccl-one-rank does the work; each case in its own process, since the watchdog's abort
// may leave the CUDA context unusable. Skipped without a GPU, NCCL, MPI or mpirun.
#include <gtest/gtest.h>

#include "core/backend.h"
#include "tests/mpi_run.h"

namespace {

using linnet::testing::find_mpirun;
using linnet::testing::comm_check;
using linnet::testing::mpi_run;

void run_case(const std::string& what, const std::string& expect) {
  if (linnet::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device is visible: " << linnet::cuda_status();
  if (comm_check().empty()) GTEST_SKIP() << "built without MPI (no mpi_comm_check)";
  if (find_mpirun().empty()) GTEST_SKIP() << "mpirun is not on PATH";
  const auto r = mpi_run(1, comm_check(), {"--nccl-one-rank", what}, 90);
  if (r.exit_code == 77) GTEST_SKIP() << r.output;
  EXPECT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(expect), std::string::npos) << r.output;
  std::printf("%s", r.output.c_str());  // the stream's state after the abort, for the record
}

}  // namespace

// Setup through the non-blocking init (polled against its deadline), the warm-up all-reduce,
// every collective in f32, bf16 (summed in f32), f16 and i32, host tensors through the inner
// MPI communicator, and work recorded for a CUDA graph flushed before each collective.
TEST(NcclOneRank, SetupAndEveryCollective) { run_case("collectives", "nccl-one-rank collectives:"); }

// A collective queued behind a planted 8-second kernel with LINNET_NCCL_TIMEOUT=2: the
// watchdog aborts the communicator and the next collective throws, naming it.
TEST(NcclOneRank, WatchdogAbortsAPlantedHang) { run_case("watchdog", "nccl-one-rank watchdog: aborted after"); }
