#pragma once
// Float bounds on race keys (laws.h: w / E for probabilities, x / T - log E for logits),
// from the high 32 of the 64 random bits that exponential() takes: every race kernel
// (topk_*_cuda.cu, race_cuda.cu) rules out with them the items whose keys cannot win, so
// that most items skip their low word and the float64 log. Each bound holds for the
// float64 key exactly; the margins cover the float errors named beside them.
#include "multinomial/laws.h"

#include <cfloat>
#include <cstdint>

namespace wrs::multinomial {

// A lower bound of E, in float, from the high word of its 64 bits as exponential() takes
// them: E >= -log((hi + 1) 2^-32), computed in float (__logf: 2^-21.41 absolute near 1, 3
// ulp elsewhere; the float conversions 2^-24 relative) and shrunk by 2^-12 relative and
// 2^-20 absolute, well past those errors.
__device__ inline float e_below(uint32_t hi) {
  const float u_above = (static_cast<float>(hi) + 1.0f) * 0x1.0p-32f;  // >= u, in (0, 1]
  return fmaxf(-__logf(u_above) * (1.0f - 0x1.0p-12f) - 0x1.0p-20f, 0.0f);
}

// Is the key of item value v, with E drawn from high word `hi`, surely below t (what it
// must beat)? A float bound, so that most items skip the low word and the float64 log;
// true only where the exact key is below t.
// Probabilities, key v / E: below t > 0 when v < t e_below, with the product shrunk by
// 2^-12 relative past its float errors.
template <typename value_t>  // float or double: the input's value, exact
__device__ inline bool surely_below(const ProbWeights&, value_t v, uint32_t hi, double t) {
  const float vf = static_cast<float>(v), tf = static_cast<float>(t);
  if (!(vf >= FLT_MIN && tf >= FLT_MIN && tf <= 1e30f)) return false;  // normal floats only
  return vf < tf * e_below(hi) * (1.0f - 0x1.0p-12f);
}
// Logits, key v / T - log E: below t when v / T - log(e_below) is, past a margin of 2^-16
// relative to the terms plus 2^-16 absolute. The float errors it covers: v / T and t
// rounded to float (2^-22.4 and 2^-24 relative), __logf (2^-21.4 absolute or relative),
// the sum (2^-24 relative).
template <typename value_t>
__device__ inline bool surely_below(const LogitWeights& w, value_t v, uint32_t hi, double t) {
  const float vt = static_cast<float>(v) * static_cast<float>(w.inv_temperature);
  const float tf = static_cast<float>(t);
  const float e = e_below(hi);
  if (!(fabsf(vt) <= 1e30f && fabsf(tf) <= 1e30f && e >= FLT_MIN)) return false;
  const float minus_log_e = -__logf(e);  // >= -log E
  const float margin = (fabsf(vt) + fabsf(minus_log_e) + fabsf(tf)) * 0x1.0p-16f + 0x1.0p-16f;
  return vt + minus_log_e + margin < tf;
}

// A first test with no log, for every item of a trip: E = -log u >= 1 - u, and 1 - u is
// above (~hi) 2^-32 (u < (hi + 1) 2^-32). An item it rules out has its key below t; one
// it keeps goes on to surely_below. It keeps few more than surely_below would: where
// the key's share of t is x, those whose 1 - u lies between 1 - e^-x and x, about x^2 / 2.
// The margins: 2^-12 relative on either side of the comparison, against float errors of
// at most 2^-21 relative (the conversions, __fdividef's 2 ulp, the products) and the
// float64 key's 2^-49.
//
// Probabilities, key v / E: below t when (~hi) 2^-32 >= v / t past the margins, so the
// test is (~hi) (1 - 2^-12) >= v * ruling_scale(t); the scale is 2^32 / t grown by 2^-12,
// +inf (rules nothing out) unless t is a normal float up to 1e30, and v must be normal.
__device__ inline float ruling_scale(const ProbWeights&, double t) {
  const float tf = static_cast<float>(t);
  return tf >= FLT_MIN && tf <= 1e30f ? __fdividef(0x1.0p32f, tf) * (1.0f + 0x1.0p-12f) : INFINITY;
}
template <typename value_t>
__device__ inline bool ruled_out(const ProbWeights&, value_t v, uint32_t hi, float scale) {
  const float vf = static_cast<float>(v);
  return vf >= FLT_MIN && static_cast<float>(~hi) * (1.0f - 0x1.0p-12f) >= vf * scale;
}
// Logits, key v / T - log E: below t when log((~hi) 2^-32) >= v / T - t past the margins,
// in log2 units: log2(~hi) >= 32 + (v / T - t) log2(e) + 2^-16 (|v / T| + |t|) log2(e)
// + 2^-10 (__log2f: 2^-17 absolute up to 32; the rest as surely_below's). A t or v / T
// that is not finite makes the right side +inf or NaN, which rules nothing out.
__device__ inline float ruling_scale(const LogitWeights&, double t) { return static_cast<float>(t); }
template <typename value_t>
__device__ inline bool ruled_out(const LogitWeights& w, value_t v, uint32_t hi, float tf) {
  constexpr float kLog2e = 1.44269504f;
  const float vt = static_cast<float>(v) * static_cast<float>(w.inv_temperature);
  const float spread = (fabsf(vt) + fabsf(tf)) * 0x1.0p-16f + (vt - tf);
  return __log2f(static_cast<float>(~hi)) >= spread * kLog2e + (32.0f + 0x1.0p-10f);
}

// How likely item v's key is to be the largest of a few, roughly and cheaply (1 - u for
// E): it only picks which item a lane bounds first (key_below), never a draw.
template <typename value_t>
__device__ inline float rough_rank(const ProbWeights&, value_t v, uint32_t hi) {
  return __fdividef(static_cast<float>(v), static_cast<float>(~hi) + 1.0f);
}
template <typename value_t>
__device__ inline float rough_rank(const LogitWeights& w, value_t v, uint32_t hi) {
  return static_cast<float>(v) * static_cast<float>(w.inv_temperature) * 1.44269504f -
         __log2f(static_cast<float>(~hi) + 1.0f);
}

// An upper bound of E from the high word of its 64 bits: E <= -log(hi 2^-32), in float,
// grown by 2^-12 relative and 2^-20 absolute past the errors e_below allows for; infinite
// for hi = 0.
__device__ inline float e_above(uint32_t hi) {
  if (hi == 0) return INFINITY;
  return -__logf(static_cast<float>(hi) * 0x1.0p-32f) * (1.0f + 0x1.0p-12f) + 0x1.0p-20f;
}

// A float strictly below the exact key of item value v with E drawn from high word `hi`
// (the margins of surely_below's), or -INFINITY.
template <typename value_t>
__device__ inline float key_below(const ProbWeights&, value_t v, uint32_t hi) {
  const float vf = static_cast<float>(v);
  if (!(vf >= FLT_MIN && vf <= 1e30f)) return -INFINITY;
  return vf / e_above(hi) * (1.0f - 0x1.0p-12f);
}
template <typename value_t>
__device__ inline float key_below(const LogitWeights& w, value_t v, uint32_t hi) {
  const float vt = static_cast<float>(v) * static_cast<float>(w.inv_temperature);
  const float e = e_above(hi);
  if (!(fabsf(vt) <= 1e30f && e <= 1e30f)) return -INFINITY;
  const float minus_log_e = -__logf(e);  // <= -log E, up to __logf's error
  return vt + minus_log_e - ((fabsf(vt) + fabsf(minus_log_e)) * 0x1.0p-16f + 0x1.0p-16f);
}

// Float bounds below and above an item's key from the high word alone, for the floor
// top-k (floor_topk_cuda.cu): below for the floor, above for a quad's ceiling. With
// m = (~hi) + 1 = 2^32 - hi and u in (hi 2^-32, (hi + 1) 2^-32) (exponential()'s grid),
// E = -log u lies between 1 - u > (~hi) 2^-32 and (1 - u) / u < m / hi.
struct KeyRange {
  float below;  // <= the key
  float above;  // >= the key
};
// Probabilities, key v / E, with no log: v (r - 1) <= key < v r m / (m - 1), r = 2^32 / m.
// The float errors (m's conversion, __fdividef's 2 ulp, the products: 2^-20 in all) and
// m / (m - 1) <= 1 + 2^-11 (above is +inf for ~hi < 2^11, one item in 2^21) sit inside
// the 2^-9 margins; r (1 - 2^-9) - 1 stays below r - 1 where rounding would cancel.
template <typename value_t>
__device__ inline KeyRange key_range(const ProbWeights&, value_t v, uint32_t hi) {
  const float vf = static_cast<float>(v);
  const float r = __fdividef(0x1.0p32f, static_cast<float>(~hi) + 1.0f);
  return {vf * fmaxf(r * (1.0f - 0x1.0p-9f) - 1.0f, 0.0f),
          ~hi >= 2048u ? vf * r * (1.0f + 0x1.0p-9f) : INFINITY};
}
// Logits, key v / T - log E, in log2 units: v / T + ln 2 (log2 hi - log2 m) <= key <
// v / T + ln 2 (32 - log2 (m - 1)), and log2 (m / (m - 1)) < 2^-10 for ~hi >= 2^11 (else
// above is +inf). The margin, (|v / T| + 32) 2^-16 + 2^-12, covers v / T in float
// (2^-22 relative), two __log2f (2 ulp at 32: 2^-18 each) and the sums' rounding.
template <typename value_t>
__device__ inline KeyRange key_range(const LogitWeights& w, value_t v, uint32_t hi) {
  constexpr float kLn2 = 0.693147181f;
  const float vt = static_cast<float>(v) * static_cast<float>(w.inv_temperature);
  const float log2_m = __log2f(static_cast<float>(~hi) + 1.0f);
  const float margin = (fabsf(vt) + 32.0f) * 0x1.0p-16f + 0x1.0p-12f;
  return {vt + kLn2 * (__log2f(static_cast<float>(hi)) - log2_m) - margin,
          ~hi >= 2048u ? vt + kLn2 * (32.0f + 0x1.0p-10f - log2_m) + margin : INFINITY};
}

// Floats as unsigned integers in the same order, for a warp's max in one redux.
__device__ inline uint32_t ordered_float_bits(float f) {
  const uint32_t b = __float_as_uint(f);
  return b >> 31 ? ~b : b | 0x80000000u;
}
__device__ inline float from_ordered_float_bits(uint32_t o) {
  return __uint_as_float(o >> 31 ? o & 0x7fffffffu : ~o);
}

}  // namespace wrs::multinomial
