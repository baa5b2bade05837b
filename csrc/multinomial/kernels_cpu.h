#pragma once
// What the CPU multinomial's methods share: rows cut into chunk tasks, the lane-wise
// passes (two or four doubles a step, the same bits either way), the rows' summaries, and
// the methods' entry points (inverse_cdf_cpu.cpp, race_cpu.cpp), which the table in
// dispatch_cpu.cpp picks between.
#include "common/parallel.h"
#include "common/philox.h"
#include "multinomial/dispatch_cpu.h"
#include "multinomial/laws.h"
#include "multinomial/multinomial.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace wrs::multinomial {

constexpr int64_t kTaskItems = int64_t(1) << 14;  // at least this much work per parallel_for grain

// A row cut into chunks of at most `chunk` items.
struct Chunks {
  int64_t rows, n, per_row, items;
  Chunks(int64_t rows_, int64_t n_, int64_t chunk = kChunk)
      : rows(rows_), n(n_), per_row((n_ + chunk - 1) / chunk), items(std::min(n_, chunk)) {}
  int64_t tasks() const { return rows * per_row; }
  int64_t grain() const { return std::max<int64_t>(1, kTaskItems / items); }
  int64_t row(int64_t task) const { return task / per_row; }
  int64_t first(int64_t task) const { return (task % per_row) * items; }
  int64_t count(int64_t task) const { return std::min(items, n - first(task)); }
};

// ---- AVX2 where the CPU has it --------------------------------------------------------

// The passes over every item (the summary, the units) are lane-wise: each item meets the
// same arithmetic in the same order whatever the vector width, so a build for AVX2 gives
// the same bits as the two-lane baseline, at twice the width. It is chosen at run time
// (as F16C is, multinomial_cpu.cpp), so the build still runs on the baseline. A loop is a
// lambda marked WRS_INLINE, so that it is compiled into its caller, taking the lanes to use.
#define WRS_INLINE __attribute__((always_inline))

// Vectors of two or four doubles (and of as many floats and 32-bit integers, to load
// them). A generic vector wider than the target's is split with spills to the stack.
struct TwoLanes {
  static constexpr int kWidth = 2;
  typedef double Doubles __attribute__((vector_size(16)));
  typedef float Floats __attribute__((vector_size(8)));
  typedef uint32_t Words __attribute__((vector_size(8)));
};
struct FourLanes {
  static constexpr int kWidth = 4;
  typedef double Doubles __attribute__((vector_size(32)));
  typedef float Floats __attribute__((vector_size(16)));
  typedef uint32_t Words __attribute__((vector_size(16)));
};

#if defined(__x86_64__) && defined(__GNUC__)
#define WRS_HAVE_AVX2_PATH 1
template <typename Loop>
__attribute__((target("avx2"))) auto run_avx2(const Loop& loop) {
  return loop(FourLanes{});
}
#endif

template <typename Loop>
auto run_widest(const Loop& loop) {
#ifdef WRS_HAVE_AVX2_PATH
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) return run_avx2(loop);
#endif
  return loop(TwoLanes{});
}

// kWidth consecutive items as doubles, one vector.
template <typename Lanes>
inline WRS_INLINE typename Lanes::Doubles load_lanes(const double* p) {
  typename Lanes::Doubles v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <typename Lanes>
inline WRS_INLINE typename Lanes::Doubles load_lanes(const float* p) {
  typename Lanes::Floats v;
  std::memcpy(&v, p, sizeof v);
  return __builtin_convertvector(v, typename Lanes::Doubles);
}
template <typename Lanes>
inline WRS_INLINE typename Lanes::Doubles load_lanes(const at::BFloat16* p) {  // a float's high half
  typename Lanes::Words wide;
  for (int w = 0; w < Lanes::kWidth; ++w) wide[w] = static_cast<uint32_t>(p[w].x) << 16;
  typename Lanes::Floats v;
  std::memcpy(&v, &wide, sizeof v);
  return __builtin_convertvector(v, typename Lanes::Doubles);
}

template <typename Lanes, typename scalar_t, typename Weights>
inline WRS_INLINE Summary summarize(const scalar_t* p, int64_t count, const Weights& wts) {
  Summary s = Weights::empty();
  for (int64_t i = 0; i < count; ++i) s = wts.add(s, static_cast<double>(p[i]));
  return s;
}

// Probabilities: sixteen running sums and minima in a fixed order (a sum's latency is
// three or four cycles: one vector would wait on itself), item i + j in lane j of each
// step of sixteen, whatever the vector width; then the lanes pairwise, the same way.
// NaN and inf show in the sum, negatives in the minimum: multinomial's single error text
// covers all three.
constexpr int kSummaryLanes = 16;

inline WRS_INLINE Summary probability_summary(double total, double low) {
  const uint32_t flags = (low < 0 ? kWeightNegative : 0u) | (total != total ? kWeightNaN : 0u) |
                         (total > 1.7976931348623157e308 ? kWeightInf : 0u);
  return Summary{0.0, total, flags};
}

template <typename Lanes, typename scalar_t>
inline WRS_INLINE Summary summarize(const scalar_t* p, int64_t count, const ProbWeights&) {
  if (count < kSummaryLanes) {  // lane 0 takes every item, the others stay 0: the same bits
    double sum = 0, low = 0;
    for (int64_t i = 0; i < count; ++i) {
      const double v = static_cast<double>(p[i]);
      sum += v;
      low = v < low ? v : low;
    }
    return probability_summary(sum, low);
  }
  using Doubles = typename Lanes::Doubles;
  constexpr int kVectors = kSummaryLanes / Lanes::kWidth;
  Doubles sums[kVectors] = {};
  Doubles lows[kVectors] = {};
  int64_t i = 0;
  for (; i + kSummaryLanes <= count; i += kSummaryLanes) {
    for (int j = 0; j < kVectors; ++j) {
      const Doubles v = load_lanes<Lanes>(p + i + j * Lanes::kWidth);
      sums[j] += v;
      lows[j] = v < lows[j] ? v : lows[j];
    }
  }
  double sum[kSummaryLanes], low[kSummaryLanes];
  for (int j = 0; j < kSummaryLanes; ++j) {
    sum[j] = sums[j / Lanes::kWidth][j % Lanes::kWidth];
    low[j] = lows[j / Lanes::kWidth][j % Lanes::kWidth];
  }
  for (; i < count; ++i) {
    const double v = static_cast<double>(p[i]);
    sum[0] += v;
    low[0] = v < low[0] ? v : low[0];
  }
  for (int half = kSummaryLanes / 2; half >= 1; half /= 2) {
    for (int j = 0; j < half; ++j) {
      sum[j] += sum[j + half];
      low[j] = low[j + half] < low[j] ? low[j + half] : low[j];
    }
  }
  return probability_summary(sum[0], low[0]);
}

template <typename scalar_t, typename Weights>
std::vector<Summary> row_summaries(const scalar_t* x, const Chunks& ch, const Weights& wts) {
  std::vector<Summary> chunk(ch.tasks());
  wrs::parallel_for(0, ch.tasks(), ch.grain(), [&](int64_t t0, int64_t t1) {
    run_widest([&](auto lanes) WRS_INLINE {  // once per task: short rows pay no call each
      for (int64_t t = t0; t < t1; ++t) {
        chunk[t] = summarize<decltype(lanes)>(x + ch.row(t) * ch.n + ch.first(t), ch.count(t), wts);
      }
    });
  });
  if (ch.per_row == 1) return chunk;  // rows of one chunk: no second vector of fresh pages
  std::vector<Summary> rows(ch.rows, Weights::empty());
  for (int64_t t = 0; t < ch.tasks(); ++t) rows[ch.row(t)] = Weights::combine(rows[ch.row(t)], chunk[t]);
  return rows;
}

// Raises before anything is drawn; on the CPU the checks cost no extra pass.
inline void raise_rows(const Request& r, const std::vector<Summary>& rows) {
  uint32_t flags = 0;
  for (const Summary& s : rows) flags |= summary_flags(s);
  raise_value_flags(r, flags);
}

// The methods. `x` is the input's data as `type` (float16 input comes converted to
// float32); out is [rows, k].
void draw_inverse_cdf(const Request& r, CpuMethod method, at::ScalarType type, const void* x, const PhiloxSeed& seed,
                      int64_t* out);
void draw_race(const Request& r, at::ScalarType type, const void* x, const PhiloxSeed& seed, int64_t* out);

}  // namespace wrs::multinomial
