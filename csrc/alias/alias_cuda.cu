// Alias tables on CUDA. The build runs entirely on the device; only validate=True reads
// one status word back to raise a RuntimeError.
//
// Rows of up to kSmallRow items (LDA-style batches: one table per word over K topics)
// are built by one block each, in shared memory, in a single kernel: sum, quantize,
// block scan, partition, merge. Longer rows go through PSA+ in passes over tiles:
//   1. per-tile float64 sums and value checks, reduced per row (CUB),
//   2. one pass: each tile partitions itself in shared memory, packs greedily what it
//      can (PSA+, see greedy_stop in alias.h), learns what the tiles before it in its
//      row left over through CUB's decoupled look-back, and writes its finished buckets
//      and its leftovers, with their merge keys, to light and heavy arrays (so the
//      global pack makes no indirect loads),
//   3. split: one thread per pack section finds its start on the leftovers' merge path,
//   4. pack: each block loads its section's lights and heavies into shared memory with
//      coalesced loads and its threads merge sub-ranges of it.
#include "alias/alias_cuda.h"
#include "alias/alias_ops.h"
#include "alias/psa_cuda.cuh"
#include "common/cuda_utils.cuh"
#include "common/row_sums.cuh"
#include "common/philox_cuda.cuh"
#include "common/status_word.h"

#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAGuard.h>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <torch/library.h>

namespace wrs::alias {
namespace {

constexpr int kThreads = 256;
// Items (and merge steps) per thread. Odd on purpose: a thread's shared-memory position
// is ~kItems * 8 bytes past its neighbour's, and with 9 (72 bytes) 16 neighbours fall in
// 16 different 8-byte banks; with 8 (64 bytes) every other one collides (ncu: 12.5-way).
constexpr int kItems = 9;
constexpr int64_t kTile = kThreads * kItems;          // partition tile of long rows
constexpr int64_t kSection = kThreads * kItems;       // merge steps per pack block
constexpr int64_t kSmallRow = kThreads * kItems;      // rows up to this: one block each
struct AddClassPrefix {
  __host__ __device__ ClassPrefix operator()(const ClassPrefix& a, const ClassPrefix& b) const {
    return a + b;
  }
};

// Tile `tile` of a [rows, n] array cut into tiles of `size` items that never cross rows.
struct TileOf {
  int64_t row, first, count;  // row, first item (row-local), items in the tile
  __device__ TileOf(int64_t tile, int64_t n, int64_t tiles_per_row, int64_t size) {
    row = tile / tiles_per_row;
    first = (tile - row * tiles_per_row) * size;
    count = n - first < size ? n - first : size;
  }
};

// Shared memory of one block that partitions up to kThreads * kItems items: lights in
// light[0, L) with keys key[0, L), heavies in heavy[0, H) with keys key[L, L + H).
template <int THREADS>
using BlockClassScan = cub::BlockScan<ClassPrefix, THREADS, cub::BLOCK_SCAN_WARP_SCANS>;

template <int THREADS>
struct Staging {
  union {
    typename BlockClassScan<THREADS>::TempStorage scan;
    typename cub::BlockReduce<RowSum, THREADS>::TempStorage reduce;
  };
  uint64_t key[THREADS * kItems];
  LightItem light[THREADS * kItems];
  uint32_t heavy[THREADS * kItems];
};

// Classifies a block's items (thread t holds items t * kItems + k, blocked, so the scan
// keeps index order), scans their class prefixes and stages them in shared memory.
// `before` is what precedes the first item in its row. Returns the block's total.
template <int THREADS>
__device__ ClassPrefix stage_items(const uint64_t (&q)[kItems], int64_t count, int64_t first,
                                   const ClassPrefix& before, Staging<THREADS>& st) {
  // Classes are recomputed rather than kept: eight 32-byte prefixes cost 64 registers.
  auto class_at = [&](int k) {
    return threadIdx.x * kItems + k < count ? class_of(q[k]) : ClassPrefix{0, 0, 0, 0};
  };
  ClassPrefix mine{0, 0, 0, 0};
#pragma unroll
  for (int k = 0; k < kItems; ++k) mine = mine + class_at(k);
  ClassPrefix total;
  BlockClassScan<THREADS>(st.scan).ExclusiveScan(mine, mine, ClassPrefix{0, 0, 0, 0}, AddClassPrefix{}, total);
#pragma unroll
  for (int k = 0; k < kItems; ++k) {
    const ClassPrefix cls = class_at(k);
    const uint32_t index = static_cast<uint32_t>(first + threadIdx.x * kItems + k);
    if (cls.lights) {
      st.light[mine.lights] = LightItem{index, static_cast<uint32_t>(q[k])};
      st.key[mine.lights] = before.deficit + mine.deficit;
    } else if (cls.heavies) {
      st.heavy[mine.heavies] = index;
      st.key[total.lights + mine.heavies] = before.excess + mine.excess + cls.excess;
    }
    mine = mine + cls;
  }
  __syncthreads();
  return total;
}

template <typename scalar_t>
__device__ void load_blocked(const scalar_t* p, int64_t count, double (&x)[kItems]) {
#pragma unroll
  for (int k = 0; k < kItems; ++k) {
    const int64_t i = threadIdx.x * kItems + k;
    x[k] = i < count ? static_cast<double>(p[i]) : 0.0;
  }
}

// ---- rows of up to kSmallRow items: one block per row ------------------------------------

template <typename scalar_t, int THREADS>
__global__ void __launch_bounds__(THREADS)
    small_rows_kernel(const scalar_t* w, int64_t n, int64_t* table, uint32_t* status) {
  __shared__ Staging<THREADS> st;
  __shared__ RowScale scale;
  const int64_t row = blockIdx.x;
  double x[kItems];
  load_blocked(w + row * n, n, x);
  RowSum mine{0.0, 0u};
#pragma unroll
  for (int k = 0; k < kItems; ++k) mine = AddRowSum{}(mine, RowSum{x[k], weight_flags(x[k])});
  const RowSum total = cub::BlockReduce<RowSum, THREADS>(st.reduce).Reduce(mine, AddRowSum{});
  if (threadIdx.x == 0) {
    const uint32_t flags = row_flags(total.sum, total.flags);
    if (flags) atomicOr(status, flags);
    scale = row_scale(total.sum, n);
  }
  __syncthreads();
  uint64_t q[kItems];
#pragma unroll
  for (int k = 0; k < kItems; ++k) q[k] = quantize(x[k], scale, n);
  const ClassPrefix sums = stage_items<THREADS>(q, n, 0, ClassPrefix{0, 0, 0, 0}, st);
  const MergeSlice slice = whole_row(st.light, st.key, st.heavy, st.key + sums.lights, sums.lights,
                                     sums.heavies, sums.deficit);
  const int64_t begin = threadIdx.x * kItems;
  if (begin < n) pack_merge_steps(slice, begin, begin + kItems < n ? begin + kItems : n, table + row * n);
}

template <typename scalar_t>
void build_small_rows(const scalar_t* w, int64_t rows, int64_t n, int64_t* table, uint32_t* status,
                      cudaStream_t stream) {
  // The fewest threads whose kItems-per-thread capacity holds a row.
  if (n <= 32 * kItems) {
    small_rows_kernel<scalar_t, 32><<<rows, 32, 0, stream>>>(w, n, table, status);
  } else if (n <= 64 * kItems) {
    small_rows_kernel<scalar_t, 64><<<rows, 64, 0, stream>>>(w, n, table, status);
  } else if (n <= 128 * kItems) {
    small_rows_kernel<scalar_t, 128><<<rows, 128, 0, stream>>>(w, n, table, status);
  } else {
    small_rows_kernel<scalar_t, 256><<<rows, 256, 0, stream>>>(w, n, table, status);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// ---- long rows: PSA in passes over tiles -------------------------------------------------

__global__ void row_scale_kernel(const RowSum* sums, int64_t rows, int64_t n, RowScale* scale,
                                 uint32_t* status) {
  const int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (b >= rows) return;
  const uint32_t flags = row_flags(sums[b].sum, sums[b].flags);
  if (flags) atomicOr(status, flags);
  scale[b] = row_scale(sums[b].sum, n);
}

// Where a row's leftover items live: each row owns n slots of each array.
struct RowArrays {
  LightItem* light;
  uint64_t* deficit_before;
  uint32_t* heavy;
  uint64_t* excess_through;
  int64_t* lights;          // per row
  int64_t* heavies;         // per row
  uint64_t* deficit_total;  // per row
};

// PSA+ on one tile: pack what it can, then place its leftovers after what the tiles
// before it in its row left over.
template <typename scalar_t>
__global__ void __launch_bounds__(kThreads, 4)  // 4 blocks per SM: registers <= 64
    greedy_tile_kernel(const scalar_t* w, int64_t n, int64_t tiles_per_row, const RowScale* scale,
                       TileState tile_state, RowArrays a, int64_t* table) {
  __shared__ Staging<kThreads> st;
  __shared__ typename TileLookback::TempStorage lookback;
  __shared__ ClassPrefix tile_before;
  const TileOf t(blockIdx.x, n, tiles_per_row, kTile);
  double x[kItems];
  load_blocked(w + t.row * n + t.first, t.count, x);
  const RowScale rs = scale[t.row];
  uint64_t q[kItems];
#pragma unroll
  for (int k = 0; k < kItems; ++k) q[k] = quantize(x[k], rs, n);
  const ClassPrefix sums = stage_items<kThreads>(q, t.count, t.first, ClassPrefix{0, 0, 0, 0}, st);
  const uint64_t* deficit = st.key;
  const uint64_t* excess = st.key + sums.lights;
  const GreedyStop stop = greedy_stop(deficit, sums.lights, sums.deficit, excess, sums.heavies);
  const ClassPrefix left = leftover_totals(stop, sums.lights, sums.deficit, excess, sums.heavies);
  const RowPrefix mine{left, t.first == 0};
  if (blockIdx.x == 0) {
    if (threadIdx.x == 0) {
      tile_state.SetInclusive(0, mine);
      tile_before = ClassPrefix{0, 0, 0, 0};
    }
  } else if (threadIdx.x < 32) {
    TileLookback op(tile_state, lookback, AddWithinRow{}, blockIdx.x);
    const RowPrefix prior = op(mine);
    if (threadIdx.x == 0) tile_before = t.first == 0 ? ClassPrefix{0, 0, 0, 0} : prior.sum;
  }
  if (sums.heavies > 0) {  // the buckets this tile finishes
    const MergeSlice local = greedy_slice(st.light, deficit, st.heavy, excess, stop);
    const int64_t steps = stop.lights + stop.heavies;
    const int64_t begin = threadIdx.x * kItems;
    if (begin < steps) {
      pack_merge_steps(local, begin, begin + kItems < steps ? begin + kItems : steps, table + t.row * n);
    }
  }
  __syncthreads();
  const ClassPrefix before = tile_before;
  const int64_t light0 = t.row * n + before.lights;
  const int64_t heavy0 = t.row * n + before.heavies;
  for (int64_t r = threadIdx.x; r < left.lights; r += kThreads) {
    const Leftover l = leftover_light(r, stop, sums, st.light, deficit, st.heavy, before);
    a.light[light0 + r] = LightItem{l.index, l.mass};
    a.deficit_before[light0 + r] = l.key;
  }
  for (int64_t r = threadIdx.x; r < left.heavies; r += kThreads) {
    const Leftover h = leftover_heavy(r, stop, sums, st.heavy, excess, before);
    a.heavy[heavy0 + r] = h.index;
    a.excess_through[heavy0 + r] = h.key;
  }
  if (threadIdx.x == 0 && t.first + t.count == n) {
    a.lights[t.row] = before.lights + left.lights;
    a.heavies[t.row] = before.heavies + left.heavies;
    a.deficit_total[t.row] = before.deficit + left.deficit;
  }
}

__device__ inline MergeSlice row_in_global(const RowArrays& a, int64_t row, int64_t n) {
  const int64_t base = row * n;
  return whole_row(a.light + base, a.deficit_before + base, a.heavy + base, a.excess_through + base,
                   a.lights[row], a.heavies[row], a.deficit_total[row]);
}

// Lights before each section boundary k * kSection of each row (the splits of PSA).
__global__ void split_kernel(RowArrays a, int64_t rows, int64_t n, int64_t* split) {
  const int64_t per_row = (n + kSection - 1) / kSection + 1;
  const int64_t s = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (s >= rows * per_row) return;
  const int64_t row = s / per_row;
  const int64_t step = (s - row * per_row) * kSection;
  const int64_t steps = a.lights[row] + a.heavies[row];
  split[s] = merge_corank(row_in_global(a, row, n), step < steps ? step : steps);
}

__global__ void __launch_bounds__(kThreads)
    pack_kernel(RowArrays a, int64_t n, const int64_t* split, int64_t* table) {
  __shared__ uint64_t key[kSection];
  __shared__ LightItem light[kSection];
  __shared__ uint32_t heavy[kSection];
  const int64_t sections = (n + kSection - 1) / kSection;
  const int64_t row = blockIdx.x / sections;
  const int64_t section = blockIdx.x - row * sections;
  const MergeSlice whole = row_in_global(a, row, n);
  const int64_t steps = whole.lights + whole.heavies;  // the leftovers' merge
  const int64_t n0 = section * kSection;
  if (n0 >= steps) return;
  const int64_t n1 = n0 + kSection < steps ? n0 + kSection : steps;
  const int64_t i0 = split[row * (sections + 1) + section];
  const int64_t i1 = split[row * (sections + 1) + section + 1];
  pack_section<kThreads, kItems>(whole, n0, n1, i0, i1, key, light, heavy, table + row * n);
}

template <typename scalar_t>
void build_long_rows(const scalar_t* w, int64_t rows, int64_t n, int64_t* table, const at::TensorOptions& opts,
                     uint32_t* status, cudaStream_t stream) {
  std::vector<at::Tensor> keep;  // scratch from torch's caching allocator
  const int64_t tiles_per_row = (n + kTile - 1) / kTile;
  const int64_t tiles = rows * tiles_per_row;

  // 1. Row sums and value checks.
  const RowSum* row_sums = row_sums_cuda(w, rows, n, keep, opts, stream);
  auto* scale = scratch<RowScale>(keep, opts, rows);
  row_scale_kernel<<<ceil_div(rows, kThreads), kThreads, 0, stream>>>(row_sums, rows, n, scale, status);
  C10_CUDA_KERNEL_LAUNCH_CHECK();

  // 2. PSA+ per tile, one pass (decoupled look-back for the leftover offsets).
  const RowArrays arrays{scratch<LightItem>(keep, opts, rows * n), scratch<uint64_t>(keep, opts, rows * n),
                         scratch<uint32_t>(keep, opts, rows * n),  scratch<uint64_t>(keep, opts, rows * n),
                         scratch<int64_t>(keep, opts, rows),       scratch<int64_t>(keep, opts, rows),
                         scratch<uint64_t>(keep, opts, rows)};
  TORCH_CHECK(tiles < (int64_t(1) << 31), "alias_table: too many items for one call (", tiles, " tiles)");
  size_t state_bytes = 0;
  C10_CUDA_CHECK(TileState::AllocationSize(static_cast<int>(tiles), state_bytes));
  TileState tile_state;
  C10_CUDA_CHECK(tile_state.Init(static_cast<int>(tiles), scratch<char>(keep, opts, state_bytes), state_bytes));
  init_tile_state_kernel<<<ceil_div(tiles + 32, kThreads), kThreads, 0, stream>>>(tile_state, static_cast<int>(tiles));
  prefer_shared_memory(greedy_tile_kernel<scalar_t>);  // 4 blocks of 46 KB per SM
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  greedy_tile_kernel<scalar_t><<<tiles, kThreads, 0, stream>>>(w, n, tiles_per_row, scale, tile_state, arrays, table);
  C10_CUDA_KERNEL_LAUNCH_CHECK();

  // 3. Split and 4. pack the leftovers.
  const int64_t sections = (n + kSection - 1) / kSection;
  auto* split = scratch<int64_t>(keep, opts, rows * (sections + 1));
  split_kernel<<<ceil_div(rows * (sections + 1), kThreads), kThreads, 0, stream>>>(arrays, rows, n, split);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  pack_kernel<<<rows * sections, kThreads, 0, stream>>>(arrays, n, split, table);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace

void build_tables_cuda(const at::Tensor& w, const at::Tensor& table, uint32_t* status) {
  const int64_t n = w.size(-1);
  const int64_t rows = w.numel() / n;
  if (rows == 0) return;
  const auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, w.scalar_type(), "alias_table_cuda", [&] {
    const scalar_t* wp = w.const_data_ptr<scalar_t>();
    int64_t* tp = table.mutable_data_ptr<int64_t>();
    if (n <= kSmallRow) {
      build_small_rows(wp, rows, n, tp, status, stream);
    } else {
      build_long_rows(wp, rows, n, tp, w.options(), status, stream);
    }
  });
}

namespace {

at::Tensor alias_table_cuda(const at::Tensor& weights, bool validate) {
  check_weights(weights);
  const c10::cuda::CUDAGuard guard(weights.device());
  const at::Tensor w = weights.contiguous();
  at::Tensor table = at::empty(w.sizes(), w.options().dtype(at::kLong));
  if (table.numel() == 0) return table;
  const auto stream = at::cuda::getCurrentCUDAStream();
  if (!validate) {
    const at::Tensor status = zeroed_status_word(w.options(), stream);  // written, never read
    build_tables_cuda(w, table, status_bits(status));
    return table;
  }
  TORCH_CHECK(!stream_is_capturing(stream),
              "alias_table: validate=True reads the value checks back to the host, which "
              "CUDA-graph capture forbids; pass validate=False when capturing");
  StatusWord status(w.options(), stream);
  build_tables_cuda(w, table, status.bits());
  raise_weight_flags(status.read(), "alias_table", "weights");  // the table is ours and is dropped
  return table;
}

}  // namespace

TORCH_LIBRARY_IMPL(wrs, CUDA, m) { m.impl("alias_table", &alias_table_cuda); }

}  // namespace wrs::alias
