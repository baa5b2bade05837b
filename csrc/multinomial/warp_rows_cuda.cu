// With replacement, short rows (up to 1,024 items): 8, 16 or 32 lanes of a warp per row,
// so short rows share the per-row work (reductions, scale, Philox) of a warp instruction.
// Each row is quantized exactly as alias tables do (laws.h), its integers are scanned
// across the row's lanes, and each sample is an inverse-CDF lookup on them. The items may
// sit in any order along the CDF (the law does not depend on it), so lane l of a row
// holds items j * LANES + l (coalesced stripes), staged in shared memory, and (where it
// holds its units, below) the next row group's are prefetched into registers meanwhile.
#include "common/cuda_utils.cuh"
#include "common/philox_cuda.cuh"
#include "multinomial/kernels_cuda.cuh"

#include <ATen/Dispatch.h>
#include <c10/cuda/CUDAException.h>

#include <type_traits>

namespace wrs::multinomial {
namespace {

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / kWarp;
constexpr int64_t kMaxShortRowSamples = 1024;      // rows of up to 32 items: samples per row
constexpr int64_t kMaxShortRowDraws = int64_t{1} << 18;  // and per call
constexpr int64_t kOwnerSearches = 8;  // samples a row up to which owners search their registers

// Units held in registers or computed again (HOLD_UNITS below), by the call (H100, us a
// call, held / computed again, the same draws):
//
// | samples | items in  | held kernel's  | units    | why                                      |
// | a row   | the call  | blocks an SM   |          |                                          |
// | ------- | --------- | -------------- | -------- | ---------------------------------------- |
// | k <= 4  | >= 2^21   | 1 (over 128    | computed | more warps resident: 65,536 x 1,000      |
// |         |           | registers)     | again    | bfloat16, k = 1: 513 / 380, k = 4: 600 / |
// |         |           |                |          | 513; 1,048,576 x 100 float32, k = 1: 942 |
// |         |           |                |          | / 676; 65,536 x 300 float64: 281 / 179   |
// | other   |           |                | held     | two blocks already resident: 1,048,576 x |
// |         |           |                |          | 100 bfloat16, k = 1: 614 / 665; more     |
// |         |           |                |          | draws walk more (float32, k = 8: 1,479 / |
// |         |           |                |          | 1,543); a small call waits on the walk   |
// |         |           |                |          | (256 x 1,000 bfloat16, k = 1: 30 / 37)   |
constexpr int64_t kRecomputeRowSamples = 4;
constexpr int64_t kRecomputeFromItems = int64_t{1} << 21;

// Inputs as held in registers: float unless they are doubles (exact either way).
template <typename scalar_t>
using held_t = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;

// The row's summary over its LANES lanes, the same on each: the butterfly leaves lanes
// with differently rounded sums, and every lane must quantize with the same scale, so
// the row's first lane's is broadcast.
template <int LANES, typename Weights>
__device__ inline Summary row_summary(Summary s) {
  for (int offset = LANES / 2; offset > 0; offset /= 2) {
    const Summary other{__shfl_xor_sync(kFullMask, s.shift, offset, LANES),
                        __shfl_xor_sync(kFullMask, s.sum, offset, LANES),
                        __shfl_xor_sync(kFullMask, s.flags, offset, LANES)};
    s = Weights::combine(s, other);
  }
  return Summary{__shfl_sync(kFullMask, s.shift, 0, LANES), __shfl_sync(kFullMask, s.sum, 0, LANES), s.flags};
}

// Work item w is row group w / slices (32 / LANES rows) and slice w % slices of its
// samples; each warp takes items w, w + W, ... (W warps in the grid). A row's slices
// each reduce the row again (it is short, and in L1 or L2), so that many samples from
// few rows still spread over the whole GPU.
//
// HOLD_UNITS: each lane keeps its units in registers for its samples' searches, and the
// next row group's inputs are loaded while the warp works on this one. Without it (the
// table above) the owner lane computes its units again from the staged items, up to the
// point, and float and half rows are not prefetched: at 32 items a lane the held kernel
// takes 254 registers, one block an SM, the other 56-66 and no spills. Doubles keep the
// prefetch, which measured faster for them (65,536 x 500, k = 1: 215 against 308 us) and
// slower for narrower types (1,048,576 x 100 bfloat16: 695 against 624).
//
// Resident blocks asked of the compiler: with units held, its own choice (0: none); the
// other kernel without spills, at least 3 blocks an SM where rows are not prefetched.
template <typename scalar_t, bool HOLD_UNITS>
constexpr bool kPrefetchRows = HOLD_UNITS || std::is_same_v<scalar_t, double>;
template <typename scalar_t, bool HOLD_UNITS>
constexpr int kWarpRowsMinBlocks = HOLD_UNITS ? 0 : kPrefetchRows<scalar_t, HOLD_UNITS> ? 1 : 3;

template <typename scalar_t, typename Weights, int LANES, int ITEMS, bool HOLD_UNITS>
__global__ void __launch_bounds__(kThreads, kWarpRowsMinBlocks<scalar_t, HOLD_UNITS>)
    warp_rows_kernel(const scalar_t* x, int64_t rows, int64_t n, int64_t k, int64_t slices, Weights wts,
                     at::PhiloxCudaState philox, int64_t* out, uint32_t* status) {
  constexpr bool kPrefetch = kPrefetchRows<scalar_t, HOLD_UNITS>;
  constexpr int kRowsPerWarp = kWarp / LANES;
  // Each row's slots padded by LANES: with ITEMS + 1 odd, the rows of a warp start in
  // different banks, so slot j of every lane of the warp is conflict-free.
  constexpr int kRowSlots = LANES * (ITEMS + 1);
  __shared__ held_t<scalar_t> staged[kWarpsPerBlock][kRowsPerWarp * kRowSlots];
  const int lane = threadIdx.x % kWarp;
  const int l = lane % LANES;
  held_t<scalar_t>* v = staged[threadIdx.x / kWarp] + (lane / LANES) * kRowSlots + l;  // v[j * LANES]
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  const int64_t work = (rows + kRowsPerWarp - 1) / kRowsPerWarp * slices;
  const int64_t slice_samples = (k + slices - 1) / slices;
  const PhiloxSeed seed = philox_seed(philox);
  scalar_t next[kPrefetch ? ITEMS : 1];
  auto fetch = [&](int64_t group) {
    if constexpr (kPrefetch) {
      const int64_t row = group * kRowsPerWarp + lane / LANES;
#pragma unroll
      for (int j = 0; j < ITEMS; ++j) {
        const int64_t i = j * LANES + l;
        next[j] = row < rows && i < n ? x[row * n + i] : scalar_t(0);
      }
    }
  };
  int64_t w = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + threadIdx.x / kWarp;
  fetch(w / slices);
  for (; w < work; w += warps) {  // warp-uniform
    const int64_t group = w / slices;
    const int64_t s_begin = (w - group * slices) * slice_samples;
    const int64_t s_end = k < s_begin + slice_samples ? k : s_begin + slice_samples;
    const int64_t row = group * kRowsPerWarp + lane / LANES;
    const bool valid = row < rows;
    Summary mine = Weights::empty();
#pragma unroll
    for (int j = 0; j < ITEMS; ++j) {
      scalar_t xv;
      if constexpr (kPrefetch) {
        xv = next[j];
      } else {
        xv = valid && j * LANES + l < n ? x[row * n + j * LANES + l] : scalar_t(0);
      }
      const held_t<scalar_t> h = static_cast<held_t<scalar_t>>(xv);
      v[j * LANES] = h;  // the lane's own slots: only it reads them back
      if (j * LANES + l < n) mine = wts.add(mine, h);
    }
    fetch((w + warps) / slices);
    const Summary sum = row_summary<LANES, Weights>(mine);
    const uint32_t flags = summary_flags(sum);
    if (valid && l == 0 && s_begin == 0 && flags) atomicOr(status, flags);
    const RowLaw law = row_law<Weights>(sum, n);
    uint64_t q[HOLD_UNITS ? ITEMS : 1];  // the lane's units, held for many samples' searches
    uint64_t mass = 0;
#pragma unroll
    for (int j = 0; j < ITEMS; ++j) {
      const uint64_t u = j * LANES + l < n ? units(wts, v[j * LANES], law, n) : uint64_t{0};
      if constexpr (HOLD_UNITS) q[j] = u;
      mass += u;
    }
    uint64_t through = mass;  // inclusive scan over the row's lanes
    for (int offset = 1; offset < LANES; offset *= 2) {
      const uint64_t y = __shfl_up_sync(kFullMask, through, offset, LANES);
      if (l >= offset) through += y;
    }
    const uint64_t total = __shfl_sync(kFullMask, through, LANES - 1, LANES);
    const uint64_t before = through - mass;
    // Sample s: 64 bits of Philox block row * k + s. Lane t of the row draws sample s0 + t.
    // Up to kOwnerSearches samples a row: each point is broadcast and the lane whose range
    // holds it walks its units in registers. More: each lane finds its own point's lane (a
    // binary search of the lanes' starts) and walks that lane's units, shuffled from its
    // registers (two shuffles a unit, where quantizing the staged item again took a float64
    // round and conversion, and for logits an exp), all lanes at once.
    for (int64_t s0 = s_begin; s0 < s_end; s0 += LANES) {
      uint64_t point = 0;
      const bool mine_to_draw = valid && s0 + l < s_end;
      if (mine_to_draw) {
        const uint4 r = philox_block_cuda(seed, static_cast<uint64_t>(row * k + s0 + l));
        point = uniform_point(r.x, r.y, total);
      }
      if constexpr (HOLD_UNITS) {
        if (k > kOwnerSearches) {
          int owner = 0;  // the last lane starting at or below the point: its range holds it
#pragma unroll
          for (int step = LANES / 2; step > 0; step /= 2) {
            if (__shfl_sync(kFullMask, before, owner + step, LANES) <= point) owner += step;
          }
          uint64_t end = __shfl_sync(kFullMask, before, owner, LANES);
          int64_t item = -1;
#pragma unroll
          for (int j = 0; j < ITEMS; ++j) {  // items past n hold 0 units: never the item
            end += __shfl_sync(kFullMask, q[j], owner, LANES);
            item = item < 0 && point < end ? j * LANES + owner : item;
          }
          if (mine_to_draw) out[row * k + s0 + l] = item < 0 ? 0 : item;  // 0: an invalid row's
          continue;
        }
      }
      if (mine_to_draw) out[row * k + s0 + l] = 0;  // stays in range if no lane claims the point (invalid rows)
      __syncwarp();
      const int64_t count = s_end - s0 < LANES ? s_end - s0 : LANES;
      for (int t = 0; t < count; ++t) {
        const uint64_t p = __shfl_sync(kFullMask, point, t, LANES);
        if (!valid || p - before >= mass) continue;  // another lane's range
        uint64_t end = before;
        int64_t item = -1;
        if constexpr (HOLD_UNITS) {
#pragma unroll
          for (int j = 0; j < ITEMS; ++j) {  // unrolled: q stays in registers
            end += q[j];
            item = item < 0 && p < end ? j * LANES + l : item;
          }
        } else {
          // The units of the mass above again (the same arithmetic on the same staged
          // values), so the walk ends inside the lane's range.
          item = l;  // in range; never left (the walk ends inside the range)
          for (int j = 0; j < ITEMS && j * LANES + l < n; ++j) {
            end += units(wts, v[j * LANES], law, n);
            if (p < end) {
              item = j * LANES + l;
              break;
            }
          }
        }
        out[row * k + s0 + t] = item;
      }
    }
  }
}

// Slices of a row's samples: one up to kWarpRowSlice, else enough work items (row
// groups times slices) to fill the GPU, each slice at least kWarpRowSlice long.
int64_t slices_for(int64_t groups, int64_t k) {
  static const int64_t fill = static_cast<int64_t>(at::cuda::getCurrentDeviceProperties()->multiProcessorCount) *
                              at::cuda::getCurrentDeviceProperties()->maxThreadsPerMultiProcessor / kWarp;
  const int64_t most = ceil_div(k, kWarpRowSlice);
  return std::max<int64_t>(1, std::min(most, ceil_div(fill, groups)));
}

// Blocks of kThreads a kernel keeps resident on an SM (its registers and shared memory).
template <typename Kernel>
int resident_blocks(Kernel kernel) {
  int blocks = 0;
  C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kThreads, 0));
  return blocks;
}

template <typename scalar_t, typename Weights, int LANES, int ITEMS>
void launch(const DrawCall& call, const Weights& wts) {
  const int64_t groups = ceil_div(call.rows, kWarp / LANES);
  int64_t slices = slices_for(groups, call.k);
  slices = ceil_div(call.k, ceil_div(call.k, slices));  // none empty
  const int blocks = grid_for(groups * slices * kWarp, kThreads);
  const auto held = warp_rows_kernel<scalar_t, Weights, LANES, ITEMS, true>;
  static const int held_blocks = resident_blocks(held);
  const bool recompute =
      call.k <= kRecomputeRowSamples && call.rows * call.n >= kRecomputeFromItems && held_blocks <= 1;
  const auto kernel = recompute ? warp_rows_kernel<scalar_t, Weights, LANES, ITEMS, false> : held;
  kernel<<<blocks, kThreads, 0, call.stream>>>(call.x.const_data_ptr<scalar_t>(), call.rows, call.n, call.k, slices,
                                               wts, call.philox, call.out, call.status);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// Lanes per row and items per lane by row length: about 4 to 16 items per lane; 32 per
// lane not in float64 (32 doubles per lane of 8 warps would need 64 KB of shared memory
// per block).
template <typename scalar_t, typename Weights>
void launch_for_length(const DrawCall& call, const Weights& wts) {
  const int64_t n = call.n;
  if (n <= 32) {
    launch<scalar_t, Weights, 8, 4>(call, wts);
  } else if (n <= 64) {
    launch<scalar_t, Weights, 8, 8>(call, wts);
  } else if (n <= 128) {
    launch<scalar_t, Weights, 8, 16>(call, wts);
  } else if (n <= 256) {
    launch<scalar_t, Weights, 16, 16>(call, wts);
  } else if (n <= 512) {
    launch<scalar_t, Weights, 32, 16>(call, wts);
  } else if constexpr (!std::is_same_v<scalar_t, double>) {
    launch<scalar_t, Weights, 32, 32>(call, wts);
  }
}

}  // namespace

bool warp_rows_serve(int64_t rows, int64_t n, int64_t k, bool float64) {
  if (n > (float64 ? 512 : kMaxWarpRow)) return false;
  // Beyond 64 samples each sample walks its owner lane's items again, which costs more
  // than alias tables (one lookup) unless a lane holds few items and the call is small:
  // 1 x 100, k = 1,024: 0.056 against 0.050 ms; 8 x 18: 0.043 against 0.050;
  // 4,096 x 18: 0.092 against 0.056 (scripts/profile_cases.py many, H100).
  return k <= kWarpRowSlice || (n <= 32 && k <= kMaxShortRowSamples && rows * k <= kMaxShortRowDraws);
}

void draw_warp_rows(const DrawCall& call) {
  TORCH_INTERNAL_ASSERT(warp_rows_serve(call.rows, call.n, call.k, call.x.scalar_type() == at::kDouble));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, call.x.scalar_type(), "warp_rows_cuda", [&] {
    with_weights(call, [&](const auto& wts) { launch_for_length<scalar_t>(call, wts); });
  });
}

}  // namespace wrs::multinomial
