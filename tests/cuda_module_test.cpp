// The CUDA backend is a module loaded at run time (core/cuda_module.h): the linnet binary links
// no CUDA library, runs on the CPU where none is installed, and says why when --backend cuda
// cannot be had.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "runtime/write_checkpoint.h"
#include "model_fixtures.h"
#include "mpi_run.h"

using linnet::testing::run_command;
namespace fs = std::filesystem;

namespace {

fs::path tiny() {
  return linnet::testing::shared_checkpoint("linnet_cuda_module_tiny", [](const std::string& d) {
    linnet::write_random_checkpoint(linnet::testing::tiny_config(), d, linnet::DType::f32, 5);
  });
}

}  // namespace

TEST(CudaModule, TheBinaryLinksNoCudaLibrary) {
  const auto r = run_command({"/usr/bin/ldd", LINNET_BINARY}, 30);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* lib : {"libcudart", "libcublas", "libcublasLt", "libnccl", "libcuda."})
    EXPECT_EQ(r.output.find(lib), std::string::npos) << lib << " in\n" << r.output;
}

// With /usr/local/cuda hidden (a private mount namespace) the CPU runs, auto picks it, and
// --backend cuda names what is missing.
TEST(CudaModule, RunsWithTheCudaLibrariesHidden) {
  const fs::path d = fs::temp_directory_path() / ("linnet_cuda_module_" + std::to_string(::getpid()));
  fs::create_directories(d);
  std::ofstream(d / "calls.json") << R"([{"entry": "generate", "args": {"token": [[3]], "pos": 0}, "generics": {"Steps": 3}, "outputs": ["ids"]}])";
  const std::string run = std::string(LINNET_BINARY) + " run --checkpoint " + tiny().string() + " --calls " +
                          (d / "calls.json").string() + " --print --backend ";
  // Nor may the environment point elsewhere (PyTorch's nvidia/*/lib on LD_LIBRARY_PATH).
  const std::string hide = "unset LD_LIBRARY_PATH LINNET_CUDA_MODULE; mount -t tmpfs tmpfs /usr/local/cuda && "
                           "! ls /usr/local/cuda/lib64/libcudart* 2>/dev/null && ";
  auto hidden = [&](const std::string& backend) {
    return run_command({"/usr/bin/unshare", "-m", "--propagation", "private", "sh", "-c", hide + run + backend}, 60, true);
  };
  auto probe = run_command({"/usr/bin/unshare", "-m", "--propagation", "private", "sh", "-c", "mount -t tmpfs tmpfs /usr/local/cuda"}, 20);
  if (probe.exit_code != 0) GTEST_SKIP() << "no private mount namespace here (unshare -m): " << probe.output;
  const auto visible = run_command({"/bin/sh", "-c", run + "cpu"}, 60, true);
  ASSERT_EQ(visible.exit_code, 0) << visible.errors;
  for (const char* backend : {"cpu", "auto"}) {
    const auto r = hidden(backend);
    EXPECT_EQ(r.exit_code, 0) << backend << ": " << r.errors;
    EXPECT_EQ(r.output, visible.output) << backend;
    EXPECT_NE(r.errors.find("backend cpu"), std::string::npos) << r.errors;
  }
  const auto cuda = hidden("cuda");
  EXPECT_EQ(cuda.exit_code, 1);
  EXPECT_NE(cuda.errors.find("the CUDA backend module liblinnet_cuda.so could not be loaded"), std::string::npos)
      << cuda.errors;
}

TEST(CudaModule, AMissingModuleIsNamed) {
  const auto r = run_command({"/bin/sh", "-c",
                              "LINNET_CUDA_MODULE=/nonexistent/liblinnet_cuda.so " + std::string(LINNET_BINARY) +
                                  " run --checkpoint " + tiny().string() + " --calls /dev/null --backend cuda"},
                             30, true);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.errors.find("/nonexistent/liblinnet_cuda.so: absent"), std::string::npos) << r.errors;
}
