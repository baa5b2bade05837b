// Per-node alias tables over CSR on CUDA: PSA+ over tiles of the edge array, whatever the
// degrees. Tiles of kTile edges ignore row boundaries, so a tile holds many short rows, a
// piece of a hub, or both, and every pass reads the weights coalesced:
//   1. sums: each tile reduces its rows' pieces (a segmented block scan); a row inside the
//      tile gets its float64 sum, and a row crossing tiles has its pieces added in tile
//      order by the tile where it starts (deterministic);
//   2. pack: each tile quantizes its items and stages every row piece's lights and heavies
//      in shared memory with one segmented block scan. A row inside the tile is merged
//      there whole (PSA's merge, alias/alias.h); a piece of a crossing row packs greedily
//      what it can (PSA+) and hands its leftovers, placed through CUB's decoupled
//      look-back, to
//   3. split and 4. pack: PSA over each crossing row's leftovers, one section per tile.
#include "alias/alias.h"
#include "alias/psa_cuda.cuh"
#include "common/cuda_utils.cuh"
#include "graph/graph_ops.h"

#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <cub/block/block_scan.cuh>
#include <torch/library.h>

namespace wrs::graph {
namespace {

using alias::AddWithinRow;
using alias::ClassPrefix;
using alias::GreedyStop;
using alias::LightItem;
using alias::MergeSlice;
using alias::RowPrefix;
using alias::TileLookback;
using alias::TileState;

constexpr int kThreads = 256;
// Odd, as in alias_cuda.cu: a thread's shared-memory items sit 72 bytes past its
// neighbour's, so 16 neighbours fall in 16 banks.
constexpr int kItems = 9;
constexpr int64_t kTile = kThreads * kItems;  // edges a tile, and merge steps a section
constexpr int kWindow = 1024;                   // rowptr entries a tile stages for its row searches

// The last row r in [lo, hi] with rowptr[r] <= e: the row holding edge e (empty rows
// before it have rowptr[r + 1] <= e too, so they are passed over).
__device__ inline int64_t row_of(const int64_t* rowptr, int64_t lo, int64_t hi, int64_t e) {
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (rowptr[mid] <= e) lo = mid; else hi = mid - 1;
  }
  return lo;
}

// Where a tile lies: its edges [first, first + count), and the rows of its first and
// last edge. `head_cut`: the first row began before the tile; `tail_cut`: the last row
// goes on after it.
struct TileSpan {
  int64_t first, count, row0, row1;
  bool head_cut, tail_cut;
};

__device__ inline TileSpan tile_span(const int64_t* rowptr, const int64_t* tile_row, int64_t tile, int64_t edges) {
  TileSpan t;
  t.first = tile * kTile;
  t.count = edges - t.first < kTile ? edges - t.first : kTile;
  t.row0 = tile_row[2 * tile];
  t.row1 = tile_row[2 * tile + 1];
  t.head_cut = rowptr[t.row0] < t.first;
  t.tail_cut = rowptr[t.row1 + 1] > t.first + t.count;
  return t;
}

// Flags a malformed rowptr in `status` and in `bad`, a device word every later kernel of
// the build reads first: with validate=False they then leave the table unwritten rather
// than follow offsets out of range.
__global__ void check_rowptr_kernel(const int64_t* rowptr, int64_t nodes, int64_t edges, uint32_t* status,
                                    int* bad) {
  const int64_t v = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (v > nodes) return;
  uint32_t flags = 0;
  if (v == 0 && rowptr[0] != 0) flags |= kBadRowptr;
  if (v == nodes && rowptr[nodes] != edges) flags |= kBadRowptr;
  if (v < nodes) {
    const int64_t n = rowptr[v + 1] - rowptr[v];
    if (n < 0) flags |= kBadRowptr;
    if (n >= alias::kMaxCategories) flags |= kRowTooLong;
  }
  if (flags) {
    atomicOr(status, flags);
    atomicOr(bad, 1);
  }
}

// tile_row[2t], tile_row[2t + 1]: the rows of tile t's first and last edge.
__global__ void tile_rows_kernel(const int64_t* rowptr, int64_t nodes, int64_t edges, int64_t tiles,
                                 const int* bad, int64_t* tile_row) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= tiles || *bad) return;
  const int64_t first = t * kTile;
  const int64_t last = (edges - first < kTile ? edges : first + kTile) - 1;
  const int64_t r0 = row_of(rowptr, 0, nodes - 1, first);
  tile_row[2 * t] = r0;
  tile_row[2 * t + 1] = row_of(rowptr, r0, nodes - 1, last);
}

// A thread's items (blocked: thread k holds tile positions k * kItems + i) and their rows:
// a binary search for the first, then a walk along rowptr (a few empty rows at most,
// else another search), so neighbouring items cost one cached load each.
struct Items {
  int64_t row[kItems];
  // `window`: shared memory for kWindow entries; the tile's rowptr entries are staged there
  // when they fit, so the searches read shared memory (every thread of the block calls this).
  __device__ Items(const int64_t* rowptr, const TileSpan& t, int64_t* window) {
    const bool fits = t.row1 - t.row0 + 2 <= kWindow;
    if (fits) {
      for (int64_t k = threadIdx.x; k < t.row1 - t.row0 + 2; k += blockDim.x) window[k] = rowptr[t.row0 + k];
    }
    __syncthreads();
    auto rp = [&](int64_t r) { return fits ? window[r - t.row0] : rowptr[r]; };
    auto search = [&](int64_t lo, int64_t e) {  // the last r in [lo, row1] with rowptr[r] <= e
      int64_t hi = t.row1;
      while (lo < hi) {
        const int64_t mid = lo + (hi - lo + 1) / 2;
        if (rp(mid) <= e) lo = mid; else hi = mid - 1;
      }
      return lo;
    };
    const int64_t p0 = threadIdx.x * kItems;
    int64_t r = search(t.row0, t.first + (p0 < t.count ? p0 : t.count - 1));
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      const int64_t p = p0 + i;
      const int64_t e = t.first + (p < t.count ? p : t.count - 1);
      for (int walked = 0; rp(r + 1) <= e && walked < 8; ++walked) ++r;
      if (rp(r + 1) <= e) r = search(r + 1, e);
      row[i] = r;
    }
  }
};

// A segment of a tile is a row's piece in it; it starts at a row start or at the tile's start.
__device__ inline bool starts_segment(const int64_t* rowptr, const TileSpan& t, int64_t p, int64_t row) {
  return p == 0 || t.first + p == rowptr[row];
}

// ---- 1. row sums ----------------------------------------------------------------------

struct SegmentSum {
  double sum;
  int head;
};

struct AddInSegment {
  __device__ SegmentSum operator()(const SegmentSum& a, const SegmentSum& b) const {
    return b.head ? b : SegmentSum{a.sum + b.sum, a.head};
  }
};

// part[2t]: the sum of tile t's first piece if its row began before the tile; part[2t + 1]:
// of its last piece if its row goes on after it. Rows inside the tile get row_sum directly.
template <typename scalar_t>
__global__ void __launch_bounds__(kThreads)
    sums_kernel(const scalar_t* w, const int64_t* rowptr, const int64_t* tile_row, int64_t edges, const int* bad,
                double* row_sum, double* part, uint32_t* status) {
  using Scan = cub::BlockScan<SegmentSum, kThreads, cub::BLOCK_SCAN_WARP_SCANS>;
  __shared__ typename Scan::TempStorage scan;
  __shared__ int64_t window[kWindow];
  if (*bad) return;
  const TileSpan t = tile_span(rowptr, tile_row, blockIdx.x, edges);
  const Items items(rowptr, t, window);
  SegmentSum x[kItems];
  uint32_t flags = 0;
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    const int64_t p = threadIdx.x * kItems + i;
    const double v = p < t.count ? static_cast<double>(w[t.first + p]) : 0.0;
    flags |= weight_flags(v);
    x[i] = SegmentSum{v, p < t.count && starts_segment(rowptr, t, p, items.row[i])};
  }
  Scan(scan).InclusiveScan(x, x, AddInSegment{});
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    const int64_t p = threadIdx.x * kItems + i;
    const int64_t r = items.row[i];
    if (p >= t.count || !(p == t.count - 1 || t.first + p + 1 == rowptr[r + 1])) continue;  // a segment's last item
    const bool head = r == t.row0 && t.head_cut;
    const bool tail = p == t.count - 1 && t.tail_cut;
    if (!head && !tail) {
      row_sum[r] = x[i].sum;
      if (!(x[i].sum <= 1.7976931348623157e308)) flags |= kRowSumOverflow;
    }
    if (head) part[2 * blockIdx.x] = x[i].sum;
    if (tail) part[2 * blockIdx.x + 1] = x[i].sum;
  }
  if (flags) atomicOr(status, flags);
}

// The sum of each row crossing tiles, by the tile where it starts: its piece there, then
// the first piece of every later tile it reaches, in order.
__global__ void crossing_sums_kernel(const int64_t* rowptr, const int64_t* tile_row, int64_t tiles, int64_t edges,
                                     const int* bad, const double* part, double* row_sum, uint32_t* status) {
  const int64_t tile = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (tile >= tiles || *bad) return;
  const int64_t r = tile_row[2 * tile + 1];
  const int64_t end = rowptr[r + 1];
  if (end <= (tile + 1) * kTile || rowptr[r] < tile * kTile) return;  // not crossing, or not starting here
  double sum = part[2 * tile + 1];
  for (int64_t u = tile + 1; u < tiles && u * kTile < end; ++u) sum += part[2 * u];
  row_sum[r] = sum;
  if (!(sum <= 1.7976931348623157e308)) atomicOr(status, kRowSumOverflow);
}

// ---- 2. pack each tile ------------------------------------------------------------------

// The segmented class scan: counts over the whole tile (where a piece's items go in the
// staging arrays, and which segment an item is in), merge keys within each segment.
struct TileClasses {
  uint32_t lights, heavies, segments, head;
  uint64_t deficit, excess;
};

struct AddTileClasses {
  __device__ TileClasses operator()(const TileClasses& a, const TileClasses& b) const {
    return TileClasses{a.lights + b.lights, a.heavies + b.heavies, a.segments + b.segments, a.head | b.head,
                       b.head ? b.deficit : a.deficit + b.deficit, b.head ? b.excess : a.excess + b.excess};
  }
};

// The leftover merge of each crossing row: its items (indexed from rowptr[r], as the
// table) and per-row totals.
struct Leftovers {
  LightItem* light;
  uint64_t* deficit_before;
  uint32_t* heavy;
  uint64_t* excess_through;
  int64_t* lights;   // per row
  int64_t* heavies;  // per row
  uint64_t* deficit_total;  // per row
};

struct PackStaging {
  union {
    typename cub::BlockScan<TileClasses, kThreads, cub::BLOCK_SCAN_WARP_SCANS>::TempStorage scan;
    typename TileLookback::TempStorage lookback;
  };
  uint64_t key[kTile];   // lights' keys [0, L), then heavies' [L, L + H)
  LightItem light[kTile];
  uint32_t heavy[kTile];
  uint16_t seg_light[kTile + 1], seg_heavy[kTile + 1], seg_pos[kTile + 1];
  TileClasses total;
  GreedyStop stop[2];       // the first and last piece, where cut
  ClassPrefix before[2];    // what earlier pieces of their rows left over
};

// Segment s's lights and heavies in the staging arrays, as a merge slice of the whole piece.
__device__ inline MergeSlice segment_slice(const PackStaging& st, int s) {
  const int64_t l0 = st.seg_light[s], lights = st.seg_light[s + 1] - l0;
  const int64_t h0 = st.seg_heavy[s], heavies = st.seg_heavy[s + 1] - h0;
  const uint64_t deficit = lights > 0 ? st.key[l0 + lights - 1] + (kBucket - st.light[l0 + lights - 1].mass) : 0;
  return alias::whole_row(st.light + l0, st.key + l0, st.heavy + h0, st.key + st.total.lights + h0, lights, heavies,
                          deficit);
}

__device__ inline ClassPrefix slice_sums(const MergeSlice& m) {
  return ClassPrefix{m.lights, m.heavies, m.deficit_after, m.heavies > 0 ? m.excess_through[m.heavies - 1] : 0};
}

template <typename scalar_t>
__global__ void __launch_bounds__(kThreads, 3)
    pack_kernel(const scalar_t* w, const int64_t* rowptr, const int64_t* tile_row, int64_t edges, const int* bad,
                const double* row_sum, TileState tile_state, Leftovers left, int64_t* table) {
  extern __shared__ __align__(16) char smem[];
  PackStaging& st = *reinterpret_cast<PackStaging*>(smem);
  __shared__ int64_t window[kWindow];
  if (*bad) return;  // every block, so none waits in the look-back for one that left
  const TileSpan t = tile_span(rowptr, tile_row, blockIdx.x, edges);
  const Items items(rowptr, t, window);

  // Quantize and scan the classes. An item is live if its row has a positive finite-or-
  // flagged sum; a dead row's items (and the padding) take no class.
  TileClasses x[kItems];
  uint64_t q[kItems];
  uint32_t live = 0;
  int64_t cached_row = -1;
  RowScale rs{0, 0, 0};
  double sum = 0;
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    const int64_t p = threadIdx.x * kItems + i;
    const int64_t r = items.row[i];
    const int64_t n = rowptr[r + 1] - rowptr[r];
    if (r != cached_row) {
      cached_row = r;
      sum = row_sum[r];
      rs = row_scale(sum > 0 ? sum : 1.0, n);
    }
    const bool alive = p < t.count && sum > 0;
    live |= alive ? 1u << i : 0u;
    q[i] = alive ? quantize(static_cast<double>(w[t.first + p]), rs, n) : 0;
    const ClassPrefix cls = alive ? alias::class_of(q[i]) : ClassPrefix{0, 0, 0, 0};
    const uint32_t head = p < t.count && starts_segment(rowptr, t, p, r);
    x[i] = TileClasses{static_cast<uint32_t>(cls.lights), static_cast<uint32_t>(cls.heavies), head, head,
                       cls.deficit, cls.excess};
  }
  TileClasses total;
  cub::BlockScan<TileClasses, kThreads, cub::BLOCK_SCAN_WARP_SCANS>(st.scan).ExclusiveScan(
      x, x, TileClasses{0, 0, 0, 0, 0, 0}, AddTileClasses{}, total);
  if (threadIdx.x == 0) st.total = total;
  __syncthreads();  // st.total, and the scan's storage free again

  // Stage: x[i] now holds what precedes item i in the tile.
  int slot[kItems];
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    const int64_t p = threadIdx.x * kItems + i;
    const int64_t r = items.row[i];
    const bool head = p < t.count && starts_segment(rowptr, t, p, r);
    slot[i] = static_cast<int>(x[i].segments) + (head ? 0 : -1);
    if (p >= t.count) continue;
    if (head) {
      st.seg_light[slot[i]] = static_cast<uint16_t>(x[i].lights);
      st.seg_heavy[slot[i]] = static_cast<uint16_t>(x[i].heavies);
      st.seg_pos[slot[i]] = static_cast<uint16_t>(p);
    }
    if (!(live >> i & 1u)) continue;
    const ClassPrefix cls = alias::class_of(q[i]);
    const uint32_t index = static_cast<uint32_t>(t.first + p - rowptr[r]);
    if (cls.lights) {
      st.light[x[i].lights] = LightItem{index, static_cast<uint32_t>(q[i])};
      st.key[x[i].lights] = head ? 0 : x[i].deficit;
    } else {
      st.heavy[x[i].heavies] = index;
      st.key[total.lights + x[i].heavies] = (head ? 0 : x[i].excess) + cls.excess;
    }
  }
  if (threadIdx.x == 0) {
    st.seg_light[total.segments] = static_cast<uint16_t>(total.lights);
    st.seg_heavy[total.segments] = static_cast<uint16_t>(total.heavies);
    st.seg_pos[total.segments] = static_cast<uint16_t>(t.count);
  }
  __syncthreads();

  // Cut pieces: greedy stops (thread 0: the first piece, thread 1: the last) and the
  // look-back for what the first piece's row left in earlier tiles (warp 0).
  const int last = static_cast<int>(total.segments) - 1;
  const bool single = last == 0 && t.head_cut;  // one piece, of a row crossing the tile
  if (threadIdx.x < 2) {
    const int s = threadIdx.x == 0 ? 0 : last;
    const bool cut = threadIdx.x == 0 ? t.head_cut : t.tail_cut;
    if (cut) {
      const MergeSlice m = segment_slice(st, s);
      st.stop[threadIdx.x] = alias::greedy_stop(m.deficit_before, m.lights, m.deficit_after, m.excess_through, m.heavies);
    }
  }
  __syncwarp();
  if (threadIdx.x < 32) {
    RowPrefix mine{ClassPrefix{0, 0, 0, 0}, 1};
    if (t.tail_cut) {
      const MergeSlice m = segment_slice(st, last);
      const ClassPrefix sums = slice_sums(m);
      mine = RowPrefix{alias::leftover_totals(st.stop[1], sums.lights, sums.deficit, m.excess_through, sums.heavies),
                       single ? 0 : 1};
    }
    if (blockIdx.x == 0) {
      if (threadIdx.x == 0) {
        tile_state.SetInclusive(0, mine);
        st.before[0] = st.before[1] = ClassPrefix{0, 0, 0, 0};
      }
    } else {
      TileLookback op(tile_state, st.lookback, AddWithinRow{}, blockIdx.x);
      const RowPrefix prior = op(mine);
      if (threadIdx.x == 0) {
        st.before[0] = t.head_cut ? prior.sum : ClassPrefix{0, 0, 0, 0};
        st.before[1] = single ? st.before[0] : ClassPrefix{0, 0, 0, 0};
      }
    }
  }
  __syncthreads();

  // Pack: each thread the merge steps at its items' positions, segment by segment.
#pragma unroll 1
  for (int i = 0; i < kItems;) {
    const int64_t p = threadIdx.x * kItems + i;
    if (p >= t.count) break;
    const int s = slot[i];
    int j = i + 1;
    while (j < kItems && slot[j] == s && threadIdx.x * kItems + j < t.count) ++j;
    const int64_t r = items.row[i];
    const int64_t base = rowptr[r];
    if (!(live >> i & 1u)) {  // a dead row: every bucket says so
      for (int k = i; k < j; ++k) table[t.first + threadIdx.x * kItems + k] = kDeadBucket;
    } else {
      const MergeSlice m = segment_slice(st, s);
      int64_t b = p - st.seg_pos[s], e = b + (j - i);
      const int cut = s == 0 && t.head_cut ? 0 : (s == last && t.tail_cut ? 1 : -1);
      if (cut < 0) {
        alias::pack_merge_steps(m, b, e, table + base);
      } else if (m.heavies > 0) {
        const GreedyStop& stop = st.stop[cut];
        const int64_t steps = stop.lights + stop.heavies;
        e = e < steps ? e : steps;
        if (b < e) {
          alias::pack_merge_steps(alias::greedy_slice(m.light, m.deficit_before, m.heavy, m.excess_through, stop), b,
                                  e, table + base);
        }
      }
    }
    i = j;
  }

  // Leftovers of the cut pieces, at their place in their row's leftover merge.
  for (int c = 0; c < 2; ++c) {
    const bool cut = c == 0 ? t.head_cut : t.tail_cut;
    if (!cut || (c == 1 && single)) continue;
    const int s = c == 0 ? 0 : last;
    const int64_t r = c == 0 ? t.row0 : t.row1;
    // The row's last piece records the row's leftover totals (zero for a dead row).
    const bool row_ends = c == 0 && !(last == 0 && t.tail_cut);
    if (!(row_sum[r] > 0)) {
      if (threadIdx.x == 0 && row_ends) left.lights[r] = left.heavies[r] = left.deficit_total[r] = 0;
      continue;
    }
    const MergeSlice m = segment_slice(st, s);
    const ClassPrefix sums = slice_sums(m);
    const GreedyStop stop = m.heavies > 0 ? st.stop[c] : GreedyStop{0, 0, 0, 0};
    const ClassPrefix mine = alias::leftover_totals(stop, sums.lights, sums.deficit, m.excess_through, sums.heavies);
    const ClassPrefix before = st.before[c];
    const int64_t base = rowptr[r];
    for (int64_t k = threadIdx.x; k < mine.lights; k += kThreads) {
      const alias::Leftover l =
          alias::leftover_light(k, stop, sums, m.light, m.deficit_before, m.heavy, before);
      left.light[base + before.lights + k] = LightItem{l.index, l.mass};
      left.deficit_before[base + before.lights + k] = l.key;
    }
    for (int64_t k = threadIdx.x; k < mine.heavies; k += kThreads) {
      const alias::Leftover h = alias::leftover_heavy(k, stop, sums, m.heavy, m.excess_through, before);
      left.heavy[base + before.heavies + k] = h.index;
      left.excess_through[base + before.heavies + k] = h.key;
    }
    if (threadIdx.x == 0 && row_ends) {
      left.lights[r] = before.lights + mine.lights;
      left.heavies[r] = before.heavies + mine.heavies;
      left.deficit_total[r] = before.deficit + mine.deficit;
    }
  }
}

// ---- 3. split and 4. pack each crossing row's leftovers -----------------------------------
//
// Section k of crossing row r (merge steps [k * kTile, (k + 1) * kTile) of its leftovers)
// belongs to slot (tile, side) = (first tile of r + k, 0) for k > 0 and to the tile where
// r starts for k = 0 (side 0 if r starts the tile, else side 1, its last piece). A row
// touches at least as many tiles as its leftovers have sections.

struct Section {
  int64_t row, k;  // row -1: the slot holds no section
};

__device__ inline Section section_at(const int64_t* rowptr, const int64_t* tile_row, const Leftovers& left,
                                     int64_t tile, int side, int64_t edges) {
  const TileSpan t = tile_span(rowptr, tile_row, tile, edges);
  Section s{-1, 0};
  if (side == 0 && t.head_cut) {
    s = Section{t.row0, tile - rowptr[t.row0] / kTile};
  } else if (side == 0 && !t.head_cut && t.tail_cut && t.row1 == t.row0) {
    s = Section{t.row0, 0};
  } else if (side == 1 && t.tail_cut && !(t.row1 == t.row0)) {
    s = Section{t.row1, 0};
  }
  if (s.row >= 0) {
    const int64_t steps = left.lights[s.row] + left.heavies[s.row];
    if (s.k * kTile >= steps) s.row = -1;
  }
  return s;
}

__device__ inline MergeSlice leftover_row(const Leftovers& left, const int64_t* rowptr, int64_t r) {
  const int64_t base = rowptr[r];
  return alias::whole_row(left.light + base, left.deficit_before + base, left.heavy + base,
                          left.excess_through + base, left.lights[r], left.heavies[r], left.deficit_total[r]);
}

// split[2 * tile + side]: lights before the slot's section in its row's leftover merge.
__global__ void split_kernel(const int64_t* rowptr, const int64_t* tile_row, int64_t tiles, int64_t edges,
                             const int* bad, Leftovers left, int64_t* split) {
  const int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (k >= 2 * tiles || *bad) return;
  const Section s = section_at(rowptr, tile_row, left, k / 2, static_cast<int>(k % 2), edges);
  if (s.row < 0) return;
  split[k] = alias::merge_corank(leftover_row(left, rowptr, s.row), s.k * kTile);
}

__global__ void __launch_bounds__(kThreads)
    pack_leftovers_kernel(const int64_t* rowptr, const int64_t* tile_row, int64_t edges, const int* bad,
                          Leftovers left, const int64_t* split, int64_t* table) {
  __shared__ uint64_t key[kTile];
  __shared__ LightItem light[kTile];
  __shared__ uint32_t heavy[kTile];
  if (*bad) return;
  const int64_t tile = blockIdx.x / 2;
  const Section s = section_at(rowptr, tile_row, left, tile, static_cast<int>(blockIdx.x % 2), edges);
  if (s.row < 0) return;
  const MergeSlice whole = leftover_row(left, rowptr, s.row);
  const int64_t steps = whole.lights + whole.heavies;
  const int64_t n0 = s.k * kTile;
  const int64_t n1 = n0 + kTile < steps ? n0 + kTile : steps;
  const int64_t i0 = split[blockIdx.x];
  // The next section is slot (first tile + k + 1, 0).
  const int64_t i1 = n1 < steps ? split[2 * (rowptr[s.row] / kTile + s.k + 1)] : whole.lights;
  alias::pack_section<kThreads, kItems>(whole, n0, n1, i0, i1, key, light, heavy, table + rowptr[s.row]);
}

template <typename scalar_t>
void build(const scalar_t* w, const int64_t* rowptr, int64_t nodes, int64_t edges, int64_t* table,
           const at::TensorOptions& opts, const int* bad, uint32_t* status, cudaStream_t stream) {
  std::vector<at::Tensor> keep;
  const int64_t tiles = ceil_div(edges, kTile);
  TORCH_CHECK(tiles < (int64_t{1} << 30), "csr_alias_table: too many edges for one call (", edges, ")");
  auto* tile_row = scratch<int64_t>(keep, opts, 2 * tiles);
  tile_rows_kernel<<<ceil_div(tiles, kThreads), kThreads, 0, stream>>>(rowptr, nodes, edges, tiles, bad, tile_row);
  C10_CUDA_KERNEL_LAUNCH_CHECK();

  auto* row_sum = scratch<double>(keep, opts, nodes);
  auto* part = scratch<double>(keep, opts, 2 * tiles);
  sums_kernel<scalar_t><<<tiles, kThreads, 0, stream>>>(w, rowptr, tile_row, edges, bad, row_sum, part, status);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  crossing_sums_kernel<<<ceil_div(tiles, kThreads), kThreads, 0, stream>>>(rowptr, tile_row, tiles, edges, bad,
                                                                             part, row_sum, status);
  C10_CUDA_KERNEL_LAUNCH_CHECK();

  const Leftovers left{scratch<LightItem>(keep, opts, edges), scratch<uint64_t>(keep, opts, edges),
                       scratch<uint32_t>(keep, opts, edges),  scratch<uint64_t>(keep, opts, edges),
                       scratch<int64_t>(keep, opts, nodes),   scratch<int64_t>(keep, opts, nodes),
                       scratch<uint64_t>(keep, opts, nodes)};
  size_t state_bytes = 0;
  C10_CUDA_CHECK(TileState::AllocationSize(static_cast<int>(tiles), state_bytes));
  TileState tile_state;
  C10_CUDA_CHECK(tile_state.Init(static_cast<int>(tiles), scratch<char>(keep, opts, state_bytes), state_bytes));
  alias::init_tile_state_kernel<<<ceil_div(tiles + 32, kThreads), kThreads, 0, stream>>>(tile_state, static_cast<int>(tiles));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  constexpr size_t smem = sizeof(PackStaging);
  C10_CUDA_CHECK(cudaFuncSetAttribute(pack_kernel<scalar_t>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(smem)));
  prefer_shared_memory(pack_kernel<scalar_t>);
  pack_kernel<scalar_t><<<tiles, kThreads, smem, stream>>>(w, rowptr, tile_row, edges, bad, row_sum, tile_state,
                                                           left, table);
  C10_CUDA_KERNEL_LAUNCH_CHECK();

  auto* split = scratch<int64_t>(keep, opts, 2 * tiles);
  split_kernel<<<ceil_div(2 * tiles, kThreads), kThreads, 0, stream>>>(rowptr, tile_row, tiles, edges, bad, left,
                                                                      split);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  pack_leftovers_kernel<<<2 * tiles, kThreads, 0, stream>>>(rowptr, tile_row, edges, bad, left, split, table);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

at::Tensor csr_alias_table_cuda(const at::Tensor& rowptr_in, const at::Tensor& weight_in, bool validate) {
  constexpr const char* op = "csr_alias_table";
  check_rowptr(op, rowptr_in);
  check_build_weight(op, weight_in, rowptr_in);
  const c10::cuda::CUDAGuard guard(rowptr_in.device());
  const at::Tensor rowptr = rowptr_in.contiguous();
  const at::Tensor weight = weight_in.contiguous();
  const int64_t nodes = rowptr.numel() - 1;
  const int64_t edges = weight.numel();
  at::Tensor table = at::empty({edges}, rowptr.options());
  const auto stream = at::cuda::getCurrentCUDAStream();
  if (validate) check_host_read_allowed(rowptr, op, "the value checks");
  // Two words: the flags (read back when validating) and the bad-rowptr word the kernels read.
  at::Tensor words = at::empty({2}, rowptr.options().dtype(at::kInt));
  C10_CUDA_CHECK(cudaMemsetAsync(words.mutable_data_ptr<int>(), 0, 2 * sizeof(int), stream));
  uint32_t* status = reinterpret_cast<uint32_t*>(words.mutable_data_ptr<int>());
  const int* bad = words.const_data_ptr<int>() + 1;
  const int64_t* rp = rowptr.const_data_ptr<int64_t>();
  check_rowptr_kernel<<<ceil_div(nodes + 1, kThreads), kThreads, 0, stream>>>(rp, nodes, edges, status,
                                                                             words.mutable_data_ptr<int>() + 1);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  if (edges > 0 && nodes > 0) {
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, weight.scalar_type(), "csr_alias_table_cuda", [&] {
      build(weight.const_data_ptr<scalar_t>(), rp, nodes, edges, table.mutable_data_ptr<int64_t>(), rowptr.options(),
            bad, status, stream);
    });
  }
  if (validate) raise_graph_flags(static_cast<uint32_t>(words[0].item<int>()), op);
  return table;
}

}  // namespace

TORCH_LIBRARY_IMPL(wrs, CUDA, m) { m.impl("csr_alias_table", &csr_alias_table_cuda); }

}  // namespace wrs::graph
