// multinomial and sample_logits on the CPU, with the laws and Philox streams of the CUDA
// kernels (laws.h). Work is cut into fixed chunks of rows (tasks), never per thread, so
// results do not depend on the thread count; wrs::parallel_for (common/parallel.h) runs
// small calls inline, and every call inline while the machine is busy.
//
// Which method serves a shape class on the CPU, and why:
//
// | replacement   | shape (n items per row, k draws)  | method        | why                                       |
// | ------------- | --------------------------------- | ------------- | ----------------------------------------- |
// | yes, or k = 1 | n >= 8,192 and k stretches of     | draws against | a sum pass keeping a summary per stretch  |
// |               | 2,048 items within the row; few   | bounds        | (few rows: per chunk), then each draw     |
// |               | rows: k chunks within twice it    |               | against the stretches' bounds, scanning   |
// |               |                                   |               | only its own, with rejection (laws.h):    |
// |               |                                   |               | no pass quantizes the whole row (64 x     |
// |               |                                   |               | 128,256, k = 8: 1.55 against 0.83 ms)     |
// | yes, or k = 1 | other 16 k < n                    | inverse CDF,  | a sum pass, then k sorted points found by |
// |               |                                   | sorted points | one partial scan (a few long rows: chunk  |
// |               |                                   |               | tasks, each block's units kept, only the  |
// |               |                                   |               | blocks with a point rescanned); no table, |
// |               |                                   |               | no n-sized scratch                        |
// | yes, or k = 1 | 16 k >= n, and k < 65,536 or      | inverse CDF,  | the row's integer prefix sums once, a     |
// |               | k <= 4 n                          | prefix sums   | branch-free search per draw: no sort      |
// | yes           | k >= 65,536 and k > 4 n           | alias tables  | O(1) per draw once built                  |
// | no            | any k >= 2                        | race keys     | one pass of keys; each chunk keeps its    |
// |               |                                   |               | top k (nth_element), sorted; a row's lists|
// |               |                                   |               | merge pairwise, level by level, in        |
// |               |                                   |               | parallel; a test without a log rules out  |
// |               |                                   |               | most items                                |
#include "common/parallel.h"
#include "common/philox.h"
#include "multinomial/laws.h"
#include "multinomial/multinomial.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <utility>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace wrs::multinomial {
namespace {

constexpr int64_t kChunk = int64_t(1) << 15;  // items per task of a long row
constexpr int64_t kTaskItems = int64_t(1) << 14;  // at least this much work per parallel_for grain
// Rows of one chunk each go parallel from this many items (n + k a row): a short row costs
// several times a long row's item (docs/methods.md, "Rows of one chunk").
constexpr int64_t kRowTaskItems = int64_t(1) << 11;

// Race keys cost a Philox block per two items (and a log for each item ruled_out keeps),
// several times an inverse CDF's passes per item: fewer rows than kRaceChunkedRows are
// cut into tasks from 8,192
// items, so that one row of 32,000 spreads over the threads. More rows keep kChunk:
// smaller chunks admit more keys in all (docs/methods.md, "Race keys").
constexpr int64_t kRaceChunk = int64_t(1) << 13;
constexpr int64_t kRaceChunkedRows = 4;
// For the same reason a task of short rows' race keys needs only this many items.
constexpr int64_t kRaceTaskItems = int64_t(1) << 10;

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
// the same bits as the two-lane baseline, at twice the width (a build without the AVX2
// path gave the same draws, 432 outputs compared). It is chosen at run
// time, as F16C is below, so the build still runs on the baseline. A loop is a lambda
// marked WRS_INLINE, so that it is compiled into its caller, taking the lanes to use.
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
  if (ch.per_row == 1) return chunk;  // rows of one chunk: no second vector (1,048,576 x 4: 24 MB of fresh pages)
  std::vector<Summary> rows(ch.rows, Weights::empty());
  for (int64_t t = 0; t < ch.tasks(); ++t) rows[ch.row(t)] = Weights::combine(rows[ch.row(t)], chunk[t]);
  return rows;
}

// Raises before anything is drawn; on the CPU the checks cost no extra pass.
void raise_rows(const Request& r, const std::vector<Summary>& rows) {
  uint32_t flags = 0;
  for (const Summary& s : rows) flags |= summary_flags(s);
  raise_value_flags(r, flags);
}

// ---- with replacement: inverse CDF ----------------------------------------------------

struct Point {
  uint64_t at;     // units from the row's start
  int64_t sample;  // which of the row's k draws
};

void sort_points(Point* pts, int64_t k) {
  std::sort(pts, pts + k, [](const Point& a, const Point& b) { return a.at < b.at; });
}

// Q_i of valid input (checked before any draw): quantize's arithmetic without its
// guards for NaN and negative values. For probabilities with n <= 2^20 every Q_i is at most
// 2^52, so adding 2^52 rounds x * direct to an integer (ties to even, as rint) and leaves
// it in the low mantissa bits: a block's sum of Q_i is then a vector loop of multiplies,
// adds and integer adds (setup.py builds with -ffp-contract=off, so no fused multiply-add
// skips the rounding of the product).
template <typename Weights>
struct Quantizer {
  Weights wts;
  RowLaw law;
  int64_t n;

  static constexpr double k2to52 = 4503599627370496.0;
  bool bit_trick() const { return !Weights::kLogits && law.scale.direct != 0.0 && n <= (int64_t(1) << 20); }
  double cap_biased() const { return static_cast<double>(n) * static_cast<double>(wrs::kBucket) + k2to52; }

  uint64_t operator()(double x) const {
    if (!bit_trick()) return units(wts, x, law, n);
    const double v = std::min(x * law.scale.direct + k2to52, cap_biased());
    return bits(v) - bits(k2to52);
  }

  template <typename scalar_t>
  uint64_t sum(const scalar_t* p, int64_t count) const {
    uint64_t total = 0;
    if (!bit_trick()) {
      for (int64_t i = 0; i < count; ++i) total += (*this)(static_cast<double>(p[i]));
      return total;
    }
    const double direct = law.scale.direct;
    const double cap = cap_biased();
    return run_widest([=](auto) WRS_INLINE {
      uint64_t biased = 0;
      for (int64_t i = 0; i < count; ++i) biased += bits(std::min(static_cast<double>(p[i]) * direct + k2to52, cap));
      return biased - static_cast<uint64_t>(count) * bits(k2to52);
    });
  }

  // sum(), also writing each item's units to q.
  template <typename scalar_t>
  uint64_t sum(const scalar_t* p, int64_t count, uint64_t* q) const {
    uint64_t total = 0;
    if (!bit_trick()) {
      for (int64_t i = 0; i < count; ++i) total += q[i] = (*this)(static_cast<double>(p[i]));
      return total;
    }
    const double direct = law.scale.direct;
    const double cap = cap_biased();
    const uint64_t bias = bits(k2to52);
    return run_widest([=](auto) WRS_INLINE {
      // Locals: q might alias anything read through the lambda, which stops the vectorizer.
      const scalar_t* const src = p;
      uint64_t* const dst = q;
      const int64_t items = count;
      const double scale = direct, top = cap;
      const uint64_t offset = bias;
      uint64_t units = 0;
      for (int64_t i = 0; i < items; ++i) units += dst[i] = bits(std::min(static_cast<double>(src[i]) * scale + k2to52, top)) - offset;
      return units;
    });
  }

  static WRS_INLINE uint64_t bits(double v) {
    uint64_t b;
    std::memcpy(&b, &v, sizeof b);
    return b;
  }
};

// The items of p[0, count) (units from `through` on) that hold the sorted points
// pts[found..k), written to out until the points or the items run out. Each block's
// units are summed in one vector loop that keeps them; a block holding no point is
// passed whole, the others walked over the kept integers, up to their last point, eight
// items a step while all eight lie below the next point.
constexpr int64_t kUnitBlock = 256;

template <typename scalar_t, typename Weights>
void scan_points(const scalar_t* p, int64_t count, int64_t first, const Quantizer<Weights>& quantize,
                 uint64_t through, const Point* pts, int64_t k, int64_t& found, int64_t* out) {
  constexpr int kSkip = 8;
  uint64_t q[kUnitBlock];
  for (int64_t b = 0; b < count && found < k; b += kUnitBlock) {
    const int64_t len = std::min(kUnitBlock, count - b);
    const uint64_t block = quantize.sum(p + b, len, q);
    if (pts[found].at - through >= block) {  // no point in this block
      through += block;
      continue;
    }
    for (int64_t i = 0; i < len && found < k;) {
      if (i + kSkip <= len) {  // kSkip items at once while all lie below the next point
        uint64_t group = 0;
        for (int j = 0; j < kSkip; ++j) group += q[i + j];
        if (pts[found].at - through >= group) {
          through += group;
          i += kSkip;
          continue;
        }
      }
      through += q[i];
      for (; found < k && pts[found].at < through; ++found) out[pts[found].sample] = first + b + i;
      ++i;
    }
  }
}

// The Philox blocks of rows [first, end)'s samples, in order: sample s of row r takes
// block r * k + s.
inline PhiloxBlocks sample_blocks(const PhiloxSeed& seed, int64_t first, int64_t end, int64_t k) {
  return PhiloxBlocks(seed, static_cast<uint64_t>(first * k), static_cast<uint64_t>(end * k));
}

// An upper bound on sum Q_i: n * 2^32 units up to the summation error of W (below
// (n + 16) 2^-50 relative, eight times the bound of float64 recursive summation) plus
// half a unit per item of rounding.
inline uint64_t units_bound(int64_t n) {
  const double base = static_cast<double>(n) * static_cast<double>(wrs::kBucket);
  return static_cast<uint64_t>(base) + static_cast<uint64_t>(base * (static_cast<double>(n) + 16) * 0x1.0p-50) +
         static_cast<uint64_t>(n) + 1;
}

// One row: after its summary pass, its k points are drawn uniformly on
// [0, units_bound) and sorted, and one scan quantizes items until the last point is
// found. A point beyond the row's real total (probability below (n + 16) 2^-50) is drawn
// again, exactly, once the total is known: conditioned on acceptance a point is uniform
// on [0, sum Q), so the law is the quantized one either way.
template <typename scalar_t, typename Weights>
void draw_row(const scalar_t* x, int64_t n, int64_t row, int64_t k, const Quantizer<Weights>& quantize,
              const PhiloxSeed& seed, PhiloxBlocks& blocks, Point* pts, int64_t* out) {
  const uint64_t bound = units_bound(n);
  // Sample s: Philox block row * k + s, next in `blocks` (words 0-1; 2-3 for a redraw).
  for (int64_t s = 0; s < k; ++s) {
    const auto& bits = blocks();
    pts[s] = Point{uniform_point(bits[0], bits[1], bound), s};
  }
  sort_points(pts, k);
  int64_t found = 0;
  scan_points(x, n, 0, quantize, 0, pts, k, found, out);
  if (found == k) return;
  const uint64_t total = quantize.sum(x, n);
  const int64_t left = k - found;
  for (int64_t j = 0; j < left; ++j) {
    const auto bits = philox_block(seed, static_cast<uint64_t>(row * k + pts[found + j].sample));
    pts[j] = Point{uniform_point(bits[2], bits[3], total), pts[found + j].sample};
  }
  sort_points(pts, left);
  found = 0;
  scan_points(x, n, 0, quantize, 0, pts, left, found, out);
}

// The first of c[0, n) above `at` (std::upper_bound's answer), halving by a select, not a
// branch: a random point's branches are mispredicted one in two.
inline int64_t upper_bound_select(const uint64_t* c, int64_t n, uint64_t at) {
  const uint64_t* base = c;
  for (int64_t len = n; len > 1;) {
    const int64_t half = len / 2;
    base = base[half] <= at ? base + half : base;
    len -= half;
  }
  return (base - c) + (*base <= at);
}

// Draw s of a long row against bounds (laws.h: chunk_units_bound): the row's stretches of
// `stretch` items each have a summary, whose bound on the stretch's units takes the
// place of its exact units; a point of [0, sum of bounds) is kept where it falls within
// its stretch's exact units (the stretch quantized up to it, a block of kUnitBlock items
// at a time), else drawn again. Attempt a takes Philox subsequence d + a rows k (d = row
// k + s; attempt 0's block is `first`), as the CUDA kernel does. The row's other
// stretches are never quantized: a few draws from a long row cost a summary pass and a
// stretch each, where the exact totals took a second pass over the row.
struct StretchBounds {
  std::vector<uint64_t> end;  // the stretches' bounds, summed: end[b] = B_0 + ... + B_b
};

template <typename Weights>
void bound_stretches(const Summary* stretch, int64_t n, int64_t items, const RowLaw& law, StretchBounds& b) {
  const int64_t count = (n + items - 1) / items;
  b.end.resize(count);
  uint64_t through = 0;
  for (int64_t j = 0; j < count; ++j) b.end[j] = through += chunk_units_bound(stretch[j], std::min(items, n - j * items), law);
}

template <typename scalar_t, typename Weights>
int64_t draw_against_bounds(const scalar_t* x, int64_t n, int64_t items, const Quantizer<Weights>& quantize,
                            const StretchBounds& b, const at::detail::UINT4& first, const PhiloxSeed& seed,
                            uint64_t draw, uint64_t draws) {
  const int64_t count = static_cast<int64_t>(b.end.size());
  const uint64_t total = b.end[count - 1];
  at::detail::UINT4 bits = first;
  for (int attempt = 0; attempt < kMaxBoundAttempts; ++attempt) {
    if (attempt > 0) bits = philox_block(seed, draw + static_cast<uint64_t>(attempt) * draws);
    const uint64_t at = uniform_point(bits[0], bits[1], total);
    const int64_t j = upper_bound_select(b.end.data(), count, at);
    const uint64_t start = j == 0 ? 0 : b.end[j - 1];
    const Point pt{at - start, 0};
    int64_t found = 0, item = 0;
    scan_points(x + j * items, std::min(items, n - j * items), j * items, quantize, 0, &pt, 1, found, &item);
    if (found == 1) return item;
  }
  return 0;  // all attempts rejected: probability below 2^-160 for valid rows
}

// Rows of up to this many items find a point's item by counting the prefix sums at or
// below it: no branch, where a binary search mispredicts about one branch in two.
constexpr int64_t kCountSearchItems = 32;

// Many points for the row's length: the row's integer prefix sums once, then a search per
// point on its exact total, in sample order (no sort).
template <typename scalar_t, typename Weights>
void draw_row_prefix(const scalar_t* x, int64_t n, int64_t k, const Quantizer<Weights>& quantize,
                     PhiloxBlocks& blocks, std::vector<uint64_t>& prefix, int64_t* out) {
  prefix.resize(n);
  uint64_t through = 0;
  for (int64_t i = 0; i < n; ++i) prefix[i] = through += quantize(static_cast<double>(x[i]));
  const uint64_t* c = prefix.data();
  for (int64_t s = 0; s < k; ++s) {
    const auto& bits = blocks();
    const uint64_t at = uniform_point(bits[0], bits[1], through);
    if (n <= kCountSearchItems) {
      int64_t item = 0;  // the first prefix sum above `at`: below n, since c[n - 1] > at
      for (int64_t i = 0; i < n; ++i) item += c[i] <= at;
      out[s] = item;
    } else {
      out[s] = upper_bound_select(c, n, at);
    }
  }
}

// Up to this many points in all, draw_chunked's last step (a block of kUnitBlock items
// rescanned per point) runs on the calling thread.
constexpr int64_t kInlineScanPoints = 16;

// A few long rows: chunk tasks. Each chunk's units, kept by blocks of kUnitBlock items,
// then each row's points on its exact total, sorted, then each chunk scans only the
// blocks that hold a point (a block's units are the same integers either way).
template <typename scalar_t, typename Weights>
void draw_chunked(const Request& r, const Chunks& ch, const scalar_t* x, const std::vector<Quantizer<Weights>>& quantize,
                  const PhiloxSeed& seed, int64_t* out) {
  const int64_t blocks_per_chunk = (ch.items + kUnitBlock - 1) / kUnitBlock;
  std::vector<uint64_t> units_of(ch.tasks());
  std::vector<uint64_t> block_units(ch.tasks() * blocks_per_chunk);
  wrs::parallel_for(0, ch.tasks(), ch.grain(), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const scalar_t* p = x + ch.row(t) * r.n + ch.first(t);
      uint64_t* units = block_units.data() + t * blocks_per_chunk;
      uint64_t chunk = 0;
      for (int64_t b = 0; b * kUnitBlock < ch.count(t); ++b) {
        chunk += units[b] = quantize[ch.row(t)].sum(p + b * kUnitBlock, std::min(kUnitBlock, ch.count(t) - b * kUnitBlock));
      }
      units_of[t] = chunk;
    }
  });
  std::vector<Point> points(r.rows * r.k);
  std::vector<uint64_t> chunk_start(ch.tasks());
  PhiloxBlocks blocks = sample_blocks(seed, 0, r.rows, r.k);
  for (int64_t row = 0; row < r.rows; ++row) {
    uint64_t total = 0;
    for (int64_t t = row * ch.per_row; t < (row + 1) * ch.per_row; ++t) {
      chunk_start[t] = total;
      total += units_of[t];
    }
    Point* pts = points.data() + row * r.k;
    for (int64_t s = 0; s < r.k; ++s) {
      const auto& bits = blocks();
      pts[s] = Point{uniform_point(bits[0], bits[1], total), s};
    }
    sort_points(pts, r.k);
  }
  const auto scan_chunks = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t row = ch.row(t);
      const Point* pts = points.data() + row * r.k;
      const Point* end = pts + r.k;
      const uint64_t start = chunk_start[t];
      const Point* hit = std::lower_bound(pts, end, start, [](const Point& a, uint64_t v) { return a.at < v; });
      if (hit == end || hit->at - start >= units_of[t]) continue;
      int64_t found = hit - pts;
      const int64_t last = std::lower_bound(hit, end, start + units_of[t],
                                            [](const Point& a, uint64_t v) { return a.at < v; }) - pts;
      const uint64_t* units = block_units.data() + t * blocks_per_chunk;
      uint64_t through = start;
      for (int64_t b = 0; found < last; through += units[b++]) {
        if (pts[found].at - through >= units[b]) continue;  // no point in this block
        const int64_t item = ch.first(t) + b * kUnitBlock;
        scan_points(x + row * r.n + item, std::min(kUnitBlock, ch.count(t) - b * kUnitBlock), item, quantize[row],
                    through, pts, last, found, out + row * r.k);
      }
    }
  };
  // A few points rescan a block each: less work than waking the other threads.
  if (r.rows * r.k <= kInlineScanPoints) return scan_chunks(0, ch.tasks());
  wrs::parallel_for(0, ch.tasks(), ch.grain(), scan_chunks);
}

// Stretches of kBoundStretch items: a few draws from a long row each scan one (about half
// of it) against the bounds of all (draw_against_bounds). Chunks hold whole stretches.
constexpr int64_t kBoundStretch = 2048;

// The summaries of each row's stretches (chunk tasks), and the rows' own from them.
template <typename scalar_t, typename Weights>
std::vector<Summary> stretch_summaries(const scalar_t* x, const Chunks& ch, const Weights& wts,
                                       std::vector<Summary>& stretch) {
  const int64_t per_row = (ch.n + kBoundStretch - 1) / kBoundStretch;
  stretch.resize(ch.rows * per_row);
  wrs::parallel_for(0, ch.tasks(), ch.grain(), [&](int64_t t0, int64_t t1) {
    run_widest([&](auto lanes) WRS_INLINE {
      for (int64_t t = t0; t < t1; ++t) {
        const scalar_t* p = x + ch.row(t) * ch.n;
        for (int64_t i = ch.first(t); i < ch.first(t) + ch.count(t); i += kBoundStretch) {
          stretch[ch.row(t) * per_row + i / kBoundStretch] =
              summarize<decltype(lanes)>(p + i, std::min(kBoundStretch, ch.n - i), wts);
        }
      }
    });
  });
  std::vector<Summary> rows(ch.rows, Weights::empty());
  for (int64_t j = 0; j < ch.rows * per_row; ++j) rows[j / per_row] = Weights::combine(rows[j / per_row], stretch[j]);
  return rows;
}

// A few draws from a few long rows (k stretches within twice the row): each draw against
// the stretches' bounds, where the exact totals took a units pass over every chunk
// (draw_chunked). Draws run side by side, few inline.
template <typename scalar_t, typename Weights>
void draw_stretches_against_bounds(const Request& r, const scalar_t* x, const std::vector<Quantizer<Weights>>& quantize,
                                   const std::vector<Summary>& stretch, const PhiloxSeed& seed, int64_t* out) {
  const int64_t per_row = (r.n + kBoundStretch - 1) / kBoundStretch;
  std::vector<StretchBounds> bounds(r.rows);
  for (int64_t row = 0; row < r.rows; ++row) {
    bound_stretches<Weights>(stretch.data() + row * per_row, r.n, kBoundStretch, quantize[row].law, bounds[row]);
  }
  const int64_t draws = r.rows * r.k;
  const auto draw = [&](int64_t d0, int64_t d1) {
    PhiloxBlocks blocks(seed, static_cast<uint64_t>(d0), static_cast<uint64_t>(d1));
    for (int64_t d = d0; d < d1; ++d) {
      const int64_t row = d / r.k;
      out[d] = draw_against_bounds(x + row * r.n, r.n, kBoundStretch, quantize[row], bounds[row], blocks(), seed,
                                   static_cast<uint64_t>(d), static_cast<uint64_t>(draws));
    }
  };
  if (draws <= kInlineScanPoints) return draw(0, draws);
  wrs::parallel_for(0, draws, 1, draw);
}

// Rows of one task each from this many items, with k stretches within the row, draw
// against the bounds of their stretches too.
constexpr int64_t kBoundedRowsFrom = 4 * kBoundStretch;

// Rows fewer than this, each longer than a chunk, are cut into chunk tasks.
constexpr int64_t kChunkedRows = 16;
// A single row of more than 2 kOneRowChunk items is cut into chunks of that size, so that
// a row of 32,000 spreads over the threads too (1 x 32,000, k = 8, 2 threads: 2.5x torch
// on one thread, 2.9x on two). Two rows of 20,000 already take a thread each (3.8x;
// 3.3x cut into chunks), and a row of 10,000 gained nothing.
constexpr int64_t kOneRowChunk = int64_t(1) << 13;
static_assert(kChunk % kBoundStretch == 0 && kOneRowChunk % kBoundStretch == 0, "chunks of whole stretches");

template <typename scalar_t, typename Weights>
void draw_inverse_cdf(const Request& r, const scalar_t* x, const Weights& wts, const PhiloxSeed& seed, int64_t* out) {
  const bool one_long_row = r.rows == 1 && r.n > 2 * kOneRowChunk;
  const Chunks ch(r.rows, r.n, one_long_row ? kOneRowChunk : kChunk);
  if (r.rows < kChunkedRows && ch.per_row > 1) {
    const bool bounded = r.k * kBoundStretch <= 2 * r.n;
    std::vector<Summary> stretch;
    const std::vector<Summary> summary = bounded ? stretch_summaries(x, ch, wts, stretch) : row_summaries(x, ch, wts);
    raise_rows(r, summary);
    std::vector<Quantizer<Weights>> quantize(r.rows);
    for (int64_t row = 0; row < r.rows; ++row) quantize[row] = {wts, row_law<Weights>(summary[row], r.n), r.n};
    if (bounded) return draw_stretches_against_bounds(r, x, quantize, stretch, seed, out);
    return draw_chunked(r, ch, x, quantize, seed, out);
  }
  // Rows of one chunk each: a task sums its rows (one vector call for them all), then draws
  // from each while it is in cache. A summary pass over every row first, then the draws,
  // was two parallel regions and two reads (64 x 18, k = 2: 1.07x torch). A row with bad
  // values is not drawn from, and the call raises once every task is done.
  const bool prefix = 16 * r.k >= r.n;  // points dense enough that sorting them costs more
  // Long rows, few draws: a summary per stretch, and the draws against their bounds.
  const bool bounded = !prefix && r.n >= kBoundedRowsFrom && r.k * kBoundStretch <= r.n;
  const int64_t stretches = bounded ? (r.n + kBoundStretch - 1) / kBoundStretch : 0;
  std::atomic<uint32_t> flags{0};
  wrs::parallel_for(0, r.rows, std::max<int64_t>(1, kRowTaskItems / (r.n + r.k)), [&](int64_t b0, int64_t b1) {
    std::vector<Summary> summary(b1 - b0);
    std::vector<Summary> stretch(stretches);
    StretchBounds bounds;
    run_widest([&](auto lanes) WRS_INLINE {  // once per task: short rows pay no call each
      for (int64_t row = b0; row < b1 && !bounded; ++row) {
        summary[row - b0] = summarize<decltype(lanes)>(x + row * r.n, r.n, wts);
      }
    });
    std::vector<Point> pts(prefix ? 0 : r.k);
    std::vector<uint64_t> sums;
    PhiloxBlocks blocks = sample_blocks(seed, b0, b1, r.k);
    uint32_t seen = 0;
    for (int64_t row = b0; row < b1; ++row) {
      if (bounded) {  // the row's stretches, while the row is drawn from next
        const scalar_t* p = x + row * r.n;
        run_widest([&](auto lanes) WRS_INLINE {
          Summary all = Weights::empty();
          for (int64_t j = 0; j < stretches; ++j) {
            stretch[j] = summarize<decltype(lanes)>(p + j * kBoundStretch, std::min(kBoundStretch, r.n - j * kBoundStretch), wts);
            all = Weights::combine(all, stretch[j]);
          }
          summary[row - b0] = all;
        });
      }
      const uint32_t row_flags = summary_flags(summary[row - b0]);
      seen |= row_flags;
      if (seen != 0) continue;  // the call raises: no draw is used
      // Each row's law where its task draws: a vector of them, made on one thread, was a
      // quarter of 1,048,576 rows of 4 (and 48 MB of fresh pages).
      const Quantizer<Weights> quantize{wts, row_law<Weights>(summary[row - b0], r.n), r.n};
      if (bounded) {
        bound_stretches<Weights>(stretch.data(), r.n, kBoundStretch, quantize.law, bounds);
        for (int64_t s = 0; s < r.k; ++s) {
          out[row * r.k + s] = draw_against_bounds(x + row * r.n, r.n, kBoundStretch, quantize, bounds, blocks(), seed,
                                                   static_cast<uint64_t>(row * r.k + s),
                                                   static_cast<uint64_t>(r.rows * r.k));
        }
      } else if (prefix) {
        draw_row_prefix(x + row * r.n, r.n, r.k, quantize, blocks, sums, out + row * r.k);
      } else {
        draw_row(x + row * r.n, r.n, row, r.k, quantize, seed, blocks, pts.data(), out + row * r.k);
      }
    }
    if (seen != 0) flags.fetch_or(seen);
  });
  raise_value_flags(r, flags.load());
}

// ---- without replacement: race keys -----------------------------------------------------

struct Keyed {
  double key;
  int64_t index;
};

inline bool higher(const Keyed& a, const Keyed& b) { return a.key > b.key || (a.key == b.key && a.index < b.index); }

// `higher` as a type, for the standard algorithms: passed as a function pointer it was
// called, not inlined, at every comparison (the selection and sorts were a third of a
// call from many short rows: 65,536 x 18, k = 8, one thread).
struct Higher {
  bool operator()(const Keyed& a, const Keyed& b) const { return higher(a, b); }
};

// Keeps the k highest of c[0, size) in c[0, k) (unordered); returns how many are kept.
inline int64_t keep_top(Keyed* c, int64_t size, int64_t k) {
  if (size <= k) return size;
  std::nth_element(c, c + (k - 1), c + size, Higher{});
  return k;
}

// Item i of a row takes half i % 2 of Philox block row * pairs + i / 2 (chunks start at
// even items): the blocks of items [first, first + count) of rows [row0, row1).
inline PhiloxBlocks key_blocks(const PhiloxSeed& seed, int64_t row0, int64_t row1, int64_t pairs, int64_t first,
                               int64_t count) {
  return PhiloxBlocks(seed, static_cast<uint64_t>(row0 * pairs + first / 2),
                      static_cast<uint64_t>((row1 - 1) * pairs + (first + count + 1) / 2));
}

// A first test with no log, as the GPU's (race_bounds.cuh) but in double: E = -log u >=
// 1 - u, so a probability's key w / E is at most w / (1 - u), and an item with
// w <= t (1 - u) cannot beat t. 1 - u is (~r + 0.5) 2^-64 for the bits r that
// exponential() reads, within 2^-53 relative once rounded; the margin 2^-40 covers that,
// the two products and exponential()'s 2^-50.56, so an item it rules out has its float64
// key below t, where the key itself would have ruled it out too: the draws are the same.
// Logit keys x / T - log E need a log (or an exp) either way: no first test.
inline bool ruled_out(const ProbWeights&, double v, uint32_t lo, uint32_t hi, double t) {
  const uint64_t r = (static_cast<uint64_t>(hi) << 32) | lo;
  const double one_minus_u = (static_cast<double>(~r) + 0.5) * 0x1.0p-64;
  return v <= t * one_minus_u * (1.0 - 0x1.0p-40);
}
inline bool ruled_out(const LogitWeights&, double, uint32_t, uint32_t, double) { return false; }

// The top k race keys above `floor` of items [first, first + count) of a row, unordered,
// in `c` (replaced), their Philox blocks next in `blocks`; returns how many of those items
// are nonzero. Candidates go to slots by index: push_back was a call per item, not inlined.
template <typename scalar_t, typename Weights>
int64_t chunk_top(const scalar_t* p, int64_t first, int64_t count, int64_t k, const Weights& wts,
                  PhiloxBlocks& blocks, std::vector<Keyed>& c, double floor = Weights::kNone) {
  c.resize(std::min(2 * k, count));
  Keyed* slot = c.data();
  int64_t size = 0;
  double kth = floor;  // keys at or below it cannot enter the top k
  int64_t nz = 0;
  for (int64_t i = first, end = first + count; i < end; i += 2) {
    const at::detail::UINT4& bits = blocks();
    for (int64_t h = 0; h < 2 && i + h < end; ++h) {
      const double v = static_cast<double>(p[i + h]);
      nz += Weights::nonzero(v);
      if (ruled_out(wts, v, bits[2 * h], bits[2 * h + 1], kth)) continue;
      const double key = wts.key(v, exponential(bits[2 * h], bits[2 * h + 1]));
      if (key <= kth) continue;
      slot[size++] = Keyed{key, i + h};
      if (size == 2 * k) {  // amortised: halve back to k
        size = keep_top(slot, size, k);
        kth = slot[k - 1].key;  // nth_element left the k-th highest there
      }
    }
  }
  c.resize(keep_top(slot, size, k));
  return nz;
}

// A floor under a row's k-th largest race key, from a sample (as threshold_cuda.cu on the
// GPU): many draws from a long row otherwise admit far more keys than k, each with its
// log, since each chunk's own k-th key rises slowly (1 x 2^20, k = 1,024: 18.6 ms against
// 6.3 with it; CI machine, 2 threads). With it from the first item, the test without a
// log rules out all but about (rank + 1) / kFloorSamples of the row. It only sets the
// work: a row with fewer than k keys above it is ranked again from no floor, so the draws
// never depend on it.
// None is taken where k is an eighth of the row or more, from rows under
// kFloorItemsPerSample samples' worth (the sample's keys, each a Philox block and a log of
// its own, would cost a noticeable share of the row's), or where the row's chunks keep
// fewer than kFloorFromKept keys in all: there their own k-th keys rule out as much
// (CI machine, 2 threads, ms, without / with: 64 x 32,000, k = 100, a chunk a row: 12.7 /
// 14.2; k = 1,024: 20.7 / 15.8; 1 x 2^20 in 128 chunks, k = 100: 8.6 / 6.2).
constexpr int kFloorSamples = 1024;
constexpr int64_t kFloorFromKept = 512;
constexpr int64_t kFloorItemsPerDraw = 8;
constexpr int64_t kFloorItemsPerSample = 16;
constexpr uint64_t kFloorPositionKey = 0x9e3779b97f4a7c15ull;  // the sample's positions: their own Philox key

inline bool floor_serves(int64_t n, int64_t k, int64_t chunks_per_row) {
  return k * chunks_per_row >= kFloorFromKept && n >= kFloorItemsPerDraw * k && n >= kFloorItemsPerSample * kFloorSamples;
}

// Sample j from stratum [j n / S, (j + 1) n / S), at a point from Philox; its race key is
// the one chunk_top computes (item i: half i % 2 of block row * pairs + i / 2). The floor
// is the sample's key of rank S k / n plus 4 standard deviations and 4 (0 the largest): a
// row keeps fewer than k above it with probability about 3e-5.
template <typename scalar_t, typename Weights>
double sampled_floor(const scalar_t* p, int64_t n, int64_t k, int64_t row, int64_t pairs, const Weights& wts,
                     const PhiloxSeed& seed) {
  std::vector<double> keys(kFloorSamples);
  const PhiloxSeed positions{seed.seed ^ kFloorPositionKey, seed.offset};
  for (int j = 0; j < kFloorSamples; j += 4) {
    const at::detail::UINT4 u = philox_block(positions, static_cast<uint64_t>(row) * (kFloorSamples / 4) + j / 4);
    for (int h = 0; h < 4; ++h) {
      const double at = (j + h + u[h] * 0x1.0p-32) * static_cast<double>(n) / kFloorSamples;
      const int64_t i = std::min(static_cast<int64_t>(at), n - 1);
      const at::detail::UINT4 bits = philox_block(seed, static_cast<uint64_t>(row * pairs + i / 2));
      const int64_t half = i % 2;
      keys[j + h] = wts.key(static_cast<double>(p[i]), exponential(bits[2 * half], bits[2 * half + 1]));
    }
  }
  const double share = static_cast<double>(k) / n, mean = kFloorSamples * share;
  const int64_t rank = std::min<int64_t>(kFloorSamples - 1, static_cast<int64_t>(mean + 4 * std::sqrt(mean * (1 - share)) + 4));
  std::nth_element(keys.begin(), keys.begin() + rank, keys.end(), std::greater<double>());
  return keys[rank];
}

// The k best of two lists sorted by `higher`, in order, into `out`.
inline void merge_best(const std::vector<Keyed>& a, const std::vector<Keyed>& b, int64_t k, std::vector<Keyed>& out) {
  out.resize(std::min<int64_t>(k, static_cast<int64_t>(a.size() + b.size())));
  size_t i = 0, j = 0;
  for (Keyed& o : out) o = j == b.size() || (i < a.size() && higher(a[i], b[j])) ? a[i++] : b[j++];
}

// Writes a row's k draws from its top k candidates (chunk_top's), in decreasing key order.
inline void write_top(std::vector<Keyed>& c, int64_t k, int64_t* out) {
  std::sort(c.begin(), c.end(), Higher{});
  for (int64_t s = 0; s < k; ++s) out[s] = c[s].index;
}

template <typename scalar_t, typename Weights>
void draw_race(const Request& r, const scalar_t* x, const Weights& wts, const PhiloxSeed& seed, int64_t* out) {
  const Chunks ch(r.rows, r.n, r.rows < kRaceChunkedRows ? kRaceChunk : kChunk);
  const int64_t pairs = (r.n + 1) / 2;
  const bool use_floor = floor_serves(r.n, r.k, ch.per_row);
  if (ch.per_row == 1) {
    // Rows within one chunk: a task checks its rows (one vector call for them all), then
    // makes each row's keys and draws in one go, one buffer per task (no allocation per
    // row, no merge step). A check pass over every row first was a parallel region and a
    // read of its own. A row with bad values is not drawn from, and the call raises once
    // every task is done, as draw_inverse_cdf does.
    std::atomic<uint32_t> flags{0};
    wrs::parallel_for(0, r.rows, std::max<int64_t>(1, kRaceTaskItems / (r.n + r.k)), [&](int64_t b0, int64_t b1) {
      std::vector<Summary> summary(b1 - b0);
      run_widest([&](auto lanes) WRS_INLINE {
        for (int64_t row = b0; row < b1; ++row) summary[row - b0] = summarize<decltype(lanes)>(x + row * r.n, r.n, wts);
      });
      std::vector<Keyed> c;
      PhiloxBlocks blocks = key_blocks(seed, b0, b1, pairs, 0, r.n);
      uint32_t seen = 0;
      for (int64_t row = b0; row < b1; ++row) {
        seen |= summary_flags(summary[row - b0]);
        if (seen != 0) break;  // the call raises: no draw is used
        const scalar_t* p = x + row * r.n;
        const double row_floor = use_floor ? sampled_floor(p, r.n, r.k, row, pairs, wts, seed) : Weights::kNone;
        if (chunk_top(p, 0, r.n, r.k, wts, blocks, c, row_floor) < r.k) {
          seen |= kTooFewNonzero;
          break;
        }
        if (static_cast<int64_t>(c.size()) < r.k) {  // fewer than k above the floor: from none
          PhiloxBlocks again = key_blocks(seed, row, row + 1, pairs, 0, r.n);
          chunk_top(p, 0, r.n, r.k, wts, again, c);
        }
        write_top(c, r.k, out + row * r.k);
      }
      if (seen != 0) flags.fetch_or(seen);
    });
    raise_value_flags(r, flags.load());
    return;
  }
  const std::vector<Summary> summary = row_summaries(x, ch, wts);
  raise_rows(r, summary);
  std::vector<int64_t> nonzero(ch.tasks());
  // Each chunk's top k, sorted where it was found; then each row's sorted lists merged
  // pairwise, a level at a time, every merge of a level in parallel and keeping only the
  // k best: one sort on one thread was the whole cost of a permutation (docs/methods.md).
  std::vector<std::vector<Keyed>> top(ch.tasks());
  std::vector<double> floors(r.rows, Weights::kNone);
  if (use_floor) {
    wrs::parallel_for(0, r.rows, 1, [&](int64_t r0, int64_t r1) {
      for (int64_t row = r0; row < r1; ++row) floors[row] = sampled_floor(x + row * r.n, r.n, r.k, row, pairs, wts, seed);
    });
  }
  const auto chunk_tops = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      PhiloxBlocks blocks = key_blocks(seed, ch.row(t), ch.row(t) + 1, pairs, ch.first(t), ch.count(t));
      nonzero[t] = chunk_top(x + ch.row(t) * r.n, ch.first(t), ch.count(t), r.k, wts, blocks, top[t], floors[ch.row(t)]);
      std::sort(top[t].begin(), top[t].end(), Higher{});
    }
  };
  wrs::parallel_for(0, ch.tasks(), ch.grain(), chunk_tops);
  // Rows with fewer than k keys above their floor (and k nonzero weights): again from none.
  for (int64_t row = 0; use_floor && row < r.rows; ++row) {
    int64_t kept = 0, nz = 0;
    for (int64_t t = row * ch.per_row; t < (row + 1) * ch.per_row; ++t) {
      kept += static_cast<int64_t>(top[t].size());
      nz += nonzero[t];
    }
    if (kept >= r.k || nz < r.k) continue;
    floors[row] = Weights::kNone;
    wrs::parallel_for(row * ch.per_row, (row + 1) * ch.per_row, ch.grain(), chunk_tops);
  }
  for (int64_t width = 1; width < ch.per_row; width *= 2) {
    const int64_t merges = (ch.per_row - width + 2 * width - 1) / (2 * width);  // per row: i + width < per_row
    wrs::parallel_for(0, r.rows * merges, 1, [&](int64_t m0, int64_t m1) {
      std::vector<Keyed> merged;
      for (int64_t m = m0; m < m1; ++m) {
        const int64_t t = (m / merges) * ch.per_row + (m % merges) * 2 * width;
        merge_best(top[t], top[t + width], r.k, merged);
        top[t].swap(merged);
      }
    });
  }
  for (int64_t row = 0; row < r.rows; ++row) {
    const std::vector<Keyed>& best = top[row * ch.per_row];
    int64_t nz = 0;
    for (int64_t t = row * ch.per_row; t < (row + 1) * ch.per_row; ++t) nz += nonzero[t];
    if (nz < r.k) continue;  // raised below
    for (int64_t s = 0; s < r.k; ++s) out[row * r.k + s] = best[s].index;
  }
  uint32_t flags = 0;
  for (int64_t row = 0; row < r.rows; ++row) {
    int64_t nz = 0;
    for (int64_t t = row * ch.per_row; t < (row + 1) * ch.per_row; ++t) nz += nonzero[t];
    if (nz < r.k) flags |= kTooFewNonzero;
  }
  raise_value_flags(r, flags);
}

// With replacement, alias tables from this many draws per row (and more than 4 per item):
// below it their build (scratch sized for 65,536-item chunks) costs more than searching.
constexpr int64_t kAliasSamples = 65'536;

// ---- float16 ------------------------------------------------------------------------

// float16 converts to float32 exactly, and the passes then read floats: c10::Half
// converts in software in this build (about 0.75 ns an item, in every pass), where F16C,
// on every x86-64 CPU since 2012, converts eight at once. It is chosen at run time, so
// the build still runs on the baseline.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define WRS_HAVE_F16C_PATH 1
__attribute__((target("f16c"))) void halves_to_floats_f16c(const at::Half* src, float* dst, int64_t count) {
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  }
  for (; i < count; ++i) dst[i] = _cvtsh_ss(src[i].x);
}
#endif

void halves_to_floats(const at::Half* src, float* dst, int64_t count) {
#ifdef WRS_HAVE_F16C_PATH
  static const bool f16c = __builtin_cpu_supports("f16c");
  if (f16c) return halves_to_floats_f16c(src, dst, count);
#endif
  for (int64_t i = 0; i < count; ++i) dst[i] = static_cast<float>(src[i]);
}

// Converted inputs up to this many items go to a buffer the calling thread keeps: a fresh
// allocation of that size comes as zeroed pages from the kernel, one fault per 4 KiB, and
// converting 8 x 2^20 items into one took 4.4 ms where warm pages take 0.24 (torch's
// whole call 6.0). The most a thread keeps is 64 MiB.
constexpr int64_t kKeptConversion = int64_t(1) << 24;
constexpr int64_t kConversionGrain = int64_t(1) << 13;

// The float32 copy of a contiguous float16 tensor; valid until the thread's next call.
const float* as_floats(const at::Tensor& x, std::vector<float>& local) {
  thread_local std::vector<float> kept;
  const int64_t count = x.numel();
  std::vector<float>& dst = count <= kKeptConversion ? kept : local;
  if (static_cast<int64_t>(dst.size()) < count) dst.resize(count);
  const at::Half* src = x.const_data_ptr<at::Half>();
  float* d = dst.data();
  // Grains of 8,192 items: a row of 32,000 converts on both threads (the copy is the same
  // whatever the split).
  wrs::parallel_for(0, count, kConversionGrain, [&](int64_t i0, int64_t i1) { halves_to_floats(src + i0, d + i0, i1 - i0); });
  return d;
}

at::Tensor sample_cpu(const Request& request, std::optional<at::Generator> generator) {
  at::Tensor out = at::empty(request.out_shape, request.x.options().dtype(at::kLong));
  if (request.rows == 0) return out;
  Request r = request;
  const bool inverse_cdf = r.replacement || r.k == 1;
  if (inverse_cdf && r.k >= kAliasSamples && r.k > 4 * r.n) {  // alias tables
    if (r.x.scalar_type() == at::kHalf) r.x = r.x.to(at::kFloat);  // a small cost beside so many draws
    AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, r.x.scalar_type(), "multinomial_cpu_checks", [&] {
      const Chunks ch(r.rows, r.n);
      const scalar_t* x = r.x.const_data_ptr<scalar_t>();
      raise_rows(r, r.logits ? row_summaries(x, ch, LogitWeights{r.inv_temperature}) : row_summaries(x, ch, ProbWeights{1.0}));
    });
    return sample_alias_tables(r, generator);
  }
  const PhiloxSeed seed = cpu_philox_seed(generator);
  int64_t* o = out.mutable_data_ptr<int64_t>();
  auto draw = [&](const auto* x) {
    auto run = [&](const auto& wts) {
      if (inverse_cdf) {
        draw_inverse_cdf(r, x, wts, seed, o);
      } else {
        draw_race(r, x, wts, seed, o);
      }
    };
    if (r.logits) {
      run(LogitWeights{r.inv_temperature});
    } else {
      run(ProbWeights{1.0});
    }
  };
  if (r.x.scalar_type() == at::kHalf) {
    std::vector<float> local;
    draw(as_floats(r.x, local));
  } else {
    // bfloat16 is read as it is: its conversion is a shift.
    AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, r.x.scalar_type(), "multinomial_cpu",
                                   [&] { draw(r.x.const_data_ptr<scalar_t>()); });
  }
  return out;
}

at::Tensor multinomial_cpu(const at::Tensor& input, int64_t num_samples, bool replacement,
                           std::optional<at::Generator> generator) {
  return sample_cpu(multinomial_request(input, num_samples, replacement), generator);
}

at::Tensor sample_logits_cpu(const at::Tensor& logits, int64_t num_samples, double temperature, bool replacement,
                             std::optional<at::Generator> generator) {
  return sample_cpu(logits_request(logits, num_samples, temperature, replacement), generator);
}

}  // namespace

TORCH_LIBRARY_IMPL(wrs, CPU, m) {
  m.impl("multinomial", &multinomial_cpu);
  m.impl("sample_logits", &sample_logits_cpu);
}

}  // namespace wrs::multinomial
