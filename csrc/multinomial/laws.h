#pragma once
// What multinomial and sample_logits draw from, shared by the CPU and CUDA kernels so
// both sample the same law with the same arithmetic.
//
// A row of inputs x becomes weights w: probabilities as given (ProbWeights), or
// w_i = exp(x_i / T - M), M the row's largest x / T, for softmax(x / T) (LogitWeights).
//
// With replacement, every path samples the quantized law of the alias tables:
// Q_i = round(w_i / W * N * 2^32) in exact integers (wrs::quantize), a draw is the item
// whose integer range holds a uniform point of [0, sum Q), so each probability is within
// 2^-33 / N of w_i / W, zero weights own no range, and the law does not depend on where
// a kernel cuts the row. W only sets the scale: an error in it scales every Q_i alike.
//
// Without replacement, the k largest race keys w_i / E_i, E_i ~ Exp(1), in decreasing
// order, are k sequential draws without replacement (Efraimidis-Spirakis); logits use the
// equivalent log-domain key x_i / T - log E_i (Gumbel top-k). exponential() below gives E
// with relative error below 2^-50 at every point of a 2^-64 grid, and a key then carries
// at most 2^-49 relative error. An exact race's two deciding keys are that close with
// probability at most 2^-49 per draw (P(T2 < (1 + x) T1) <= x for the two smallest
// E_i / w_i), so every draw's law is within 2^-49 relative of the exact one, and within
// 2^-49 in total variation (the quantized law's bound is 2^-33: 2^-33 / N for each of N
// items). One draw is the same law either way, so on CUDA one draw per row from many
// logits takes the race (dispatch_cuda.cpp).
#include "common/quantize.h"
#include "common/checks.h"
#include "common/macros.h"

#include <cmath>
#include <cstdint>
#include <limits>

namespace wrs::multinomial {

// Beyond common/checks.h's WeightFlags: a row with fewer nonzero weights than the
// samples asked for without replacement.
constexpr uint32_t kTooFewNonzero = 1u << 8;

// A stretch of a row, reduced: weights sum to `sum` * exp(`shift`) (shift = 0 for
// probabilities; for logits the stretch's largest x / T), plus the value flags.
struct Summary {
  double shift;
  double sum;
  uint32_t flags;
};

// Per row, from its summary: the shift M that makes weights exp(x / T - M) <= 1, and the
// quantization scale of alias tables.
struct RowLaw {
  double shift;
  wrs::RowScale scale;
};

struct ProbWeights {
  static constexpr bool kLogits = false;
  double inv_temperature;  // unused
  C10_HOST_DEVICE static Summary empty() { return Summary{0.0, 0.0, 0u}; }
  C10_HOST_DEVICE Summary add(const Summary& s, double x) const {
    return Summary{0.0, s.sum + x, s.flags | weight_flags(x)};
  }
  C10_HOST_DEVICE static Summary combine(const Summary& a, const Summary& b) {
    return Summary{0.0, a.sum + b.sum, a.flags | b.flags};
  }
  C10_HOST_DEVICE double weight(double x, double /*shift*/) const { return x; }
  C10_HOST_DEVICE static bool nonzero(double x) { return x > 0; }
  // Race key w / E; zero weights key 0, below every positive key; kNone below that.
  static constexpr double kNone = -1.0;
  C10_HOST_DEVICE double key(double x, double e) const { return x > 0 ? x / e : 0.0; }
};

struct LogitWeights {
  static constexpr bool kLogits = true;
  double inv_temperature;
  C10_HOST_DEVICE static Summary empty() { return Summary{-INFINITY, 0.0, 0u}; }
  C10_HOST_DEVICE static uint32_t flags(double x) {
    if (x != x) return kWeightNaN;
    return x > 1.7976931348623157e308 ? kWeightInf : 0u;  // -inf is a zero weight
  }
  // Online log-sum-exp: one exp per item, a rescale only when the running maximum grows.
  C10_HOST_DEVICE Summary add(const Summary& s, double x) const {
    const double v = x * inv_temperature;
    const uint32_t f = s.flags | flags(x);
    if (!(v > -INFINITY) || v != v || v > 1.7976931348623157e308) return Summary{s.shift, s.sum, f};
    if (v > s.shift) return Summary{v, s.sum * ::exp(s.shift - v) + 1.0, f};
    return Summary{s.shift, s.sum + ::exp(v - s.shift), f};
  }
  C10_HOST_DEVICE static Summary combine(const Summary& a, const Summary& b) {
    const uint32_t f = a.flags | b.flags;
    if (b.sum == 0) return Summary{a.shift, a.sum, f};
    if (a.sum == 0) return Summary{b.shift, b.sum, f};
    const double m = a.shift > b.shift ? a.shift : b.shift;
    return Summary{m, a.sum * ::exp(a.shift - m) + b.sum * ::exp(b.shift - m), f};
  }
  C10_HOST_DEVICE double weight(double x, double shift) const { return ::exp(x * inv_temperature - shift); }
  C10_HOST_DEVICE static bool nonzero(double x) { return x > -INFINITY; }
  // Race key x / T - log E; -inf logits (zero weights) key -DBL_MAX, above kNone.
  static constexpr double kNone = -INFINITY;
  C10_HOST_DEVICE double key(double x, double e) const {
    return x > -INFINITY ? x * inv_temperature - ::log(e) : -1.7976931348623157e308;
  }
};

template <typename Weights>
C10_HOST_DEVICE inline RowLaw row_law(const Summary& s, int64_t n) {
  return RowLaw{s.shift, wrs::row_scale(s.sum, n)};
}

// The row's problems, as common/checks.h flags: those of its values, a zero or
// non-finite sum (for logits: no finite logit).
C10_HOST_DEVICE inline uint32_t summary_flags(const Summary& s) { return row_flags(s.sum, s.flags); }

template <typename Weights>
C10_HOST_DEVICE inline uint64_t units(const Weights& wts, double x, const RowLaw& law, int64_t n) {
  return wrs::quantize(wts.weight(x, law.shift), law.scale, n);
}

// Draws against bounds (one draw a row from long rows, CPU and CUDA): a point of
// [0, sum B_c) over upper bounds B_c of chunks' units is kept where it falls within its
// chunk's exact units, else drawn again, so each item is drawn with probability
// proportional to Q_i whatever the bounds, as long as they bound. Up to this many
// attempts (each accepting above 1 - 2^-10 on valid rows: all fail below 2^-160; the draw
// then stays item 0, far below the 2^-33 above).
constexpr int kMaxBoundAttempts = 16;

// Upper bound on the units of a chunk of `count` items whose weights exp(x / T -
// law.shift) (probabilities: x) sum to at most b.sum exp(b.shift - law.shift): each Q_i
// is w_i * scale rounded (relative error 2^-52 in the product, half a unit in the
// rounding), and the factor 1 + 2^-30 covers the float64 sums' and exps' roundings
// behind b (chunks of up to 2^21 items: 2^-31). Invalid values (NaN, inf, negative sums)
// give count + 2, in range.
C10_HOST_DEVICE inline uint64_t chunk_units_bound(const Summary& b, int64_t count, const RowLaw& law) {
  const double w = b.sum > 0 ? b.sum * ::exp(b.shift - law.shift) : 0.0;
  const double units = ::ldexp(w, -law.scale.exponent) * law.scale.scale * (1.0 + 0x1.0p-30);
  const double slack = static_cast<double>(count) + 2.0;
  // A valid row's units are below n 2^32 < 2^63, its bounds' sum within the margins of
  // that; NaN fails the test.
  return static_cast<uint64_t>(units >= 0.0 && units < 0x1.0p63 ? units + slack : slack);
}

// A uniform point of [0, total) from 64 random bits (the high half of r * total: no
// modulo bias).
C10_HOST_DEVICE inline uint64_t uniform_point(uint32_t lo, uint32_t hi, uint64_t total) {
  return mul_hi64((static_cast<uint64_t>(hi) << 32) | lo, total);
}

// E ~ Exp(1) from 64 random bits, with relative error below 2^-50 everywhere: the bits
// are a uniform u on a 2^-64 grid, and whichever of u, 1 - u is below 1/2 is formed
// exactly enough (a 64-bit integer to double, a) to keep full relative precision. A
// 53-bit u would leave E near 0 on a 2^-53 grid, a relative error of up to 1 for the
// smallest E.
//
// One log for either half, no branch (a warp's lanes took both log and log1p, and the
// CPU mispredicted one key in two): for u < 1/2, E = -log(a); for u >= 1/2, a = 1 - u and
// w = 1 - a rounded, c = (1 - w) - a exactly (w >= 1/2), so E = -log(w + c), taken as
// -(log(w) + c). Relative to E (>= a), the errors: c for log1p(c / w) <= 2^-53; log's
// 1 ulp <= 2^-52; the sum's rounding 2^-53; a's rounding 2^-53, grown at most 1.44 times
// through the log: 5.44 * 2^-53 = 2^-50.56 in all.
C10_HOST_DEVICE inline double exponential(uint32_t lo, uint32_t hi) {
  const uint64_t r = (static_cast<uint64_t>(hi) << 32) | lo;
  constexpr double k2to64 = 0x1.0p-64;
  const bool upper = r >> 63;                                      // u >= 1/2
  const double a = (static_cast<double>(upper ? ~r : r) + 0.5) * k2to64;  // u, or 1 - u
  const double w = upper ? 1.0 - a : a;
  const double c = upper ? (1.0 - w) - a : 0.0;  // w + c = 1 - a exactly
  return -(::log(w) + c);
}

// Calls f(weights) with a call's weight law: `call` has `logits` and `inv_temperature`
// (a CPU Request or a CUDA DrawCall).
template <typename Call, typename F>
void with_weights(const Call& call, F&& f) {
  if (call.logits) {
    f(LogitWeights{call.inv_temperature});
  } else {
    f(ProbWeights{1.0});
  }
}

}  // namespace wrs::multinomial
