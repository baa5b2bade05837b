#pragma once
// The truncations sample_logits applies around its fused filter (torch_wrs/_llm_extras.py),
// as ops on float32 values y [B, V] with a float64 control a row [B]; -inf outside the kept
// set, a row at a time, the decisions in float64:
//   top_n_sigma_logits(y, n): keep y_i >= max y - n_b * std(y), the maximum and the population
//     std over the row's finite entries.
//   typical_logits(f, mass): Hugging Face's TypicalLogitsWarper. lp = log_softmax(f), H =
//     -sum p lp, shift_i = |-lp_i - H|; keep the fewest smallest shifts whose mass reaches
//     mass_b, ties with the last one kept. mass_b = 1 keeps the row.
// In both, a row holding NaN or +inf, or no finite entry, comes back NaN: the fused filter's
// invalid row, so that sample_logits leaves out a filter with no control of its own.
// A row whose control is out of range (n < 0, infinite or NaN; mass not in (0, 1]) comes back
// NaN, as the fused filter marks its invalid rows.
// Typical-p's boundary is found in exact integer masses (llm.h's q_i), without a sort of the
// row: on the CPU, buckets linear in the shift, then a sort of the boundary bucket; on CUDA
// (truncate_cuda.cu, a cluster of CTAs a row), levels of histograms (binned linearly, then by
// the shifts' float64 bits). Both give the definition's set, but where the kept mass lies
// within about 2^-40 of the target.
#include "common/macros.h"

#include <ATen/core/Tensor.h>

#include <cmath>
#include <cstdint>

namespace wrs::llm {

// shift_i of a finite-maximum row: max m, log of sum exp(f - m), entropy h; as torch's
// log_softmax rounds lp_i = (f_i - m) - log_s.
C10_HOST_DEVICE inline double typical_shift(float f, double m, double log_s, double h) {
  const double lp = (static_cast<double>(f) - m) - log_s;
  const double s = -lp - h;
  return s < 0.0 ? -s : s;
}

// A key that orders as -shift does (shift >= 0, +inf included): smaller shifts first when
// searched from the top, as the select of select_cuda.cuh searches.
C10_HOST_DEVICE inline uint64_t typical_key(double shift) {
  uint64_t b;
#if defined(__CUDA_ARCH__)
  b = static_cast<uint64_t>(__double_as_longlong(shift));
#else
  __builtin_memcpy(&b, &shift, sizeof(b));
#endif
  return ~(b & 0x7FFFFFFFFFFFFFFFull);  // -0 as +0
}

// Both ops' arguments, checked: values float32 [B, V] contiguous, control float64 [B].
struct TruncateCall {
  int64_t rows = 0, v = 0;
  at::Tensor y, control;
};

TruncateCall prepare_truncate(const at::Tensor& y, const at::Tensor& control, const char* op, const char* name);

}  // namespace wrs::llm
