#pragma once
// The quantization that alias tables, multinomial and radix forests share: each weight of
// a row becomes an exact integer
//   Q_i = round(w_i / W * N * 2^32),
// so a bucket of an alias table holds 2^32 units, and every family samples (or sums) the
// same integers whatever the device or the cut of the row (docs/laws.md).
#include "common/macros.h"

#include <cmath>
#include <cstdint>

namespace wrs {

constexpr uint64_t kBucket = uint64_t(1) << 32;  // one bucket, in fixed-point units

// Per-row constants: W = m * 2^exponent with m in [0.5, 1); scale = N * 2^32 / m.
// Scaling w by 2^-exponent first keeps every intermediate finite for any float64 W,
// denormal or huge. When scale * 2^-exponent is itself a normal double, one multiply by
// it (`direct`) rounds the same real number once, so it gives the same Q, faster.
struct RowScale {
  double scale;
  double direct;  // scale * 2^-exponent, or 0 where that is not a normal double
  int32_t exponent;
};

C10_HOST_DEVICE inline RowScale row_scale(double sum, int64_t n) {
  int e = 0;
  const double m = ::frexp(sum, &e);
  const double scale = static_cast<double>(n) * static_cast<double>(kBucket) / m;
  const double direct = ::ldexp(scale, -e);
  const bool normal = direct >= 2.2250738585072014e-308 && direct <= 1.7976931348623157e308;
  return RowScale{scale, normal ? direct : 0.0, e};
}

// Round to nearest, ties to even (rint in the default rounding mode). On the host
// without SSE4.1 rint is a library call; adding and subtracting 2^52 rounds the same
// way for 0 <= x < 2^52, and larger doubles are integers already.
C10_HOST_DEVICE inline double round_even(double x) {
#if defined(__CUDA_ARCH__)
  return ::rint(x);
#else
  constexpr double k2to52 = 4503599627370496.0;
  return x >= 0 && x < k2to52 ? (x + k2to52) - k2to52 : ::rint(x);
#endif
}

C10_HOST_DEVICE inline uint64_t quantize(double w, const RowScale& rs, int64_t n) {
  const double q = round_even(rs.direct != 0.0 ? w * rs.direct : ::ldexp(w, -rs.exponent) * rs.scale);
  const double cap = static_cast<double>(n) * static_cast<double>(kBucket);
  if (!(q > 0)) return 0;  // also maps NaN (invalid input, unchecked) to 0
  // Through int64 (the cap is below 2^63): one instruction, where uint64 takes several.
  return static_cast<uint64_t>(static_cast<int64_t>(q < cap ? q : cap));
}

}  // namespace wrs
