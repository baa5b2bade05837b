#pragma once
// Host-side pieces of the gamma ops shared by the CPU and CUDA kernels: argument checks
// and the method choice. Schemas live in csrc/ops.cpp.
#include "gamma/gamma.h"

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace wrs::gamma {

// Checks alpha's dtype, and with `validate` its values (one device-to-host read on
// CUDA, refused under graph capture: pass validate=False there; then a negative or NaN
// alpha yields NaN). Returns the generator `method` names; "auto" is the fastest exact
// one measured for `dtype` (docs/benchmarks.md).
Method check_standard_gamma(const at::Tensor& alpha, c10::string_view method, bool validate,
                            const char* op, const char* arg);

}  // namespace wrs::gamma
