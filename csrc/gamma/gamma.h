#pragma once
// Gamma(alpha, 1) deviates on the CPU and the GPU: five exact rejection generators
// (Ericsson 2024, ch. 3, checked against the original papers), the boost for small
// alpha, and the per-element driver both kernels run.
//
// Randomness: element i reads Philox subsequence i of the call's stream, one block of
// words per candidate (4 words in float32 arithmetic, 8 in float64). A candidate's last
// uniform is never used by the method itself; it is the boost's U (below). So a result
// depends only on (seed, offset, i) and alpha[i], never on the grid or thread count.
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

// Words of one Philox block (4) or two (8): a candidate's randomness.
template <typename acc_t>
struct CandidateWords {
  static constexpr int kCount = sizeof(acc_t) == 4 ? 4 : 8;
  uint32_t w[kCount];
};

// The i-th uniform in (0, 1) of a candidate, both ends excluded. float: 23 bits,
// (m + 1/2) 2^-23, exact in float; double: 53 bits from two words.
template <typename acc_t>
C10_HOST_DEVICE inline acc_t uniform(const CandidateWords<acc_t>& c, int i);

template <>
C10_HOST_DEVICE inline float uniform<float>(const CandidateWords<float>& c, int i) {
  return (static_cast<float>(c.w[i] >> 9) + 0.5f) * 0x1.0p-23f;
}

template <>
C10_HOST_DEVICE inline double uniform<double>(const CandidateWords<double>& c, int i) {
  const uint64_t bits = (static_cast<uint64_t>(c.w[2 * i]) << 32) | c.w[2 * i + 1];
  return (static_cast<double>(bits >> 11) + 0.5) * 0x1.0p-53;
}

// Uniforms per candidate (1 word each in float, 2 in double); the last is the boost's.
constexpr int kUniforms = 4;

// cos(2 pi u) and -cot(pi u) = tan(pi (u - 1/2)), with the device's pi-scaled intrinsics.
template <typename acc_t>
C10_HOST_DEVICE inline acc_t cos_two_pi(acc_t u) {
#ifdef __CUDA_ARCH__
  return cospi(2 * u);
#else
  return std::cos(static_cast<acc_t>(6.283185307179586476925) * u);
#endif
}

template <typename acc_t>
C10_HOST_DEVICE inline acc_t tan_pi_centered(acc_t u) {
#ifdef __CUDA_ARCH__
  acc_t s, c;
  sincospi(u, &s, &c);
  return -c / s;
#else
  const acc_t x = static_cast<acc_t>(3.14159265358979323846) * u;
  return -std::cos(x) / std::sin(x);
#endif
}

// Cheng (1977) GA: Burr XII proposal with lambda = sqrt(2 alpha - 1) (the thesis prints
// a = sqrt(2 alpha - 1); Cheng's a is its reciprocal). alpha >= 1. No squeeze.
template <typename acc_t>
struct ChengGA {
  static constexpr bool kNeedsAlphaAboveOne = false;
  acc_t alpha, a, b, c;
  C10_HOST_DEVICE void setup(acc_t al) {
    alpha = al;
    a = 1 / std::sqrt(2 * al - 1);
    b = al - static_cast<acc_t>(1.3862943611198906);  // alpha - log 4
    c = al + 1 / a;
  }
  C10_HOST_DEVICE bool attempt(const CandidateWords<acc_t>& w, acc_t& x) const {
    const acc_t u1 = uniform(w, 0), u2 = uniform(w, 1);
    const acc_t v = a * std::log(u1 / (1 - u1));
    x = alpha * std::exp(v);
    return b + c * v - x >= std::log(u1 * u1 * u2);
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
    c = 1 / std::sqrt(9 * d);
  }
  C10_HOST_DEVICE bool attempt(const CandidateWords<acc_t>& w, acc_t& x) const {
    const acc_t z = std::sqrt(-2 * std::log(uniform(w, 0))) * cos_two_pi(uniform(w, 1));
    const acc_t v = 1 + c * z;
    const acc_t v3 = v * v * v;
    x = d * v3;
    return v > 0 && std::log(uniform(w, 2)) < z * z / 2 + d - x + 3 * d * std::log(v);
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
    inv_a = 1 / (2 * al - 1);
    s = std::sqrt(2 * al - 1);
  }
  C10_HOST_DEVICE bool attempt(const CandidateWords<acc_t>& w, acc_t& x) const {
    const acc_t t = s * tan_pi_centered(uniform(w, 0));
    x = b + t;
    return x > 0 && std::log(uniform(w, 1)) <= b * std::log(x / b) - t + std::log1p(t * t * inv_a);
  }
};

// Best (1978) XG without its squeeze: Student t(2) proposal centred at alpha - 1
// (Devroye 1986, IX.3.3; the thesis's listing is garbled). alpha > 1.
template <typename acc_t>
struct BestXG {
  static constexpr bool kNeedsAlphaAboveOne = true;
  acc_t b, c;
  C10_HOST_DEVICE void setup(acc_t al) {
    b = al - 1;
    c = 3 * al - static_cast<acc_t>(0.75);
  }
  C10_HOST_DEVICE bool attempt(const CandidateWords<acc_t>& w, acc_t& x) const {
    const acc_t u = uniform(w, 0), v = uniform(w, 1);
    const acc_t ww = u * (1 - u);
    const acc_t y = std::sqrt(c / ww) * (u - static_cast<acc_t>(0.5));
    x = b + y;
    const acc_t z = 64 * ww * ww * ww * v * v;
    return x > 0 && std::log(z) <= 2 * (b * std::log(x / b) - y);
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
    b = (al - 1 / (6 * al)) / a;
    half_a = a / 2;
    shear = al < static_cast<acc_t>(2.5) ? 0 : 1 / std::sqrt(al);
  }
  C10_HOST_DEVICE bool attempt(const CandidateWords<acc_t>& w, acc_t& x) const {
    const acc_t u1 = uniform(w, 0);
    const acc_t u2 = shear == 0 ? uniform(w, 1) : u1 + shear * (1 - static_cast<acc_t>(1.86) * uniform(w, 1));
    const acc_t ratio = b * u1 / u2;
    x = a * ratio;
    return u2 > 0 && u2 < 1 && std::log(u2) < half_a * (std::log(ratio) + 1 - ratio);
  }
};

// One element's generation: start() once, then attempt() per candidate until it returns
// true with the result (X, or log X when log_output) in `out`.
template <typename acc_t, typename Gen>
struct Element {
  enum Kind : int { kConstant, kDirect, kBoost };
  Gen gen;
  acc_t alpha, inv_alpha;
  Kind kind;

  C10_HOST_DEVICE void start(acc_t al) {
    alpha = al;
    if (al == 0 || al == std::numeric_limits<acc_t>::infinity() || !(al > 0)) {
      // Gamma(0) is 0, Gamma(inf) is inf; negative or NaN alpha (unvalidated) gives NaN
      // rather than a rejection loop that never accepts.
      if (!(al >= 0)) alpha = std::numeric_limits<acc_t>::quiet_NaN();
      kind = kConstant;
      return;
    }
    const bool boost = Gen::kNeedsAlphaAboveOne ? al <= 1 : al < 1;
    kind = boost ? kBoost : kDirect;
    inv_alpha = 1 / al;
    // al + 1 rounds to 1 for al below the epsilon: step just above 1, where the
    // alpha > 1 methods are defined (Gamma(1 + eps) and Gamma(1 + al) agree to eps).
    const acc_t boosted = al + 1 > 1 ? al + 1 : 1 + std::numeric_limits<acc_t>::epsilon();
    gen.setup(boost ? boosted : al);
  }

  C10_HOST_DEVICE bool attempt(const CandidateWords<acc_t>& w, bool log_output, acc_t& out) const {
    if (kind == kConstant) {
      out = log_output ? std::log(alpha) : alpha;
      return true;
    }
    acc_t y;
    if (!gen.attempt(w, y)) return false;
    if (kind == kDirect) {
      out = log_output ? std::log(y) : y;
    } else {
      const acc_t log_x = std::log(y) + std::log(uniform(w, kUniforms - 1)) * inv_alpha;
      out = log_output ? log_x : std::exp(log_x);
    }
    return true;
  }
};

// Philox blocks each candidate consumes, and the most candidates an element may use
// before its draws run into the next call's stream: the generator's offset advances by
// kDrawsPerElement per call. Every method accepts a candidate with probability above
// 0.3 for every alpha, so needing more than 256 has probability below 1e-39.
template <typename acc_t>
constexpr int kBlocksPerCandidate = CandidateWords<acc_t>::kCount / 4;
constexpr int kMaxCandidates = 256;
constexpr uint64_t kDrawsPerElement = 8 * kMaxCandidates;

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
