#include "core/cuda_module.h"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <vector>

#include "core/error.h"

namespace linnet {

namespace {

struct Module {
  void* handle = nullptr;
  std::string error;
};

const Module& module() {
  static Module m;
  static std::once_flag once;
  std::call_once(once, [] {
    namespace fs = std::filesystem;
    std::vector<std::string> paths;
    if (const char* p = std::getenv("LINNET_CUDA_MODULE")) {
      paths.push_back(p);  // only this one: the user said where
    } else {
      std::error_code ec;
      const fs::path exe = fs::read_symlink("/proc/self/exe", ec).parent_path();
      for (const fs::path& dir : {exe, exe.parent_path(), exe.parent_path() / "lib"})
        if (!dir.empty()) paths.push_back((dir / "liblinnet_cuda.so").string());
    }
    std::string tried;
    for (const auto& p : paths) {
      std::error_code ec;
      if (!fs::exists(p, ec)) {
        tried += str(tried.empty() ? "" : "; ", p, ": absent");
        continue;
      }
      // RTLD_GLOBAL: the module's CUDA libraries serve later loads (NCCL's plugins) as well.
      if (void* h = ::dlopen(p.c_str(), RTLD_NOW | RTLD_GLOBAL)) {
        m.handle = h;
        return;
      }
      tried += str(tried.empty() ? "" : "; ", p, ": ", ::dlerror());
    }
    m.error = str("the CUDA backend module liblinnet_cuda.so could not be loaded (", tried, ")");
  });
  return m;
}

}  // namespace

void* cuda_module_symbol(const char* name) {
  const Module& m = module();
  return m.handle ? ::dlsym(m.handle, name) : nullptr;
}

const std::string& cuda_module_error() { return module().error; }

}  // namespace linnet
