#pragma once
// Input checks shared by every op family. Each raises a RuntimeError (c10::Error)
// that names the op and the argument, before any kernel writes anything.
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <cstdint>

namespace wrs {

// validate=True checks read values back to the host; under CUDA-graph capture that is
// forbidden, so this raises there (naming the op) instead of letting capture fail.
void check_host_read_allowed(const at::Tensor& t, const char* op, const char* what);

// Whether t is a CUDA tensor and the current stream is capturing a CUDA graph (ops that
// skip their value checks there, as torch does, rather than refuse).
bool stream_capturing(const at::Tensor& t);

inline void check_floating(const at::Tensor& t, const char* op, const char* arg) {
  TORCH_CHECK(at::isFloatingType(t.scalar_type()), op, ": ", arg,
              " must be a floating-point tensor (float16, bfloat16, float32 or float64), got ",
              t.scalar_type());
}

inline void check_has_last_dim(const at::Tensor& t, const char* op, const char* arg) {
  TORCH_CHECK(t.dim() >= 1, op, ": ", arg, " must have at least one dimension, got a 0-d tensor");
  TORCH_CHECK(t.size(-1) > 0, op, ": ", arg, " must have at least one category (last dimension is 0)");
}

// Problems found while reading weight values; OR-ed together over a call.
enum WeightFlags : uint32_t {
  kWeightNegative = 1u,
  kWeightNaN = 2u,
  kWeightInf = 4u,
  kRowZeroSum = 8u,
  kRowSumOverflow = 16u,
  kRowNotFinite = 32u,  // a Dirichlet row whose largest log-gamma is not finite
};

C10_HOST_DEVICE inline uint32_t weight_flags(double w) {
  if (w != w) return kWeightNaN;
  if (w < 0) return kWeightNegative;
  if (w > 1.7976931348623157e308) return kWeightInf;
  return 0;
}

// A row's flags: those of its weights, plus a zero or non-finite float64 sum.
C10_HOST_DEVICE inline uint32_t row_flags(double sum, uint32_t flags) {
  if (sum == 0) flags |= kRowZeroSum;
  if (!(sum <= 1.7976931348623157e308)) flags |= kRowSumOverflow;  // inf or NaN
  return flags;
}

inline void raise_weight_flags(uint32_t flags, const char* op, const char* arg) {
  TORCH_CHECK(!(flags & kWeightNaN), op, ": ", arg, " contains NaN");
  TORCH_CHECK(!(flags & kWeightInf), op, ": ", arg, " contains inf");
  TORCH_CHECK(!(flags & kWeightNegative), op, ": ", arg, " contains a negative entry");
  TORCH_CHECK(!(flags & kRowZeroSum), op, ": ", arg, " has a row that sums to zero");
  TORCH_CHECK(!(flags & kRowSumOverflow), op, ": ", arg,
              " has a row whose sum overflows float64; scale the weights down");
}

}  // namespace wrs
