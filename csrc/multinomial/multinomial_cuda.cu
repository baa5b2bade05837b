// torch.multinomial on CUDA in one pass over the input where the shape allows:
//
// With replacement (up to 64 samples per row): each row is quantized exactly as alias
// tables do (Q_i = round(w_i / W * N * 2^32), so both paths sample the same law), its
// integers are scanned, and each sample is an inverse-CDF lookup on them. Integer
// prefixes make every lane's (thread's) range exact: a draw lands in exactly one, and a
// zero weight (Q = 0) owns none. The items may sit in any order along the CDF (the law
// does not depend on it), so rows up to 1,024 items are read by one warp each in
// coalesced stripes (prefetched into registers, worked on in shared memory); rows up to
// 2,304 by one block each.
//
// Without replacement (up to 32 samples per row): keys w_i / E_i, E_i ~ Exp(1), and the
// num_samples largest in decreasing order (Efraimidis-Spirakis: the order of sequential
// draws without replacement). Each warp streams its share of a row and keeps its top
// keys across its 32 lanes, admitting only keys above the current k-th (a ballot; after
// the first few hundred items almost none pass); the warps of a row then merge.
//
// Values are checked in the same pass; one 4-byte read back raises the errors. Other
// shapes use the composite (alias tables, or exponential keys and torch.topk).
#include "alias/alias.h"
#include "common/cuda_utils.cuh"
#include "common/philox_cuda.cuh"
#include "common/uniform.h"
#include "multinomial/multinomial.h"

#include <ATen/Dispatch.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAGuard.h>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <torch/library.h>

namespace wrs::multinomial {
namespace {

// ---- one block per row, with replacement (rows of 1,025 to 2,304 items) ------------------

constexpr int kItems = 9;                   // items per thread (odd: see alias_cuda.cu)
constexpr int64_t kMaxRow = 256 * kItems;   // longest row of the one-pass kernels
constexpr int64_t kMaxSamples = 64;         // most samples per row it draws

template <typename scalar_t, int THREADS>
__global__ void __launch_bounds__(THREADS)
    rows_kernel(const scalar_t* w, int64_t n, int64_t k, at::PhiloxCudaState philox, int64_t* out,
                uint32_t* status) {
  __shared__ union {
    typename cub::BlockReduce<double, THREADS>::TempStorage reduce;
    typename cub::BlockScan<uint64_t, THREADS, cub::BLOCK_SCAN_WARP_SCANS>::TempStorage scan;
  } tmp;
  __shared__ alias::RowScale scale;
  __shared__ uint64_t target[kMaxSamples];
  const int64_t row = blockIdx.x;
  double x[kItems];
  double mine = 0;
  uint32_t flags = 0;
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    const int64_t i = threadIdx.x * kItems + j;
    x[j] = i < n ? static_cast<double>(w[row * n + i]) : 0.0;
    flags |= weight_flags(x[j]);
    mine += x[j];
  }
  if (flags) atomicOr(status, flags);
  const double sum = cub::BlockReduce<double, THREADS>(tmp.reduce).Sum(mine);
  if (threadIdx.x == 0) {
    const uint32_t problems = row_flags(sum, 0);
    if (problems) atomicOr(status, problems);
    scale = alias::row_scale(sum, n);
  }
  __syncthreads();
  uint64_t q[kItems];
  uint64_t units = 0;
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    q[j] = alias::quantize(x[j], scale, n);
    units += q[j];
  }
  uint64_t before, total;
  cub::BlockScan<uint64_t, THREADS, cub::BLOCK_SCAN_WARP_SCANS>(tmp.scan).ExclusiveSum(units, before, total);
  // Sample s: 64 random bits of its own Philox block; the high half of r * total is a
  // uniform point in [0, total) (no modulo bias).
  const PhiloxSeed seed = philox_seed(philox);
  for (int64_t s = threadIdx.x; s < k; s += THREADS) {
    const uint4 r = philox_block_cuda(seed, static_cast<uint64_t>(row * k + s));
    target[s] = mul_hi64((static_cast<uint64_t>(r.y) << 32) | r.x, total);
  }
  __syncthreads();
  for (int64_t s = 0; s < k; ++s) {
    const uint64_t v = target[s];
    if (v < before || v >= before + units) continue;  // another thread's range
    uint64_t end = before;
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      end += q[j];
      if (v < end) {
        out[row * k + s] = threadIdx.x * kItems + j;
        break;
      }
    }
  }
}

// ---- one warp per row, with replacement -------------------------------------------------

constexpr int kWarp = 32;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kWarpRowThreads = 256;
constexpr int kWarpsPerBlock = kWarpRowThreads / kWarp;
constexpr int64_t kMaxWarpRow = kWarp * 32;  // longest row one warp holds (32 items per lane)

// Weights as held in registers: float unless they are doubles (exact either way).
template <typename scalar_t>
using held_t = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;

// Sum over a row's LANES lanes, the same on each: the butterfly leaves lanes with
// differently rounded float64 sums, and every lane must quantize with the same scale,
// so the row's first lane's is broadcast.
template <int LANES>
__device__ inline double row_sum(double v) {
  for (int offset = LANES / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(kFullMask, v, offset, LANES);
  return __shfl_sync(kFullMask, v, 0, LANES);
}

template <int LANES>
__device__ inline uint32_t row_or(uint32_t v) {
  for (int offset = LANES / 2; offset > 0; offset /= 2) v |= __shfl_xor_sync(kFullMask, v, offset, LANES);
  return v;
}

// A row is served by LANES lanes (8, 16 or 32), so a warp serves 32 / LANES rows at once
// and short rows share the per-row work (reductions, scale, Philox) of a warp
// instruction. Lane l of a row holds items j * LANES + l, j < ITEMS. Each warp takes
// row groups g, g + W, ... (W warps in the grid); the next group's items are loaded into
// registers while the warp works on the current one from shared memory, so the loads of
// one overlap the reduce / scan / search chain of the other.
template <typename scalar_t, int LANES, int ITEMS>
__global__ void __launch_bounds__(kWarpRowThreads)
    warp_rows_kernel(const scalar_t* w, int64_t rows, int64_t n, int64_t k, at::PhiloxCudaState philox,
                     int64_t* out, uint32_t* status) {
  constexpr int kRowsPerWarp = kWarp / LANES;
  // Each row's slots padded by LANES: with ITEMS + 1 odd, the rows of a warp start in
  // different banks, so slot j of every lane of the warp is conflict-free.
  constexpr int kRowSlots = LANES * (ITEMS + 1);
  __shared__ held_t<scalar_t> staged[kWarpsPerBlock][kRowsPerWarp * kRowSlots];
  const int lane = threadIdx.x % kWarp;
  const int l = lane % LANES;
  held_t<scalar_t>* x = staged[threadIdx.x / kWarp] + (lane / LANES) * kRowSlots + l;  // x[j * LANES]
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  const PhiloxSeed seed = philox_seed(philox);
  scalar_t next[ITEMS];
  auto fetch = [&](int64_t group) {
    const int64_t row = group * kRowsPerWarp + lane / LANES;
#pragma unroll
    for (int j = 0; j < ITEMS; ++j) {
      const int64_t i = j * LANES + l;
      next[j] = row < rows && i < n ? w[row * n + i] : scalar_t(0);
    }
  };
  int64_t group = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + threadIdx.x / kWarp;
  fetch(group);
  for (; group * kRowsPerWarp < rows; group += warps) {  // warp-uniform
    const int64_t row = group * kRowsPerWarp + lane / LANES;
    const bool valid = row < rows;
    double mine = 0;
    uint32_t flags = 0;
#pragma unroll
    for (int j = 0; j < ITEMS; ++j) {
      const held_t<scalar_t> v = static_cast<held_t<scalar_t>>(next[j]);
      x[j * LANES] = v;  // the lane's own slots: only it reads them back
      flags |= weight_flags(v);
      mine += v;
    }
    fetch(group + warps);
    const double sum = row_sum<LANES>(mine);
    flags = row_flags(sum, row_or<LANES>(flags));
    if (valid && l == 0 && flags) atomicOr(status, flags);
    const alias::RowScale scale = alias::row_scale(sum, n);
    uint64_t units = 0;
#pragma unroll
    for (int j = 0; j < ITEMS; ++j) units += alias::quantize(x[j * LANES], scale, n);
    uint64_t through = units;  // inclusive scan over the row's lanes
    for (int offset = 1; offset < LANES; offset *= 2) {
      const uint64_t y = __shfl_up_sync(kFullMask, through, offset, LANES);
      if (l >= offset) through += y;
    }
    const uint64_t total = __shfl_sync(kFullMask, through, LANES - 1, LANES);
    const uint64_t before = through - units;
    // Sample s: 64 bits of Philox block row * k + s; the high half of r * total is a
    // uniform point of [0, total) (no modulo bias). Lane t of the row draws sample s0 + t.
    for (int64_t s0 = 0; s0 < k; s0 += LANES) {
      uint64_t point = 0;
      if (valid && s0 + l < k) {
        const uint4 r = philox_block_cuda(seed, static_cast<uint64_t>(row * k + s0 + l));
        point = mul_hi64((static_cast<uint64_t>(r.y) << 32) | r.x, total);
      }
      const int64_t count = k - s0 < LANES ? k - s0 : LANES;
      for (int t = 0; t < count; ++t) {
        const uint64_t v = __shfl_sync(kFullMask, point, t, LANES);
        if (!valid || v < before || v >= before + units) continue;  // another lane's range
        uint64_t end = before;
        for (int j = 0; j < ITEMS; ++j) {
          end += alias::quantize(x[j * LANES], scale, n);
          if (v < end) {
            out[row * k + s0 + t] = j * LANES + l;
            break;
          }
        }
      }
    }
  }
}

// ---- without replacement: exponential keys, warp-held top k ----------------------------

constexpr int64_t kMaxTopK = kWarp;

// The warp's best keys so far, lane j holding the j-th largest (key, index). Offers each
// lane's candidate; only those above the current k-th are inserted, one at a time.
__device__ inline void offer(double& top_key, int64_t& top_index, double key, int64_t index, int k, int lane) {
  double kth = __shfl_sync(kFullMask, top_key, k - 1);
  unsigned pending = __ballot_sync(kFullMask, key > kth);
  while (pending) {
    const int src = __ffs(pending) - 1;
    pending &= pending - 1;
    const double v = __shfl_sync(kFullMask, key, src);
    const int64_t vi = __shfl_sync(kFullMask, index, src);
    if (!(v > kth)) continue;  // the k-th rose since the ballot (same on every lane)
    const int pos = __popc(__ballot_sync(kFullMask, top_key >= v));
    const double up_key = __shfl_up_sync(kFullMask, top_key, 1);
    const int64_t up_index = __shfl_up_sync(kFullMask, top_index, 1);
    if (lane == pos) {
      top_key = v;
      top_index = vi;
    } else if (lane > pos) {
      top_key = up_key;
      top_index = up_index;
    }
    kth = __shfl_sync(kFullMask, top_key, k - 1);
  }
}

// `warps_per_row` warps (1, 2, 4 or 8) share a row, each streaming a contiguous run of
// its item pairs; pair p of row r uses Philox block r * pairs + p (one uniform per item),
// so the keys do not depend on how the row is split.
template <typename scalar_t>
__global__ void __launch_bounds__(kWarpRowThreads)
    topk_rows_kernel(const scalar_t* w, int64_t rows, int64_t n, int64_t k, int warps_per_row,
                     at::PhiloxCudaState philox, int64_t* out, uint32_t* status) {
  __shared__ double cand_key[kWarpsPerBlock][kWarp];
  __shared__ int64_t cand_index[kWarpsPerBlock][kWarp];
  __shared__ unsigned long long row_nonzero[kWarpsPerBlock];
  __shared__ uint32_t row_problems[kWarpsPerBlock];
  const int warp = threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  const int local_row = warp / warps_per_row;
  const int part = warp % warps_per_row;
  const int64_t row = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock / warps_per_row) + local_row;
  if (threadIdx.x < kWarpsPerBlock) {
    row_nonzero[threadIdx.x] = 0;
    row_problems[threadIdx.x] = 0;
  }
  __syncthreads();
  double top_key = -1;  // below every key (keys are >= 0)
  int64_t top_index = 0;
  if (row < rows) {
    const scalar_t* row_w = w + row * n;
    const int64_t pairs = (n + 1) / 2;
    const int64_t per_warp = (pairs + warps_per_row - 1) / warps_per_row;
    const int64_t p_begin = part * per_warp;
    const int64_t p_end = min(pairs, p_begin + per_warp);
    const PhiloxSeed seed = philox_seed(philox);
    uint32_t flags = 0;
    unsigned long long nonzero = 0;
    for (int64_t base = p_begin; base < p_end; base += kWarp) {
      const int64_t p = base + lane;
      double key[2] = {-2, -2};  // -2: no item (below the initial -1, never admitted)
      if (p < p_end) {
        const uint4 r = philox_block_cuda(seed, static_cast<uint64_t>(row * pairs + p));
        const uint32_t bits[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          if (2 * p + h >= n) break;
          const double x = static_cast<double>(row_w[2 * p + h]);
          flags |= weight_flags(x);
          nonzero += x > 0;
          key[h] = x > 0 ? x / -log(open_uniform(bits[2 * h], bits[2 * h + 1])) : 0.0;
        }
      }
      offer(top_key, top_index, key[0], 2 * p, static_cast<int>(k), lane);
      offer(top_key, top_index, key[1], 2 * p + 1, static_cast<int>(k), lane);
    }
    flags = __reduce_or_sync(kFullMask, flags);
    for (int offset = kWarp / 2; offset > 0; offset /= 2) nonzero += __shfl_xor_sync(kFullMask, nonzero, offset);
    if (lane == 0) {
      atomicAdd(&row_nonzero[local_row], nonzero);
      atomicOr(&row_problems[local_row], flags);
    }
    cand_key[warp][lane] = top_key;
    cand_index[warp][lane] = top_index;
  }
  __syncthreads();
  if (row >= rows || part != 0) return;
  if (warps_per_row > 1) {  // the row's first warp merges the others' lists into its own
    for (int c = 1; c < warps_per_row; ++c) {
      offer(top_key, top_index, cand_key[warp + c][lane], cand_index[warp + c][lane], static_cast<int>(k), lane);
    }
  }
  if (lane < k) out[row * k + lane] = top_index;
  if (lane == 0) {
    uint32_t problems = row_problems[local_row];
    if (row_nonzero[local_row] == 0) problems |= kRowZeroSum;
    if (row_nonzero[local_row] < static_cast<unsigned long long>(k)) problems |= kTooFewNonzero;
    if (problems) atomicOr(status, problems);
  }
}

// ---- dispatch ---------------------------------------------------------------------------

template <typename scalar_t, int LANES, int ITEMS>
void launch_warp_rows(const scalar_t* w, int64_t rows, int64_t n, int64_t k, const at::PhiloxCudaState& philox,
                      int64_t* out, uint32_t* status, cudaStream_t stream) {
  const int blocks = grid_for(ceil_div(rows, kWarp / LANES) * kWarp, kWarpRowThreads);
  warp_rows_kernel<scalar_t, LANES, ITEMS><<<blocks, kWarpRowThreads, 0, stream>>>(w, rows, n, k, philox, out, status);
}

// Lanes per row and items per lane by row length: about 4 to 16 items per lane. A block
// per row (9 items per thread) serves rows past 1,024 items (512 in float64, whose 32
// items per lane would need 64 KB of shared memory per block) and rows past 256 items
// with more than 4 samples, whose search a single lane would walk too far.
template <typename scalar_t>
void launch_with_replacement(const scalar_t* w, int64_t rows, int64_t n, int64_t k,
                             const at::PhiloxCudaState& philox, int64_t* out, uint32_t* status, cudaStream_t stream) {
  constexpr bool kFloat64 = sizeof(held_t<scalar_t>) == 8;
  if (n <= 32) {
    launch_warp_rows<scalar_t, 8, 4>(w, rows, n, k, philox, out, status, stream);
  } else if (n <= 64) {
    launch_warp_rows<scalar_t, 8, 8>(w, rows, n, k, philox, out, status, stream);
  } else if (n <= 128) {
    launch_warp_rows<scalar_t, 8, 16>(w, rows, n, k, philox, out, status, stream);
  } else if (n <= 256) {
    launch_warp_rows<scalar_t, 16, 16>(w, rows, n, k, philox, out, status, stream);
  } else if (n <= 512 && k <= 4) {
    launch_warp_rows<scalar_t, 32, 16>(w, rows, n, k, philox, out, status, stream);
  } else if (n <= kMaxWarpRow && k <= 4 && !kFloat64) {
    if constexpr (!kFloat64) launch_warp_rows<scalar_t, 32, 32>(w, rows, n, k, philox, out, status, stream);
  } else if (n <= 128 * kItems) {
    rows_kernel<scalar_t, 128><<<rows, 128, 0, stream>>>(w, n, k, philox, out, status);
  } else {
    rows_kernel<scalar_t, 256><<<rows, 256, 0, stream>>>(w, n, k, philox, out, status);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// Warps per row without replacement: about 2,048 items or more each, at most 8.
int topk_warps_per_row(int64_t n) {
  int warps = 1;
  while (warps < kWarpsPerBlock && n > 2048 * warps) warps *= 2;
  return warps;
}

// The fused kernels serve these shapes; the composite the rest (long rows with
// replacement, many samples, or too few rows to fill the GPU without replacement).
bool fused_serves(int64_t rows, int64_t n, int64_t k, bool replacement) {
  if (replacement) return n <= kMaxRow && k <= kMaxSamples;
  return k <= kMaxTopK && (n <= 4096 || rows * topk_warps_per_row(n) >= 1024);
}

at::Tensor multinomial_cuda(const at::Tensor& input, int64_t num_samples, bool replacement,
                            std::optional<at::Generator> generator) {
  check_shape(input, num_samples, replacement);
  const c10::cuda::CUDAGuard guard(input.device());
  const auto stream = at::cuda::getCurrentCUDAStream();
  TORCH_CHECK(!stream_is_capturing(stream), kOp,
              ": checks the input's values on the host, which CUDA-graph capture forbids; inside "
              "graphs build tables with alias_table(..., validate=False) and sample with alias_sample");
  const int64_t n = input.size(-1);
  const int64_t rows = input.numel() / n;
  if (!fused_serves(rows, n, num_samples, replacement)) {
    return multinomial_composite(input, num_samples, replacement, generator);
  }
  const at::Tensor w = input.contiguous();
  auto shape = w.sizes().vec();
  shape.back() = num_samples;
  at::Tensor out = at::empty(shape, w.options().dtype(at::kLong));
  if (rows == 0) return out;
  const at::Tensor status = at::zeros({1}, w.options().dtype(at::kInt));
  auto* status_ptr = reinterpret_cast<uint32_t*>(status.data_ptr<int>());
  const auto philox = cuda_philox_state(generator, w.device().index(), 4);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, w.scalar_type(), "multinomial_cuda", [&] {
    const scalar_t* data = w.const_data_ptr<scalar_t>();
    int64_t* o = out.mutable_data_ptr<int64_t>();
    if (replacement) {
      launch_with_replacement(data, rows, n, num_samples, philox, o, status_ptr, stream);
    } else {
      const int warps = topk_warps_per_row(n);
      topk_rows_kernel<scalar_t><<<ceil_div(rows, kWarpsPerBlock / warps), kWarpRowThreads, 0, stream>>>(
          data, rows, n, num_samples, warps, philox, o, status_ptr);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
  });
  // One read back for every check; the output is ours and dropped on error.
  raise_value_flags(static_cast<uint32_t>(status.item<int>()), num_samples);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(wrs, CUDA, m) {
  m.impl("multinomial", &multinomial_cuda);
}

}  // namespace wrs::multinomial
