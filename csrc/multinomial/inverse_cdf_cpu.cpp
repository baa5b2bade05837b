// multinomial on the CPU with replacement (or one draw): the inverse CDF of the quantized
// law (laws.h), in the forms dispatch_cpu.cpp picks between: sorted points found by one
// partial scan, a row's prefix sums searched, or draws against stretches' bounds; rows
// taken a task at a time, or a few long rows cut into chunk tasks.
#include "multinomial/kernels_cpu.h"

#include <ATen/Dispatch.h>

#include <atomic>
#include <utility>

namespace wrs::multinomial {
namespace {

// Rows of one chunk each go parallel from this many items (n + k a row): a short row costs
// several times a long row's item (docs/methods.md, "Rows of one chunk").
constexpr int64_t kRowTaskItems = int64_t(1) << 11;

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

// Stretches of kBoundStretch items (dispatch_cpu.h): a few draws from a long row each scan
// one (about half of it) against the bounds of all (draw_against_bounds).

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

static_assert(kChunk % kBoundStretch == 0 && kOneRowChunk % kBoundStretch == 0, "chunks of whole stretches");

template <typename scalar_t, typename Weights>
void draw_typed(const Request& r, CpuMethod method, const scalar_t* x, const Weights& wts, const PhiloxSeed& seed,
                int64_t* out) {
  if (method == CpuMethod::kChunkBounds || method == CpuMethod::kChunkPoints) {
    const Chunks ch(r.rows, r.n, inverse_cdf_chunk(r.rows, r.n));
    const bool bounded = method == CpuMethod::kChunkBounds;
    std::vector<Summary> stretch;
    const std::vector<Summary> summary = bounded ? stretch_summaries(x, ch, wts, stretch) : row_summaries(x, ch, wts);
    raise_rows(r, summary);
    std::vector<Quantizer<Weights>> quantize(r.rows);
    for (int64_t row = 0; row < r.rows; ++row) quantize[row] = {wts, row_law<Weights>(summary[row], r.n), r.n};
    if (bounded) return draw_stretches_against_bounds(r, x, quantize, stretch, seed, out);
    return draw_chunked(r, ch, x, quantize, seed, out);
  }
  // Rows of one chunk each: a task sums its rows (one vector call for them all), then draws
  // from each while it is in cache (one parallel region and one read; docs/methods.md). A
  // row with bad values is not drawn from, and the call raises once every task is done.
  const bool prefix = method == CpuMethod::kRowPrefix;
  const bool bounded = method == CpuMethod::kRowBounds;
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
      // Each row's law where its task draws: a vector of them would be made on one thread.
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

}  // namespace

void draw_inverse_cdf(const Request& r, CpuMethod method, at::ScalarType type, const void* x, const PhiloxSeed& seed,
                      int64_t* out) {
  AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, type, "multinomial_inverse_cdf_cpu", [&] {
    with_weights(r, [&](const auto& wts) { draw_typed(r, method, static_cast<const scalar_t*>(x), wts, seed, out); });
  });
}

}  // namespace wrs::multinomial
