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
constexpr int64_t kOwnerSearches = 8;  // samples a row up to which owners search their registers

// How a row's draws find their items (docs/methods.md, "Warp rows: lane bounds or held
// units"): up to kBoundedRowSamples draws a row from rows over kHeldOnlyRow items in calls
// of kBoundedFromItems or more take lane bounds (no units pass: the lanes' sums bound
// their units, and only the drawn lane's items are quantized); the others hold their
// units, which cost less than the bounds' steps a sample where a lane holds a few items.
constexpr int64_t kBoundedRowSamples = 8;
constexpr int64_t kHeldOnlyRow = 32;
constexpr int64_t kBoundedFromItems = int64_t{1} << 21;

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

// LANES-wide inclusive sum of a uint64 over the row's lanes (l: the lane within the row).
template <int LANES>
__device__ inline uint64_t row_inclusive_sum(uint64_t value, int l) {
  for (int offset = 1; offset < LANES; offset *= 2) {
    const uint64_t y = __shfl_up_sync(kFullMask, value, offset, LANES);
    if (l >= offset) value += y;
  }
  return value;
}

// A few draws a row without the row's units: each lane's float64 sum bounds its items'
// units (chunk_units_bound), a point of [0, sum of the bounds) picks a lane, the row's
// lanes quantize that lane's items (a share each) and the point is kept where it falls
// within their exact units, else drawn again; laws.h's draws against bounds, so each item
// is drawn with probability proportional to Q_i, the quantized law of every other path.
// A lane's items are a fixed set, so the law does not depend on their order: the owner's
// item j is quantized by lane j % LANES. Attempt a of sample s takes Philox subsequence
// row k + s + a rows k (one_draw_kernel's rule); valid rows accept above 1 - 2^-20 an
// attempt (count + 2 units of slack a lane against n 2^32). A row whose attempts all
// fail (invalid values, flagged; valid rows below 2^-300) keeps item 0.
template <int LANES, int ITEMS, typename Weights, typename value_t>
__device__ inline void draw_against_lane_bounds(const Weights& wts, const RowLaw& law, const Summary& lane_sum,
                                                const value_t* v, int l, int row_lane0, int64_t n, int64_t row,
                                                int64_t rows, int64_t k, int64_t s_begin, int64_t s_end, bool valid,
                                                const PhiloxSeed& seed, int64_t* out) {
  constexpr int kShare = (ITEMS + LANES - 1) / LANES;  // the owner's items a lane quantizes
  const unsigned row_mask = LANES == kWarp ? kFullMask : ((1u << LANES) - 1) << row_lane0;
  const int count = l < n ? static_cast<int>((n - 1 - l) / LANES) + 1 : 0;  // the lane's items
  const uint64_t bound = count > 0 ? chunk_units_bound(lane_sum, count, law) : 0;
  const uint64_t bound_through = row_inclusive_sum<LANES>(bound, l);
  const uint64_t bound_total = __shfl_sync(kFullMask, bound_through, LANES - 1, LANES);
  const uint64_t bound_before = bound_through - bound;
  for (int64_t s0 = s_begin; s0 < s_end; s0 += LANES) {
    // Attempt 0 of the row's next LANES samples at once, lane t's Philox block for sample
    // s0 + t (not each sample's block in turn by the row's lanes; docs/methods.md); then
    // each sample's point in turn.
    uint64_t first_point = 0;
    if (s0 + l < s_end) {
      const uint4 r = philox_block_cuda(seed, static_cast<uint64_t>(row * k + s0 + l));
      first_point = uniform_point(r.x, r.y, bound_total);
    }
    const int samples = static_cast<int>(s_end - s0 < LANES ? s_end - s0 : LANES);  // warp-uniform
    int64_t drawn = 0;  // lane t: sample s0 + t's item
    for (int t = 0; t < samples; ++t) {
      const int64_t s = s0 + t;
      int64_t item = 0;
      bool pending = valid;
      uint64_t point = __shfl_sync(kFullMask, first_point, t, LANES);
      for (int attempt = 0; attempt < kMaxBoundAttempts && __any_sync(kFullMask, pending); ++attempt) {
        if (attempt > 0) {
          const uint4 r = philox_block_cuda(seed, static_cast<uint64_t>(row * k + s + attempt * rows * k));
          point = uniform_point(r.x, r.y, bound_total);
        }
        const unsigned owners = __ballot_sync(kFullMask, point - bound_before < bound) & row_mask;  // one, or none
        const int owner = owners ? __ffs(owners) - 1 - row_lane0 : 0;
        const uint64_t offset = point - __shfl_sync(kFullMask, bound_before, owner, LANES);
        const value_t* owner_v = v - l + owner;  // the owner's item j at owner_v[j * LANES]
        uint64_t u[kShare];
        uint64_t share = 0;
#pragma unroll
        for (int m = 0; m < kShare; ++m) {
          const int j = l + m * LANES;
          u[m] = j < ITEMS && j * LANES + owner < n ? units(wts, owner_v[j * LANES], law, n) : uint64_t{0};
          share += u[m];
        }
        const uint64_t through = row_inclusive_sum<LANES>(share, l);
        uint64_t end = through - share;
        int hit = -1;  // the owner's item holding the point, if this lane's share does
#pragma unroll
        for (int m = 0; m < kShare; ++m) {
          end += u[m];
          hit = hit < 0 && offset < end && offset >= end - u[m] ? l + m * LANES : hit;
        }
        const unsigned holders = __ballot_sync(kFullMask, owners != 0 && hit >= 0) & row_mask;
        const int j = __shfl_sync(kFullMask, hit, holders ? __ffs(holders) - 1 - row_lane0 : 0, LANES);
        if (pending && holders) {
          item = static_cast<int64_t>(j) * LANES + owner;
          pending = false;
        }
      }
      if (l == t) drawn = item;
    }
    if (valid && s0 + l < s_end) out[row * k + s0 + l] = drawn;
  }
}

// Draws from the row's units, held in registers: the lanes' totals scanned, then for
// each sample a point of [0, sum Q) (64 bits of Philox block row k + s; lane t of the row
// draws sample s0 + t). Up to kOwnerSearches samples a row each point is broadcast and the
// lane whose range holds it walks its units. More: each lane finds its own point's lane (a
// binary search of the lanes' starts) and walks that lane's units, shuffled from its
// registers (two shuffles a unit), all lanes at once.
template <int LANES, int ITEMS, typename Weights, typename value_t>
__device__ inline void draw_from_held_units(const Weights& wts, const RowLaw& law, const value_t* v, int l, int64_t n,
                                            int64_t row, int64_t k, int64_t s_begin, int64_t s_end, bool valid,
                                            const PhiloxSeed& seed, int64_t* out) {
  uint64_t q[ITEMS];  // the lane's units
  uint64_t mass = 0;
#pragma unroll
  for (int j = 0; j < ITEMS; ++j) {
    q[j] = j * LANES + l < n ? units(wts, v[j * LANES], law, n) : uint64_t{0};
    mass += q[j];
  }
  const uint64_t through = row_inclusive_sum<LANES>(mass, l);
  const uint64_t total = __shfl_sync(kFullMask, through, LANES - 1, LANES);
  const uint64_t before = through - mass;
  for (int64_t s0 = s_begin; s0 < s_end; s0 += LANES) {
    uint64_t point = 0;
    const bool mine_to_draw = valid && s0 + l < s_end;
    if (mine_to_draw) {
      const uint4 r = philox_block_cuda(seed, static_cast<uint64_t>(row * k + s0 + l));
      point = uniform_point(r.x, r.y, total);
    }
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
    if (mine_to_draw) out[row * k + s0 + l] = 0;  // stays in range if no lane claims the point (invalid rows)
    __syncwarp();
    const int64_t count = s_end - s0 < LANES ? s_end - s0 : LANES;
    for (int t = 0; t < count; ++t) {
      const uint64_t p = __shfl_sync(kFullMask, point, t, LANES);
      if (!valid || p - before >= mass) continue;  // another lane's range
      uint64_t end = before;
      int64_t item = -1;
#pragma unroll
      for (int j = 0; j < ITEMS; ++j) {  // unrolled: q stays in registers
        end += q[j];
        item = item < 0 && p < end ? j * LANES + l : item;
      }
      out[row * k + s0 + t] = item;
    }
  }
}

// Work item w is row group w / slices (32 / LANES rows) and slice w % slices of its
// samples; each warp takes items w, w + W, ... (W warps in the grid). A row's slices
// each reduce the row again (it is short, and in L1 or L2), so that many samples from
// few rows still spread over the whole GPU.
//
// Held units (BOUNDED false): each lane keeps its units in registers for its samples'
// searches, and the next row group's inputs are loaded while the warp works on this one.
// With bounds, float and half rows are not prefetched (their loads go out together at the
// start of each group instead): at 32 items a lane the held kernel takes 254 registers,
// one block an SM, the bounded one 64-80, three blocks. Doubles keep the prefetch, which
// measured faster for them and slower for narrower types (docs/methods.md, "Warp rows").
//
// Resident blocks asked of the compiler: with units held, its own choice (0: none); the
// bounded kernel without spills, at least 3 blocks an SM where rows are not prefetched.
template <typename scalar_t, bool BOUNDED>
constexpr bool kPrefetchRows = !BOUNDED || std::is_same_v<scalar_t, double>;
template <typename scalar_t, bool BOUNDED>
constexpr int kWarpRowsMinBlocks = !BOUNDED ? 0 : kPrefetchRows<scalar_t, BOUNDED> ? 1 : 3;

template <typename scalar_t, typename Weights, int LANES, int ITEMS, bool BOUNDED>
__global__ void __launch_bounds__(kThreads, kWarpRowsMinBlocks<scalar_t, BOUNDED>)
    warp_rows_kernel(const scalar_t* x, int64_t rows, int64_t n, int64_t k, int64_t slices, Weights wts,
                     at::PhiloxCudaState philox, int64_t* out, uint32_t* status) {
  constexpr bool kPrefetch = kPrefetchRows<scalar_t, BOUNDED>;
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
    // Without the prefetch, the group's loads all go out first, each unconditional (an
    // index clamped into the input): loads under a branch each wait for the one before.
    scalar_t loaded[kPrefetch ? 1 : ITEMS];
    if constexpr (!kPrefetch) {
      const int64_t first = (valid ? row : rows - 1) * n;
#pragma unroll
      for (int j = 0; j < ITEMS; ++j) loaded[j] = x[first + (j * LANES + l < n ? j * LANES + l : n - 1)];
    }
    Summary mine = Weights::empty();
#pragma unroll
    for (int j = 0; j < ITEMS; ++j) {
      scalar_t xv;
      if constexpr (kPrefetch) {
        xv = next[j];
      } else {
        xv = valid && j * LANES + l < n ? loaded[j] : scalar_t(0);
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
    if constexpr (BOUNDED) {
      draw_against_lane_bounds<LANES, ITEMS>(wts, law, mine, v, l, lane - l, n, row, rows, k, s_begin, s_end, valid,
                                             seed, out);
    } else {
      draw_from_held_units<LANES, ITEMS>(wts, law, v, l, n, row, k, s_begin, s_end, valid, seed, out);
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

template <typename scalar_t, typename Weights, int LANES, int ITEMS>
void launch(const DrawCall& call, const Weights& wts) {
  const int64_t groups = ceil_div(call.rows, kWarp / LANES);
  int64_t slices = slices_for(groups, call.k);
  slices = ceil_div(call.k, ceil_div(call.k, slices));  // none empty
  const int blocks = grid_for(groups * slices * kWarp, kThreads);
  // The table above; rows of up to kHeldOnlyRow items are those of 8 lanes of 4.
  constexpr bool kMayBound = LANES * ITEMS > kHeldOnlyRow;
  const bool bounded = kMayBound && call.k <= kBoundedRowSamples && call.rows * call.n >= kBoundedFromItems;
  const auto kernel = bounded ? warp_rows_kernel<scalar_t, Weights, LANES, ITEMS, kMayBound>
                              : warp_rows_kernel<scalar_t, Weights, LANES, ITEMS, false>;
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

void draw_warp_rows(const DrawCall& call) {
  TORCH_INTERNAL_ASSERT(warp_rows_serve(call.rows, call.n, call.k, call.x.scalar_type() == at::kDouble));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, call.x.scalar_type(), "warp_rows_cuda", [&] {
    with_weights(call, [&](const auto& wts) { launch_for_length<scalar_t>(call, wts); });
  });
}

}  // namespace wrs::multinomial
