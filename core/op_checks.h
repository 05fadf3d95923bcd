// The checks every backend makes of an op's arguments before running it, written once: ranks,
// shapes and how the arguments agree, index vectors (i32, one entry a row), f32 results, the
// attention dims and cache shapes — the contract core/backend_op_list.h states, whatever device
// holds the tensors. A backend adds only what is its own: that a tensor is on its device and
// that it computes in the dtypes given (the CPU in f32; CUDA in f32, bf16 and f16).
//
// Each function is named for its op and throws linnet::Error "<backend> <label>: <what>"
// (backend: "cpu backend", "cuda"), naming the argument and its shape. The message is built
// only when a check fails.
#pragma once

#include <cstdint>
#include <vector>

#include "core/backend.h"

namespace linnet::op_checks {

using Pointwise = Backend::Pointwise;

#define LINNET_ARGS(...) __VA_ARGS__
#define LINNET_OP(name, label, params, args) void name(const char* backend, LINNET_ARGS params);
#include "core/backend_op_list.h"
#undef LINNET_OP
#undef LINNET_ARGS

}  // namespace linnet::op_checks
