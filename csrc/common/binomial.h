#pragma once
// Exact binomial deviates on the CPU and the GPU, from any source of 32-bit random
// numbers (at::philox_engine on the host, cuRAND's Philox on the device): the same
// inputs give the same deviate on both.
//
// n * p < 10: inversion with one uniform, walking the pmf from 0 (expected n*p + 1 steps).
// Otherwise: Hormann's BTRS (transformed rejection with squeeze, 1993), whose acceptance
// rate is above 0.86 for every n * p >= 10. The acceptance test compares against the
// exact log-pmf ratio f(k) / f(m), written as logs of ratios plus Stirling tails so it
// keeps its precision for counts near 2^53 (lgamma differences would not).
#include "common/uniform.h"

#include <c10/macros/Macros.h>

#include <cmath>
#include <cstdint>

namespace wrs {

// log(k!) - [(k + 1/2) log(k + 1) - (k + 1) + log(2 pi) / 2]: the Stirling tail.
// k < 10 from a table (computed with lgamma in double precision), else the series
// 1/(12x) - 1/(360x^3) + 1/(1260x^5) - 1/(1680x^7), x = k + 1, which is within 1e-12 there.
C10_HOST_DEVICE inline double stirling_tail(double k) {
  constexpr double kSmall[10] = {0.08106146679532733,  0.04134069595540946,  0.027677925684997717,
                                 0.02079067210376584,  0.01664469118982126,  0.013876128823072875,
                                 0.011896709945893313, 0.010411265261973668, 0.00925546218270945,
                                 0.008330563433359472};
  if (k < 10) return kSmall[static_cast<int>(k)];
  const double x = k + 1;
  const double x2 = x * x;
  return (1.0 / 12 - (1.0 / 360 - (1.0 / 1260 - 1.0 / (1680 * x2)) / x2) / x2) / x;
}

template <typename Bits>
C10_HOST_DEVICE inline int64_t binomial_inversion(int64_t n, double p, Bits& bits) {
  const double q = 1 - p;
  const double ratio = p / q;
  const double f0 = exp(static_cast<double>(n) * log1p(-p));  // P(X = 0) >= e^-10 here
  for (;;) {
    double u = open_uniform(bits);
    double f = f0;
    for (int64_t k = 0; k <= n; ++k) {
      if (u <= f) return k;
      u -= f;
      f *= ratio * static_cast<double>(n - k) / static_cast<double>(k + 1);
      if (f == 0) break;  // u beyond the rounded-off total mass: draw again (rare, exact)
    }
  }
}

template <typename Bits>
C10_HOST_DEVICE inline int64_t binomial_btrs(int64_t n_int, double p, Bits& bits) {
  const double n = static_cast<double>(n_int);
  const double q = 1 - p;
  const double spq = sqrt(n * p * q);
  const double b = 1.15 + 2.53 * spq;
  const double a = -0.0873 + 0.0248 * b + 0.01 * p;
  const double c = n * p + 0.5;
  const double v_r = 0.92 - 4.2 / b;
  const double alpha = (2.83 + 5.1 / b) * spq;
  const double r = p / q;
  const double m = floor((n + 1) * p);  // the mode
  for (;;) {
    const double u = open_uniform(bits) - 0.5;
    double v = open_uniform(bits);
    const double us = 0.5 - fabs(u);
    const double k = floor((2 * a / us + b) * u + c);
    if (k < 0 || k > n) continue;
    if (us >= 0.07 && v <= v_r) return static_cast<int64_t>(k);  // squeeze
    v = log(v * alpha / (a / (us * us) + b));
    // log(f(k) / f(m)) for the binomial pmf f.
    const double log_ratio = (n + 1) * log1p((k - m) / (n - k + 1)) +
                             (m + 0.5) * log((m + 1) / (r * (n - m + 1))) +
                             (k + 0.5) * log(r * (n - k + 1) / (k + 1)) + stirling_tail(m) +
                             stirling_tail(n - m) - stirling_tail(k) - stirling_tail(n - k);
    if (v <= log_ratio) return static_cast<int64_t>(k);
  }
}

// One Binomial(n, p) deviate, n >= 0, p in [0, 1].
template <typename Bits>
C10_HOST_DEVICE inline int64_t binomial(int64_t n, double p, Bits& bits) {
  if (n == 0 || p <= 0) return 0;
  if (p >= 1) return n;
  const bool flip = p > 0.5;  // draw the failures instead: the samplers want p <= 1/2
  const double p_small = flip ? 1 - p : p;
  const int64_t k = static_cast<double>(n) * p_small < 10 ? binomial_inversion(n, p_small, bits)
                                                          : binomial_btrs(n, p_small, bits);
  return flip ? n - k : k;
}

}  // namespace wrs
