#pragma once
// The alias-table build on CUDA, for another family's kernels to call without a read back.
#include <ATen/core/Tensor.h>

#include <cstdint>

namespace wrs::alias {

// Builds the tables of the rows of `w` (contiguous, last dimension the items) into
// `table` (int64, w's shape) on the current stream, OR-ing the weights' value flags
// (common/checks.h) into the device-visible word `status`; nothing is read back.
void build_tables_cuda(const at::Tensor& w, const at::Tensor& table, uint32_t* status);

}  // namespace wrs::alias
