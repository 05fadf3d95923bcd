// MpiCommunicator and MpiRuntime under a real mpirun: tests/mpi_comm_check.cpp on 1-4 ranks,
// and a rank that fails alone must end the job (abort_all), never hang it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/error.h"
#include "parallel/comm_choice.h"
#include "tests/mpi_run.h"

namespace {

using linnet::testing::find_mpirun;
using linnet::testing::comm_check;
using linnet::testing::mpi_run;

#define SKIP_WITHOUT_MPI()                                                                 \
  do {                                                                                     \
    if (comm_check().empty()) GTEST_SKIP() << "built without MPI (no mpi_comm_check)";     \
    if (find_mpirun().empty()) GTEST_SKIP() << "mpirun is not on PATH";                    \
  } while (0)

class MpiCommunicatorRanks : public ::testing::TestWithParam<int> {};

TEST_P(MpiCommunicatorRanks, EveryCollectiveGroupsAndModel) {
  SKIP_WITHOUT_MPI();
  const int np = GetParam();
  auto r = mpi_run(np, comm_check(), {}, 120);
  EXPECT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("checks passed on each of " + std::to_string(np) + " ranks"), std::string::npos) << r.output;
}

INSTANTIATE_TEST_SUITE_P(Np, MpiCommunicatorRanks, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return "np" + std::to_string(info.param); });

TEST(MpiCommunicator, OneRankFailingEndsTheJob) {
  SKIP_WITHOUT_MPI();
  for (int failing : {1, 0}) {
    auto r = mpi_run(3, comm_check(), {"--fail-on-rank", std::to_string(failing)}, 60);
    EXPECT_FALSE(r.timed_out) << "a failing rank hung the job:\n" << r.output;
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_LT(r.seconds, 20) << r.output;
    EXPECT_NE(r.output.find("linnet rank " + std::to_string(failing) + ": deliberate failure on rank"),
              std::string::npos)
        << r.output;
  }
}

TEST(MpiCommunicator, SingletonWithoutMpirun) {
  // The launcher runs without mpirun too: OpenMPI's singleton init gives a world of one.
  if (comm_check().empty()) GTEST_SKIP() << "built without MPI (no mpi_comm_check)";
  // Run directly (no mpirun): through /bin/sh with a timeout so a broken singleton cannot hang.
  const std::string cmd = "timeout -s KILL 60 " + comm_check() + " --skip-model 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[1024];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int status = pclose(p);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
  EXPECT_NE(out.find("checks passed on each of 1 ranks"), std::string::npos) << out;
}

}  // namespace

namespace {

// Processes whose command line is exactly `argv`.
int count_processes(const std::vector<std::string>& argv) {
  std::string want;
  for (auto& a : argv) want += a + '\0';
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    std::ifstream f(e.path() / "cmdline", std::ios::binary);
    std::string cmd((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (cmd == want) ++n;
  }
  return n;
}

TEST(MpiRun, AHangIsKilledAtTheTimeoutWithEveryRank) {
  if (find_mpirun().empty()) GTEST_SKIP() << "mpirun is not on PATH";
  auto r = mpi_run(2, "/bin/sleep", {"73.25"}, 3);
  EXPECT_TRUE(r.timed_out) << r.output;
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(r.seconds, 15) << r.output;
  usleep(200000);
  EXPECT_EQ(count_processes({"/bin/sleep", "73.25"}), 0) << "ranks outlived the killed mpirun";
}

}  // namespace

// One communicator for the whole group, from every shard's device (not from per-node counts).
TEST(ShardComm, ChosenOnceFromEveryShardsDevice) {
  using linnet::ShardComm;
  using linnet::choose_shard_comm;
  EXPECT_EQ(choose_shard_comm({"cpu", "cpu"}, ""), ShardComm::mpi);
  EXPECT_EQ(choose_shard_comm({"cuda:GPU-a", "cuda:GPU-b"}, ""), ShardComm::nccl);
  // Per-rank CUDA_VISIBLE_DEVICES makes every rank's device 0, yet the GPUs are distinct.
  EXPECT_EQ(choose_shard_comm({"cuda:GPU-a", "cuda:GPU-b", "cuda:GPU-c", "cuda:GPU-d"}, ""), ShardComm::nccl);
  EXPECT_EQ(choose_shard_comm({"cuda:GPU-a", "cuda:GPU-a"}, ""), ShardComm::mpi);  // two ranks on one GPU
  EXPECT_EQ(choose_shard_comm({"cuda:GPU-a", "cuda:GPU-b", "cuda:GPU-a"}, ""), ShardComm::mpi);
  EXPECT_EQ(choose_shard_comm({"cuda:GPU-a", "cuda:GPU-b"}, "mpi"), ShardComm::mpi);
  auto error = [](const std::vector<std::string>& d, const std::string& f) {
    try {
      choose_shard_comm(d, f);
    } catch (const linnet::Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_NE(error({"cuda:GPU-a", "cpu"}, "").find("different backends (rank 0: cuda:GPU-a, rank 1: cpu)"),
            std::string::npos);
  EXPECT_NE(error({"cuda:GPU-a", "cuda:GPU-a"}, "nccl").find("ranks 0 and 1 share GPU"), std::string::npos);
  EXPECT_NE(error({"cpu"}, "nccl").find("needs the CUDA backend"), std::string::npos);
  EXPECT_NE(error({"cpu"}, "gloo").find("expected mpi or nccl"), std::string::npos);
}
