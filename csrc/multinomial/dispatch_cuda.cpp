// The CUDA multinomial's method table. One line a rule, the reason beside it; the
// measurements behind each (H100 and H200, side by side in one process):
// docs/methods.md, "multinomial on CUDA".
//
// One draw without replacement is one draw with it, so k = 1 takes the with-replacement
// rules, and may take the race: its law is within 2^-49 of the exact one in total
// variation, the quantized law's within 2^-33 (laws.h).
#include "multinomial/dispatch_cuda.h"

#include <algorithm>
#include <limits>

namespace wrs::multinomial {
namespace {

constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

constexpr int64_t kThreadOneDrawUpTo = 8;            // one draw from rows this short: a thread per row
constexpr int64_t kWarpLogitRowsUpTo = 128;          // one draw from longer logit rows, many rows: a thread
constexpr int64_t kRaceProbsUpToItems = int64_t{1} << 19;
constexpr int64_t kRaceUpToItems = int64_t{1} << 22;
constexpr int64_t kRaceLogitRowsFrom = int64_t{1} << 14;
constexpr int64_t kWarpTopKLogitsFrom = int64_t{1} << 21;  // one draw, short logit rows, items in the call
constexpr int64_t kCdfSearchItemsPerDraw = 16;
constexpr int64_t kCdfSearchFewDraws = int64_t{1} << 21;
constexpr int64_t kCdfSearchFewDrawsFromItems = int64_t{1} << 14;

// Beyond what the inverse CDF holds, with replacement: a stored CDF where its scan costs
// less than the alias build (few draws per item, or few draws over long rows), else tables.
CudaMethod many_draws(const Shape& s) {
  const bool few_per_item = s.k * kCdfSearchItemsPerDraw <= s.n;
  const bool few_in_all = s.rows * s.k <= kCdfSearchFewDraws && s.n >= kCdfSearchFewDrawsFromItems;
  return few_per_item || few_in_all ? CudaMethod::kCdfSearch : CudaMethod::kAliasTables;
}

// The floor top-k's classes, a line each: {items per row from, up to, rows from}. Longer
// rows need more rows, or a block per row idles most SMs.
struct FloorClass {
  int64_t items_from, items_up_to, rows_from;
};
constexpr FloorClass kFloorClasses[] = {
    {1000, 8192, 1},
    {8193, 16384, 32},
    {16385, kMaxFloorRow, 128},
};

// The two-pass top-k's classes, a line each. Few draws admit few keys into one pass's
// lists, so they pay for two passes only in large calls; logits' bounds cost more, so
// they need more draws; with many rows one pass fills the GPU, and where k chunks are
// most of a row the second pass reads it again.
struct TwoPassClass {
  int64_t rows_from, rows_up_to;
  bool logits_too;  // false: probabilities only
  int64_t k_from, k_up_to;
  int64_t items_per_draw;   // n >= items_per_draw * k
  int64_t call_items_from;  // rows * n >= this
};
constexpr int64_t kAnyRows = std::numeric_limits<int64_t>::max();
constexpr TwoPassClass kTwoPassClasses[] = {
    // {rows from, rows up to, logits too, k from, k up to, n >= this x k, rows x n >= this}
    {1, 256, false, 2, 7, kTwoPassItemsPerDraw, int64_t{1} << 24},
    {1, 256, false, 8, kMaxTopK, kTwoPassItemsPerDraw, 0},
    {1, 256, true, 16, kMaxTopK, kTwoPassItemsPerDraw, 0},
    {257, 1024, true, kWarp + 1, kMaxTopK, kTwoPassItemsPerDraw, 0},
    {1025, kAnyRows, true, kWarp + 1, kMaxTopK, 384, 0},
    {257, kAnyRows, false, 2, kWarp, 8192, 0},
};

}  // namespace

bool warp_rows_serve(int64_t rows, int64_t n, int64_t k, bool float64) {
  if (n > (float64 ? kMaxWarpRow / 2 : kMaxWarpRow)) return false;
  // Beyond a slice of samples each sample walks its owner lane's items again, which costs
  // more than an alias lookup unless a lane holds few items and the call is small.
  return k <= kWarpRowSlice || (n <= 32 && k <= kMaxShortRowSamples && rows * k <= kMaxShortRowDraws);
}

int64_t inverse_cdf_chunks(int64_t rows, int64_t n, int64_t sms) {
  const int64_t wanted = ceil_div(16 * sms, rows);
  const int64_t most = std::min(ceil_div(n, kInverseCdfTile), kMaxInverseCdfChunks);
  const int64_t chunks = std::max<int64_t>(1, std::min(wanted, most));
  return ceil_div(n, ceil_div(ceil_div(n, chunks), kInverseCdfTile) * kInverseCdfTile);  // after rounding to tiles
}

bool race_serves(const Shape& s, int64_t sms) {
  // One read and one launch, while the call is small or its rows are one chunk each; past
  // that its Philox block and bound per item cost more than the one draw over chunks.
  const int64_t items = s.rows * s.n;
  const bool one_chunk = inverse_cdf_chunks(s.rows, s.n, sms) == 1;
  if (s.logits) return items <= kRaceUpToItems || (s.n >= kRaceLogitRowsFrom && one_chunk);
  return items <= kRaceProbsUpToItems || (items <= kRaceUpToItems && one_chunk);
}

bool floor_topk_serves(int64_t rows, int64_t n, int64_t k) {
  if (k < 2 || k > kMaxTopK || rows > std::numeric_limits<int32_t>::max()) return false;
  for (const FloorClass& c : kFloorClasses) {
    if (n >= c.items_from && n <= c.items_up_to && rows >= c.rows_from) return true;
  }
  return false;
}

bool two_pass_serves(int64_t rows, int64_t n, int64_t k, bool logits) {
  for (const TwoPassClass& c : kTwoPassClasses) {
    if (rows >= c.rows_from && rows <= c.rows_up_to && (c.logits_too || !logits) && k >= c.k_from &&
        k <= c.k_up_to && n >= c.items_per_draw * k && rows * n >= c.call_items_from) {
      return true;
    }
  }
  return false;
}

bool thread_rows_serve(int64_t rows, int64_t n, int64_t k) {
  return k <= kMaxThreadRowSamples && (n <= kMaxThreadRow || (rows >= kThreadRowsFrom && n <= kMaxThreadLongRow));
}

bool threshold_serves(int64_t n, int64_t cands) { return n >= kThresholdItemsPerCandidate * cands; }

bool chunk_max_serves(int64_t rows, int64_t n, int64_t k) {
  return k > kMaxTopK && n >= kChunkMaxItemsPerDraw * k && n >= kChunkMaxRowFrom && rows * n >= kChunkMaxFromItems;
}

CudaMethod choose_cuda(const Shape& s, bool capturing, int64_t sms) {
  using M = CudaMethod;
  // One draw from a few items: a thread per row, where warp rows reduce over 8 lanes.
  if (s.k == 1 && s.n <= kThreadOneDrawUpTo) return M::kThreadTopK;
  // One draw from many logit rows of 129-4,096: warp rows take a float64 exp per item.
  if (s.k == 1 && s.logits && s.n > kWarpLogitRowsUpTo && thread_rows_serve(s.rows, s.n, 1)) return M::kThreadTopK;
  if (s.replacement || s.k == 1) {
    // Short rows: one read, 8-32 lanes per row share the per-row reductions.
    if (warp_rows_serve(s.rows, s.n, s.k, s.float64)) return M::kWarpRows;
    // One draw, one read, one launch.
    if (s.k == 1 && race_serves(s, sms)) return M::kRace;
    // One draw from many short logit rows: the warp top-k's float bound per item, where
    // the inverse CDF takes a float64 exp per item twice and the race idles lanes.
    if (s.k == 1 && s.logits && s.n < kRaceLogitRowsFrom && s.rows * s.n >= kWarpTopKLogitsFrom) return M::kTopK;
    // Short rows, many draws: a block per row of the inverse CDF costs more than a table.
    if (s.n <= kMaxWarpRow && s.k > kWarpRowSlice) return many_draws(s);
    // Longer rows: about two reads and no table, while its blocks hold the draws.
    const int64_t chunks = inverse_cdf_chunks(s.rows, s.n, sms);
    return s.k <= (chunks == 1 ? kMaxRowSamples : kMaxChunkSamples) ? M::kInverseCdf : many_draws(s);
  }
  // Without replacement: a thread per row where its keys fit one thread, or rows fill the GPU.
  if (thread_rows_serve(s.rows, s.n, s.k)) return M::kThreadTopK;
  // A floor from bounds on every key, then only the keys that could reach it: no lists.
  if (floor_topk_serves(s.rows, s.n, s.k)) return M::kFloorTopK;
  // Long rows, by kTwoPassClasses: each chunk's largest key, then only the k best chunks.
  if (two_pass_serves(s.rows, s.n, s.k, s.logits)) return M::kTwoPassTopK;
  // Up to 64 draws: one read of race keys into warp lists.
  if (s.k <= kMaxTopK) return M::kTopK;
  // More: torch.topk over keys. Under capture, where no host read can follow up a row
  // the sampled threshold misses, chunk maxima rank fewer keys over long rows.
  return capturing && chunk_max_serves(s.rows, s.n, s.k) ? M::kChunkMaxTopK : M::kKeysTopK;
}

const char* method_name(CudaMethod m) {
  switch (m) {
    case CudaMethod::kThreadTopK: return "thread_topk";
    case CudaMethod::kWarpRows: return "warp_rows";
    case CudaMethod::kRace: return "race";
    case CudaMethod::kInverseCdf: return "inverse_cdf";
    case CudaMethod::kCdfSearch: return "cdf_search";
    case CudaMethod::kAliasTables: return "alias_tables";
    case CudaMethod::kFloorTopK: return "floor_topk";
    case CudaMethod::kTwoPassTopK: return "two_pass_topk";
    case CudaMethod::kTopK: return "warp_topk";
    case CudaMethod::kChunkMaxTopK: return "chunk_max_topk";
    case CudaMethod::kKeysTopK: return "keys_topk";
  }
  return "unknown";
}

}  // namespace wrs::multinomial
