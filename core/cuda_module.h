// The CUDA backend lives in a module, liblinnet_cuda.so, loaded the first time a CUDA backend
// is asked for (as ggml loads its backend libraries): the linnet binary itself links no CUDA
// library, so the same build runs on a machine without CUDA and uses a GPU where there is one.
// The module resolves linnet's own symbols from the executable that loads it.
//
// Where it is looked for: $LINNET_CUDA_MODULE, then beside the executable, its parent
// folder, and ../lib from it.
#pragma once
#include <string>

namespace linnet {

// A symbol of the loaded module (nullptr when the module is absent or lacks it).
void* cuda_module_symbol(const char* name);
// "" when the module is loaded, else why not (the paths tried and dlerror's message).
const std::string& cuda_module_error();

}  // namespace linnet
