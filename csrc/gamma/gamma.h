#pragma once
// Gamma(alpha, 1) deviates on the CPU and the GPU: five exact rejection generators
// (Ericsson 2024, ch. 3, checked against the original papers), the boost for small
// alpha, and the per-element driver both kernels run.
//
// Randomness: elements 2j and 2j+1 (a pair) read Philox subsequence j of the call's
// stream: block 0 holds their boost uniforms, and each later block (two in float64
// arithmetic) is one candidate for each of them, the method splitting its uniforms
// between the two (Marsaglia-Tsang's Box-Muller gives each one of its two normals). So
// one Philox call and one Box-Muller serve two elements, and a result depends only on
// (seed, offset, pair) and the pair's alphas, never on the grid or thread count.
//
// alpha < 1 (alpha <= 1 for methods that need alpha > 1): X = Y * U^(1/alpha) with
// Y ~ Gamma(alpha + 1) (Marsaglia-Tsang 2000, note on p. 371), computed as
// log X = log Y + log(U) / alpha, so X underflows only where its true value does, and
// log X is exact for any alpha > 0.
#include <c10/macros/Macros.h>
#include <c10/util/string_view.h>

#include <cmath>
#include <cstdint>
#include <limits>

namespace wrs::gamma {

enum class Method : int { kChengGA, kMarsagliaTsang, kAhrensDieterGC, kBestXG, kChengFeastGKM3 };

// Words of one Philox block (4) or two (8): a pair's candidate, or its boost uniforms.
template <typename acc_t>
struct CandidateWords {
  static constexpr int kCount = sizeof(acc_t) == 4 ? 4 : 8;
  uint32_t w[kCount];
};

// The i-th uniform in (0, 1) of a block's words, both ends excluded. float: 23 bits,
// (m + 1/2) 2^-23, exact in float; double: 53 bits from two words.
template <typename acc_t>
C10_HOST_DEVICE inline acc_t uniform(const CandidateWords<acc_t>& c, int i);

// On the GPU as one fused multiply-add, m 2^-23 + 2^-24: the same value, exact either way
// ((2m + 1) 2^-24 has 24 bits), one instruction fewer per uniform.
template <>
C10_HOST_DEVICE inline float uniform<float>(const CandidateWords<float>& c, int i) {
  const float m = static_cast<float>(c.w[i] >> 9);
#ifdef __CUDA_ARCH__
  return fmaf(m, 0x1.0p-23f, 0x1.0p-24f);
#else
  return (m + 0.5f) * 0x1.0p-23f;
#endif
}

template <>
C10_HOST_DEVICE inline double uniform<double>(const CandidateWords<double>& c, int i) {
  const uint64_t bits = (static_cast<uint64_t>(c.w[2 * i]) << 32) | c.w[2 * i + 1];
  const double m = static_cast<double>(bits >> 11);
#ifdef __CUDA_ARCH__
  return fma(m, 0x1.0p-53, 0x1.0p-54);
#else
  return (m + 0.5) * 0x1.0p-53;
#endif
}

// What one candidate of one element consumes: two uniforms, or a normal and a uniform.
template <typename acc_t>
struct Draw {
  acc_t first, second;
};

// The usual split of a candidate block: uniforms 0, 1 to the pair's first element, 2, 3
// to its second.
template <typename acc_t>
C10_HOST_DEVICE inline void split_uniforms(const CandidateWords<acc_t>& w, Draw<acc_t> (&d)[2]) {
  d[0] = {uniform(w, 0), uniform(w, 1)};
  d[1] = {uniform(w, 2), uniform(w, 3)};
}

// Arithmetic inside the rejection loops. In float on the GPU these are the hardware
// approximations (MUFU: absolute error ~2^-21 in log near 1, a few ulp elsewhere): they
// move an accept/reject boundary by about one part in 10^6 of a candidate's density,
// far below what 10^7-sample KS tests resolve, and cost a quarter of the exact calls.
// The boost's log U / alpha, which sets the small-alpha tail, stays exact.
//
// log, sqrt and rsqrt use the flush-to-zero forms (.ftz): for normal arguments they give
// __logf's and rsqrtf's bits, without the three instructions each of those spends
// rescaling a subnormal argument. Uniforms are >= 2^-24 and the set-ups' arguments >= 1,
// so only a test's log can meet a subnormal (giving -inf, not about -90). For
// Marsaglia-Tsang that is log v, and the candidate is rejected either way (3d log v <
// -200d against log U >= -17); for the other methods, an argument below 2^-126 has
// probability below 2^-100 per candidate.
namespace fast {

template <typename T>
C10_HOST_DEVICE inline T log(T x) {
#ifdef __CUDA_ARCH__
  if constexpr (sizeof(T) == 4) {
    float log2_x;
    asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(log2_x) : "f"(x));
    return log2_x * 0.693147180559945309f;  // as __logf
  }
#endif
  return std::log(x);
}

template <typename T>
C10_HOST_DEVICE inline T exp(T x) {
#ifdef __CUDA_ARCH__
  if constexpr (sizeof(T) == 4) return __expf(x);
#endif
  return std::exp(x);
}

template <typename T>
C10_HOST_DEVICE inline T div(T a, T b) {
#ifdef __CUDA_ARCH__
  if constexpr (sizeof(T) == 4) return __fdividef(a, b);
#endif
  return a / b;
}

template <typename T>
C10_HOST_DEVICE inline T rsqrt(T x) {
#ifdef __CUDA_ARCH__
  if constexpr (sizeof(T) == 4) {
    float r;
    asm("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
  }
  return ::rsqrt(x);
#endif
  return 1 / std::sqrt(x);
}

// sqrt(x) for x > 0.
template <typename T>
C10_HOST_DEVICE inline T sqrt(T x) {
#ifdef __CUDA_ARCH__
  if constexpr (sizeof(T) == 4) return x * rsqrt(x);
#endif
  return std::sqrt(x);
}

// (sin, cos) of 2 pi (u - 1/2) for u in (0, 1): the argument stays in (-pi, pi).
// float64 on the GPU: one sincospi of 2u - 1, whose reduction is exact and cheap, where
// separate sin and cos of the rounded product each carry a general argument reduction
// (with its local-memory slow path): the float64 kernel's stack frame and a third of
// its double instructions per candidate pair.
template <typename T>
C10_HOST_DEVICE inline void sincos_two_pi(T u, T& s, T& c) {
#ifdef __CUDA_ARCH__
  if constexpr (sizeof(T) == 8) {
    ::sincospi(2 * u - 1, &s, &c);
    return;
  }
#endif
  const T theta = static_cast<T>(6.283185307179586476925) * (u - static_cast<T>(0.5));
#ifdef __CUDA_ARCH__
  if constexpr (sizeof(T) == 4) {
    __sincosf(theta, &s, &c);
    return;
  }
#endif
  s = std::sin(theta);
  c = std::cos(theta);
}

// tan(pi (u - 1/2)) for u in (0, 1).
template <typename T>
C10_HOST_DEVICE inline T tan_pi_centered(T u) {
  const T theta = static_cast<T>(3.14159265358979323846) * (u - static_cast<T>(0.5));
#ifdef __CUDA_ARCH__
  if constexpr (sizeof(T) == 4) return __fdividef(__sinf(theta), __cosf(theta));
#endif
  return std::tan(theta);
}

}  // namespace fast

// Cheng (1977) GA: Burr XII proposal with lambda = sqrt(2 alpha - 1) (the thesis prints
// a = sqrt(2 alpha - 1); Cheng's a is its reciprocal). alpha >= 1. No squeeze.
template <typename acc_t>
struct ChengGA {
  static constexpr bool kNeedsAlphaAboveOne = false;
  acc_t alpha, a, b, c;
  C10_HOST_DEVICE void setup(acc_t al) {
    alpha = al;
    const acc_t lambda = fast::sqrt(2 * al - 1);
    a = fast::div(acc_t(1), lambda);
    b = al - static_cast<acc_t>(1.3862943611198906);  // alpha - log 4
    c = al + lambda;
  }
  C10_HOST_DEVICE static void split(const CandidateWords<acc_t>& w, Draw<acc_t> (&d)[2]) { split_uniforms(w, d); }
  C10_HOST_DEVICE bool attempt(const Draw<acc_t>& d, acc_t& x) const {
    const acc_t u1 = d.first, u2 = d.second;
    const acc_t v = a * fast::log(fast::div(u1, 1 - u1));
    x = alpha * fast::exp(v);
    return b + c * v - x >= fast::log(u1 * u1 * u2);
  }
};

// Marsaglia-Tsang (2000) without the squeeze: Box-Muller normal, then the exact test.
// alpha >= 1.
template <typename acc_t>
struct MarsagliaTsang {
  static constexpr bool kNeedsAlphaAboveOne = false;
  acc_t d, c;
  C10_HOST_DEVICE void setup(acc_t al) {
    d = al - static_cast<acc_t>(1) / 3;
    c = fast::rsqrt(9 * d);
  }
  // One Box-Muller: its two normals go to the pair's two elements.
  C10_HOST_DEVICE static void split(const CandidateWords<acc_t>& w, Draw<acc_t> (&dr)[2]) {
    const acc_t r = fast::sqrt(-2 * fast::log(uniform(w, 0)));
    acc_t s, co;
    fast::sincos_two_pi(uniform(w, 1), s, co);
    dr[0] = {r * co, uniform(w, 2)};
    dr[1] = {r * s, uniform(w, 3)};
  }
  // The paper's squeeze first: U < 1 - 0.0331 z^4 lies inside the acceptance region
  // (Marsaglia and Tsang 2000), so it accepts the same candidates without the two logs,
  // which in float64 are most of a candidate's cost. The two tests can disagree only
  // where both round at the boundary (near z = 0, U near 1), a set of probability ~eps.
  C10_HOST_DEVICE bool attempt(const Draw<acc_t>& dr, acc_t& x) const {
    const acc_t z = dr.first;
    const acc_t v = 1 + c * z;
    x = d * (v * v * v);
    const acc_t z2 = z * z;
#ifdef __CUDA_ARCH__
    if constexpr (sizeof(acc_t) == 4) {
      // The same decisions without branches: a warp's 64 candidates a trip leave the
      // squeeze's ~7% to the log test on almost every trip, so every lane runs it (two
      // MUFU calls) instead of the warp branching around it.
      const bool squeezed = dr.second < 1 - static_cast<acc_t>(0.0331) * (z2 * z2);
      const bool below = fast::log(dr.second) < z2 / 2 + d - x + 3 * d * fast::log(v);
      return (v > 0) & (squeezed | below);
    }
#endif
    if (!(v > 0)) return false;
    if (dr.second < 1 - static_cast<acc_t>(0.0331) * (z2 * z2)) return true;
    if constexpr (sizeof(acc_t) == 8) {
      const int sure = log_test_in_float(dr.second, v, z2, x);
      if (sure != 0) return sure > 0;
    }
    return fast::log(dr.second) < z2 / 2 + d - x + 3 * d * fast::log(v);
  }

  // float64: the log test evaluated in float, trusted only where its rounding cannot
  // change the outcome. The ~10% of candidates the squeeze leaves make a warp run the
  // test on almost every trip with few lanes on, and in float64 its two logs are long
  // software sequences; in float they are two MUFU calls.
  // The test is T = z^2/2 + d - x + 3 d log v - log U > 0. In float, log U and log v are
  // within 2^-21 (1 + |log|) (rounding the argument: 2^-24 relative; __logf: 2^-21.41
  // absolute on [1/2, 2], 3 ulp elsewhere), and every other term and the sums within a few
  // 2^-24 of their magnitudes, so |T_float - T| <= 2^-19 (1 + z^2/2 + 4d + x + 3d |log v|
  // + |log U|); the float64 evaluation's own error is ~2^-50 of the same. Past a margin of
  // four times that bound both agree on the sign. Returns +1 (accept), -1 (reject), or 0:
  // inside the margin, or not finite in float (alpha beyond float's range): decide in
  // float64. About 1e-4 of the candidates that reach it for alpha <= 10.
  C10_HOST_DEVICE int log_test_in_float(acc_t u, acc_t v, acc_t z2, acc_t x) const {
    const float log_u = fast::log(static_cast<float>(u)), log_v = fast::log(static_cast<float>(v));
    const float df = static_cast<float>(d), xf = static_cast<float>(x), half_z2 = static_cast<float>(z2) / 2;
    const float t = half_z2 + (df - xf) + 3 * df * log_v - log_u;
    const float margin = 0x1.0p-17f * (1 + half_z2 + 4 * df + xf + 3 * df * std::fabs(log_v) - log_u);
    return t > margin ? 1 : t < -margin ? -1 : 0;
  }
};

// Ahrens-Dieter (1974) GC: Cauchy proposal at alpha - 1 with scale sqrt(2 alpha - 1).
// alpha > 1. (The thesis's listing garbles the set-up and the test; this is the paper's.)
template <typename acc_t>
struct AhrensDieterGC {
  static constexpr bool kNeedsAlphaAboveOne = true;
  acc_t b, inv_a, s;
  C10_HOST_DEVICE void setup(acc_t al) {
    b = al - 1;
    inv_a = fast::div(acc_t(1), 2 * al - 1);
    s = fast::sqrt(2 * al - 1);
  }
  C10_HOST_DEVICE static void split(const CandidateWords<acc_t>& w, Draw<acc_t> (&d)[2]) { split_uniforms(w, d); }
  C10_HOST_DEVICE bool attempt(const Draw<acc_t>& d, acc_t& x) const {
    const acc_t t = s * fast::tan_pi_centered(d.first);
    x = b + t;
    return x > 0 && fast::log(d.second) <= b * fast::log(fast::div(x, b)) - t + fast::log(1 + t * t * inv_a);
  }
};

// Best (1978) XG without its squeeze: Student t(2) proposal centred at alpha - 1
// (Devroye 1986, IX.3.3; the thesis's listing is garbled). alpha > 1.
template <typename acc_t>
struct BestXG {
  static constexpr bool kNeedsAlphaAboveOne = true;
  acc_t b, sqrt_c;
  C10_HOST_DEVICE void setup(acc_t al) {
    b = al - 1;
    sqrt_c = fast::sqrt(3 * al - static_cast<acc_t>(0.75));
  }
  C10_HOST_DEVICE static void split(const CandidateWords<acc_t>& w, Draw<acc_t> (&d)[2]) { split_uniforms(w, d); }
  C10_HOST_DEVICE bool attempt(const Draw<acc_t>& d, acc_t& x) const {
    const acc_t u = d.first, v = d.second;
    const acc_t ww = u * (1 - u);
    const acc_t y = fast::div(sqrt_c, fast::sqrt(ww)) * (u - static_cast<acc_t>(0.5));
    x = b + y;
    const acc_t z = 64 * ww * ww * ww * v * v;
    return x > 0 && fast::log(z) <= 2 * (b * fast::log(fast::div(x, b)) - y);
  }
};

// Cheng-Feast (1979) GKM3: ratio of uniforms; the rectangle (GKM1) below alpha = 2.5,
// the parallelogram U1 - U2 in [-1, 0.86] / sqrt(alpha) (GKM2) above. No squeeze. The
// test is log U2 < (a/2)(log W + 1 - W), the paper's c log U2 - log W + W - 1 < 0 times
// a/2 (the thesis drops the -1), which keeps its precision as a -> 0. Both enclosures
// were checked numerically to contain the acceptance region for alpha in (1, 1e6].
template <typename acc_t>
struct ChengFeastGKM3 {
  static constexpr bool kNeedsAlphaAboveOne = true;
  acc_t a, b, half_a, shear;  // shear = 1 / sqrt(alpha) for GKM2, 0 for GKM1
  C10_HOST_DEVICE void setup(acc_t al) {
    a = al - 1;
    b = fast::div(al - fast::div(acc_t(1), 6 * al), a);
    half_a = a / 2;
    shear = al < static_cast<acc_t>(2.5) ? 0 : fast::rsqrt(al);
  }
  C10_HOST_DEVICE static void split(const CandidateWords<acc_t>& w, Draw<acc_t> (&d)[2]) { split_uniforms(w, d); }
  C10_HOST_DEVICE bool attempt(const Draw<acc_t>& d, acc_t& x) const {
    const acc_t u1 = d.first;
    const acc_t u2 = shear == 0 ? d.second : u1 + shear * (1 - static_cast<acc_t>(1.86) * d.second);
    const acc_t ratio = fast::div(b * u1, u2);
    x = a * ratio;
    return u2 > 0 && u2 < 1 && fast::log(u2) < half_a * (fast::log(ratio) + 1 - ratio);
  }
};

// One element's generation: start(), set_boost() if start() asked for it, then
// attempt() per candidate until it returns true with the result (X, or log X when
// log_output) in `out`.
template <typename acc_t, typename Gen>
struct Element {
  enum Kind : int { kConstant, kDirect, kBoost };
  Gen gen;
  // alpha: what start() set up for, NaN for none (and for a negative or NaN alpha), so
  // that an alpha equal to it needs no new set-up (Pair::start); log_boost = log(U) / alpha;
  // inv_alpha = 1 / alpha for a boosted element (keeps_reciprocal), kept with the set-up (Pair::start).
  acc_t alpha = std::numeric_limits<acc_t>::quiet_NaN(), log_boost, inv_alpha;
  Kind kind;

  // Returns true when the element needs its boost uniform.
  C10_HOST_DEVICE bool start(acc_t al) {
    // Gamma(0) is 0, Gamma(inf) is inf; negative or NaN alpha (unvalidated) gives NaN
    // rather than a rejection loop that never accepts.
    const bool constant = !(al > 0 && al < std::numeric_limits<acc_t>::infinity());
    const bool boost = !constant && (Gen::kNeedsAlphaAboveOne ? al <= 1 : al < 1);
    kind = constant ? kConstant : boost ? kBoost : kDirect;
    // -0 as +0: the two compare equal, and a set-up kept for one must serve the other.
    alpha = al > 0 ? al : al == 0 ? acc_t(0) : std::numeric_limits<acc_t>::quiet_NaN();
    // al + 1 rounds to 1 for al below the epsilon: step just above 1, where the
    // alpha > 1 methods are defined (Gamma(1 + eps) and Gamma(1 + al) agree to eps).
    const acc_t boosted = al + 1 > 1 ? al + 1 : 1 + std::numeric_limits<acc_t>::epsilon();
    // Set up for a constant too, whose kind never reads it: the GPU's switch to a pair's
    // next element then has no branch.
    gen.setup(boost ? boosted : al);
    return boost;
  }

  // The boost's log U / alpha, with an exact log: it sets the law's tail towards 0. On the
  // GPU in float64, log U times 1 / alpha, which a pair keeps while its alphas repeat:
  // there the division is a software sequence that each boost would pay (the product is
  // within an ulp of the quotient; docs/methods.md, "Gamma and Dirichlet on CUDA"). Where 1 / alpha
  // overflows (alpha below 1 / max), the division. (In float the GPU's division is already
  // a reciprocal and a product; the CPU's is one instruction, and keeping the reciprocal
  // measured 2-8% slower there, float64 2^20 elements, 2 threads.)
  C10_HOST_DEVICE static constexpr bool keeps_reciprocal() {
#ifdef __CUDA_ARCH__
    return sizeof(acc_t) == 8;
#else
    return false;
#endif
  }
  C10_HOST_DEVICE void set_boost(acc_t u) { log_boost = boost(u, alpha, inv_alpha); }
  C10_HOST_DEVICE static acc_t boost(acc_t u, acc_t alpha, acc_t inv_alpha) {
    const acc_t log_u = std::log(u);
    if (keeps_reciprocal() && inv_alpha < std::numeric_limits<acc_t>::infinity()) return log_u * inv_alpha;
    return fast::div(log_u, alpha);
  }
  C10_HOST_DEVICE void set_reciprocal() { inv_alpha = fast::div(acc_t(1), alpha); }

  C10_HOST_DEVICE bool attempt(const Draw<acc_t>& d, bool log_output, acc_t& out) const {
    if (kind == kConstant) {
      out = log_output ? std::log(alpha) : alpha;
      return true;
    }
    acc_t y;
    if (!gen.attempt(d, y)) return false;
    if (kind == kDirect) {
      out = log_output ? fast::log(y) : y;
    } else if (log_output) {
      out = fast::log(y) + log_boost;
    } else if (log_boost > kLogMinNormal) {
      // X = Y U^(1/alpha) as a product while exp(log U / alpha) is a normal number: no
      // log of Y (a float64 log per element, 13% of the call at alpha = 0.5 on an H100),
      // and two roundings where the log route carries log Y's error.
      out = y * std::exp(log_boost);
    } else {
      out = std::exp(fast::log(y) + log_boost);  // X near or below the smallest normal: log space keeps it exact
    }
    return true;
  }

  // True when the element is a constant (alpha 0, inf, negative or NaN): the only
  // elements whose alphas a validating kernel needs to look at.
  C10_HOST_DEVICE bool constant() const { return kind == kConstant; }

  // log of the smallest normal number: exp of anything above it is normal.
  static constexpr acc_t kLogMinNormal =
      static_cast<acc_t>((std::numeric_limits<acc_t>::min_exponent - 1) * 0.69314718055994530942);
};

// A pair of elements sharing a Philox subsequence (see the top of this file). Kernels
// call start(), feed boost_words() if needs_boost, then candidate words to step() until
// it returns true; results are in out[0], out[1] (out[1] unused when !has_second).
template <typename acc_t, typename Gen>
struct Pair {
  Element<acc_t, Gen> e[2];
  bool done[2];
  bool needs_boost;
  acc_t out[2];

  C10_HOST_DEVICE void start(acc_t alpha0, acc_t alpha1, bool has_second) {
    const acc_t a1 = has_second ? alpha1 : acc_t(0);  // a missing second is a constant
    // The alphas this pair last set up for (one alpha repeated: a scalar concentration
    // expanded, symmetric Dirichlet rows): the kinds, the generators' constants and
    // needs_boost stand. The set-up was a sixth of the GPU's float64 instructions per trip
    // at alpha 10, its lanes switching pairs on almost every trip (Nsight Compute, H100).
    if (!(alpha0 == e[0].alpha && a1 == e[1].alpha)) {
      needs_boost = e[0].start(alpha0);
      needs_boost |= e[1].start(a1);
      if (Element<acc_t, Gen>::keeps_reciprocal() && needs_boost) set_reciprocals();
    }
    done[0] = false;
    done[1] = !has_second;
  }
  C10_HOST_DEVICE bool any_constant() const { return e[0].constant() || e[1].constant(); }
  // Only the elements that take the boost get its exact log and division: one call for
  // the pair's first such element, a second only where both are. Mixed alphas leave a
  // few lanes of a warp on this branch on almost every trip, most with one such element,
  // and there both elements' logs and divisions were a fifth of the float64 kernel's
  // instructions (U(0.1, 10), H100). (An if/else of one call against two measured 8%
  // slower there: a warp holding both kinds ran three calls.) Selects, not e[k]: a
  // register array indexed at run time would go to local memory.
  C10_HOST_DEVICE void boost_words(const CandidateWords<acc_t>& w) {
    using E = Element<acc_t, Gen>;
    const bool first = e[0].kind == E::kBoost;
    const acc_t log_boost = E::boost(first ? uniform(w, 0) : uniform(w, 1), first ? e[0].alpha : e[1].alpha,
                                     first ? e[0].inv_alpha : e[1].inv_alpha);
    if (first) {
      e[0].log_boost = log_boost;
    } else {
      e[1].log_boost = log_boost;
    }
    if (first && e[1].kind == E::kBoost) e[1].set_boost(uniform(w, 1));
  }
  // 1 / alpha of the boosted elements, as boost_words reads them: one division for the
  // pair's first such element, a second only where both are.
  C10_HOST_DEVICE void set_reciprocals() {
    using E = Element<acc_t, Gen>;
    const bool first = e[0].kind == E::kBoost;
    const acc_t inv = fast::div(acc_t(1), first ? e[0].alpha : e[1].alpha);
    if (first) {
      e[0].inv_alpha = inv;
    } else {
      e[1].inv_alpha = inv;
    }
    if (first && e[1].kind == E::kBoost) e[1].set_reciprocal();
  }
  C10_HOST_DEVICE bool step(const CandidateWords<acc_t>& w, bool log_output) {
    Draw<acc_t> d[2];
    Gen::split(w, d);
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      acc_t r;
      if (e[k].attempt(d[k], log_output, r) && !done[k]) {
        done[k] = true;
        out[k] = r;
      }
    }
    return done[0] && done[1];
  }
};

// Philox blocks per candidate, and the most candidates a pair may use before its draws
// run into the next call's stream: the generator's offset advances by
// kDrawsPerSubsequence per call (block 0 for the boost, then the candidates). Every
// method accepts a candidate with probability above 0.3 for every alpha, so a pair
// needing more than 255 has probability below 1e-38.
template <typename acc_t>
constexpr int kBlocksPerCandidate = CandidateWords<acc_t>::kCount / 4;
constexpr int kMaxCandidates = 255;
constexpr uint64_t kDrawsPerSubsequence = 4 * (1 + 2 * kMaxCandidates);

inline bool parse_method(c10::string_view name, Method& method) {
  if (name == "cheng_ga") method = Method::kChengGA;
  else if (name == "marsaglia_tsang") method = Method::kMarsagliaTsang;
  else if (name == "ahrens_dieter_gc") method = Method::kAhrensDieterGC;
  else if (name == "best_xg") method = Method::kBestXG;
  else if (name == "cheng_feast_gkm3") method = Method::kChengFeastGKM3;
  else return false;
  return true;
}

// Calls f(Gen{}) with the generator type of `method`.
template <typename acc_t, typename F>
inline void dispatch_method(Method method, F&& f) {
  switch (method) {
    case Method::kChengGA: return f(ChengGA<acc_t>{});
    case Method::kMarsagliaTsang: return f(MarsagliaTsang<acc_t>{});
    case Method::kAhrensDieterGC: return f(AhrensDieterGC<acc_t>{});
    case Method::kBestXG: return f(BestXG<acc_t>{});
    case Method::kChengFeastGKM3: return f(ChengFeastGKM3<acc_t>{});
  }
}

}  // namespace wrs::gamma
