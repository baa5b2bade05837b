// multinomial on the CPU without replacement: the k largest race keys of each row
// (laws.h), in decreasing order. Each chunk task keeps its top k (a test without a log
// rules out most items first); a row's sorted lists then merge pairwise, level by level,
// in parallel.
#include "multinomial/kernels_cpu.h"

#include <ATen/Dispatch.h>

#include <atomic>
#include <cmath>
#include <functional>

namespace wrs::multinomial {
namespace {

// Race keys cost a Philox block per two items (and a log for each item ruled_out keeps),
// several times an inverse CDF's passes per item: fewer rows than kRaceChunkedRows are
// cut into tasks from 8,192 items, so that one row of 32,000 spreads over the threads.
// More rows keep kChunk: smaller chunks admit more keys in all (docs/methods.md, "Race
// keys").
constexpr int64_t kRaceChunk = int64_t(1) << 13;
constexpr int64_t kRaceChunkedRows = 4;
// For the same reason a task of short rows' race keys needs only this many items.
constexpr int64_t kRaceTaskItems = int64_t(1) << 10;

struct Keyed {
  double key;
  int64_t index;
};

inline bool higher(const Keyed& a, const Keyed& b) { return a.key > b.key || (a.key == b.key && a.index < b.index); }

// `higher` as a type, for the standard algorithms: a function pointer would be called,
// not inlined, at every comparison.
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
// log, since each chunk's own k-th key rises slowly. With it from the first item, the
// test without a log rules out all but about (rank + 1) / kFloorSamples of the row. It
// only sets the work: a row with fewer than k keys above it is ranked again from no
// floor, so the draws never depend on it. None is taken where k is an eighth of the row
// or more, from rows under kFloorItemsPerSample samples' worth (the sample's keys would
// cost a noticeable share of the row's), or where the row's chunks keep fewer than
// kFloorFromKept keys in all: there their own k-th keys rule out as much
// (docs/methods.md, "Race keys: a sampled floor").
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
void draw_typed(const Request& r, const scalar_t* x, const Weights& wts, const PhiloxSeed& seed, int64_t* out) {
  const Chunks ch(r.rows, r.n, r.rows < kRaceChunkedRows ? kRaceChunk : kChunk);
  const int64_t pairs = (r.n + 1) / 2;
  const bool use_floor = floor_serves(r.n, r.k, ch.per_row);
  if (ch.per_row == 1) {
    // Rows within one chunk: a task checks its rows (one vector call for them all), then
    // makes each row's keys and draws in one go, one buffer per task (no allocation per
    // row, no merge step, one parallel region). A row with bad values is not drawn from,
    // and the call raises once every task is done, as draw_inverse_cdf does.
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

}  // namespace

void draw_race(const Request& r, at::ScalarType type, const void* x, const PhiloxSeed& seed, int64_t* out) {
  AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, type, "multinomial_race_cpu", [&] {
    with_weights(r, [&](const auto& wts) { draw_typed(r, static_cast<const scalar_t*>(x), wts, seed, out); });
  });
}

}  // namespace wrs::multinomial
