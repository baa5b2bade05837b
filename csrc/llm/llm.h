#pragma once
// What the LLM samplers draw from (sample_llm, filter_logits), shared by the CPU and CUDA
// kernels so both apply the same law with the same arithmetic.
//
// A row of inputs x (logits, or non-negative probabilities) and its controls:
//   1. values y_i: logits x_i * (1 / T) in float32 (temperature T > 0), probabilities x_i.
//      T = 0 is greedy: the first index of the largest logit.
//   2. keys: each y_i maps to a 32-bit key that orders as y does (order_key); every
//      threshold below is a key, so ties are kept together.
//   3. masses: q_i = round(mu_i * 2^B) in exact integers, mu_i = exp(y_i - max y) for logits,
//      y_i * (1 / max y) for probabilities (a product: the same float on every device, and
//      cheaper than a quotient per item), B = mass_bits(V) (40 for V <= 2^22). Sums of q are
//      exact, so the top-p decision does not depend on the order of summation.
//   4. top-k (1 <= k < V): t_k is the k-th largest key, counted with multiplicity; items
//      with key >= t_k are kept (ties with the k-th are kept, as Hugging Face and vLLM).
//   5. top-p (p < 1): over the top-k set, M = sum of its q; t_p is the largest key t whose
//      items {key >= t} carry q-mass >= ceil(p * M) (p * M in float64): the smallest set of
//      largest probabilities whose mass reaches p, the crossing value included.
//   6. min-p (m > 0): keep y_i - max y >= log(m) (logits, float32) or y_i >= m * max y.
//   7. the draw: from the kept items in proportion to exp(l_i), l_i = y_i - max y (logits)
//      or log y_i (probabilities), by inverting their float64 cumulative weights in row order
//      at a 53-bit uniform point (the CPU, and CUDA for plain calls and rows of up to 262,144
//      items). CUDA rows longer than that with controls take the largest race key
//      l_i - log E_i, E_i ~ Exp(1) from 32 Philox bits (exponential32), in float32: each
//      probability is within about 2^-20 relative of the exact law of the kept set.
// A row is invalid (token 0, NaN log-probability; check=True raises instead) when it holds
// NaN, +inf (logits) or a negative entry (probabilities), has no positive mass, or a
// per-row control is out of range (T < 0 or NaN, top-p not in (0, 1], min-p NaN).
#include "common/checks.h"
#include "common/macros.h"

#include <cmath>
#include <cstdint>
#include <limits>

namespace wrs::llm {

// Per-row controls as the kernels read them: a tensor's entry where given, else the scalar.
struct Controls {
  const float* temperature;  // [B] or nullptr
  const int64_t* top_k;
  const float* top_p;
  const float* min_p;
  const int64_t* seeds;  // [B] per-row Philox keys, or nullptr (the generator's stream)
  float temperature_value;
  int64_t top_k_value;
  float top_p_value;
  float min_p_value;
};

// One row's controls, resolved.
struct RowControls {
  float inv_temperature;  // 1 / T (1 when greedy)
  bool greedy;
  bool valid;
  int64_t top_k;  // 0: off
  float top_p;    // >= 1: off
  float min_p;    // <= 0: off
  C10_HOST_DEVICE bool top_k_on(int64_t v) const { return top_k > 0 && top_k < v; }
  C10_HOST_DEVICE bool top_p_on() const { return top_p < 1.0f; }
  C10_HOST_DEVICE bool min_p_on() const { return min_p > 0.0f; }
};

C10_HOST_DEVICE inline RowControls row_controls(const Controls& c, int64_t row) {
  const float t = c.temperature ? c.temperature[row] : c.temperature_value;
  const int64_t k = c.top_k ? c.top_k[row] : c.top_k_value;
  const float p = c.top_p ? c.top_p[row] : c.top_p_value;
  const float m = c.min_p ? c.min_p[row] : c.min_p_value;
  RowControls r;
  r.greedy = t == 0.0f;
  r.inv_temperature = r.greedy ? 1.0f : 1.0f / t;
  r.valid = t >= 0.0f && t <= std::numeric_limits<float>::max() && p > 0.0f && p == p && m == m;
  r.top_k = k > 0 ? k : 0;
  r.top_p = p;
  r.min_p = m > 1.0f ? 1.0f : m;
  return r;
}

// A 32-bit key that orders as the float does (-0 and +0 alike).
C10_HOST_DEVICE inline uint32_t order_key(float y) {
  y = y + 0.0f;  // -0 -> +0
  uint32_t b;
#if defined(__CUDA_ARCH__)
  b = __float_as_uint(y);
#else
  __builtin_memcpy(&b, &y, sizeof(b));
#endif
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// Fixed-point mass bits: V items of at most 2^B each sum below 2^62.
C10_HOST_DEVICE inline int mass_bits(int64_t v) {
  int bits = 0;
  while ((int64_t{1} << bits) < v) ++bits;
  return bits > 22 ? 62 - bits : 40;
}

// q_i from mu_i in [0, 1].
C10_HOST_DEVICE inline uint64_t quantize_mass(float mu, int bits) {
  return static_cast<uint64_t>(static_cast<double>(mu) * static_cast<double>(uint64_t{1} << bits) + 0.5);
}

template <bool kLogits>
C10_HOST_DEVICE inline float mass_of(float y, float ymax) {
  if (kLogits) return ::expf(y - ymax);
  return y * (1.0f / ymax);
}

// The log-weight a race and the log-probabilities use.
template <bool kLogits>
C10_HOST_DEVICE inline float log_weight(float y, float ymax) {
  return kLogits ? y - ymax : ::logf(y);
}

// ceil(p * M): the mass top-p must reach.
C10_HOST_DEVICE inline uint64_t top_p_target(float p, uint64_t m) {
  const double t = ::ceil(static_cast<double>(p) * static_cast<double>(m));
  return t < 1.0 ? 1 : static_cast<uint64_t>(t);
}

// log(min_p) rounded once from double, so the CPU and CUDA kernels keep the same items at the
// threshold (a fast float log differs by an ulp there).
C10_HOST_DEVICE inline float log_min_p_of(float min_p) {
  return static_cast<float>(::log(static_cast<double>(min_p)));
}

template <bool kLogits>
C10_HOST_DEVICE inline bool min_p_keeps(float y, float ymax, float min_p, float log_min_p) {
  if (kLogits) return y - ymax >= log_min_p;
  return y >= min_p * ymax;
}

// Whether a value makes its row invalid.
template <bool kLogits>
C10_HOST_DEVICE inline bool bad_value(float y) {
  if (y != y) return true;
  if (kLogits) return y > std::numeric_limits<float>::max();
  return y < 0.0f || y > std::numeric_limits<float>::max();
}

// E ~ Exp(1) from 32 random bits: -log(1 - u), u = (w + 1/2) 2^-32, through log1p so that
// small E (the likely winners) keep their relative precision; capped below 1 so E is finite.
C10_HOST_DEVICE inline float exponential32(uint32_t w) {
  float u = (static_cast<float>(w) + 0.5f) * 0x1.0p-32f;
  u = u < 0x1.fffffep-1f ? u : 0x1.fffffep-1f;
  return -::log1pf(-u);
}

// The race key of a kept item: l - log E.
C10_HOST_DEVICE inline float race_key(float l, uint32_t w) { return l - ::logf(exponential32(w)); }

// Philox stream of a draw: sample s of row r, item i takes word i % 4 of block
// (offset / 4 + s) of subsequence (row_tag * quads + i / 4); with per-row seeds the key is
// the row's seed, the offset 0 and row_tag 0, so a row's draws depend on its seed alone.
C10_HOST_DEVICE inline uint64_t subsequence(int64_t row_tag, int64_t quads, int64_t item) {
  return static_cast<uint64_t>(row_tag) * static_cast<uint64_t>(quads) + static_cast<uint64_t>(item / 4);
}

enum LogprobMode : int64_t { kNoLogprobs = 0, kProcessed = 1, kRaw = 2 };

}  // namespace wrs::llm
