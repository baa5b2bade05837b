// Without replacement, up to 64 draws per row in two passes over few long rows
// (two_pass_serves), with the warp lists of topk_warp.cuh. A first pass finds each
// chunk's largest key with the race's trips (race_trip.cuh: no lists); the k chunks with
// the largest hold the row's top k, and the k-th of those keys bounds it from below, so a
// second pass reads only those chunks and keeps the few keys above the bound.
#include "multinomial/topk_warp.cuh"

namespace wrs::multinomial {
namespace {

// Between the two passes of draw_two_pass_topk, a block per row: the k largest of its
// chunks' largest keys. Their chunks hold the row's top k (were a top-k key's chunk not
// among them, k chunks would hold keys above it), and the k-th of them bounds the row's
// k-th key from below: the chunks (in `pick`) become the second pass's, the bound (less
// one ulp: the key equal to it is drawn) the row's floor. The row's flags come from the
// first pass's stats of all its chunks.
template <typename Weights, int SLOTS>
__global__ void __launch_bounds__(kThreads)
    select_chunks_kernel(int64_t k, int64_t chunks, int64_t chunk_items, const double* max_key,
                         const int64_t* max_index, const ChunkStats* stats, int64_t* pick,
                         unsigned long long* row_floor_bits, uint32_t* status) {
  __shared__ Lists<SLOTS> lists;
  const int warp = threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  const int64_t row = blockIdx.x;
  WarpTop<SLOTS> top(Weights::kNone);
  block_top_k<Weights>(top, max_key + row * chunks, max_index + row * chunks, chunks, -INFINITY,
                       stats + row * chunks, chunks, k, status, lists);
  if (warp != 0) return;
#pragma unroll
  for (int s = 0; s < SLOTS; ++s) {
    if (s * kWarp + lane < k) pick[row * k + s * kWarp + lane] = top.index[s] / chunk_items;
  }
  const double kth = top.at_rank(static_cast<int>(k) - 1);
  if (lane == 0) row_floor_bits[row] = kth > Weights::kNone ? ordered_bits(::nextafter(kth, -INFINITY)) : 0;
}

// Pass 1 of the two-pass top-k: each chunk's largest key and its item, and the chunk's
// stats. The race's trips (race_trip.cuh): a running best per lane and no lists, where a
// k = 1 topk_kernel per chunk would pay its lists, stage and merges for a trip or two of
// items (docs/methods.md, "Without replacement"). `warps` warps share a
// chunk, each a stretch of it; a block serves kWarpsPerBlock / warps chunks.
template <typename scalar_t, typename Weights>
__global__ void __launch_bounds__(kThreads, std::is_same_v<scalar_t, double> ? 2 : 3)
    chunk_best_kernel(const scalar_t* x, int64_t rows, int64_t n, int64_t chunks, int64_t chunk_quads, int warps,
                      Weights wts, at::PhiloxCudaState philox, double* max_key, int64_t* max_index,
                      ChunkStats* stats) {
  __shared__ double part_key[kWarpsPerBlock];
  __shared__ int64_t part_index[kWarpsPerBlock];
  __shared__ ChunkStats part_stats[kWarpsPerBlock];
  const int warp = threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  const int part = warp % warps;
  const int64_t unit = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock / warps) + warp / warps;
  const bool held = unit < rows * chunks;
  const int64_t row = unit / chunks;
  const int64_t quads = (n + 3) / 4;
  const int64_t c_begin = unit % chunks * chunk_quads;
  RaceTally mine{Weights::kNone, 4 * c_begin, 0u, 0.0, 0u};
  if (held) {
    const int64_t c_end = min(quads, c_begin + chunk_quads);
    const int64_t per_warp = (c_end - c_begin + warps - 1) / warps;
    const int64_t q_begin = c_begin + part * per_warp;
    const int64_t q_end = min(c_end, q_begin + per_warp);
    const scalar_t* xr = x + row * n;
    const bool aligned = reinterpret_cast<uintptr_t>(xr) % sizeof(Quad<scalar_t>) == 0;
    const PhiloxSeed seed = philox_seed(philox);
    float warp_floor = -INFINITY;
    for (int64_t base = q_begin; base < q_end; base += kWarp * kQuadsPerLane) {  // the same trips in every lane
      race_trip<kQuadsPerLane>(xr, n, base + lane, kWarp, q_end, aligned, base == q_begin,
                               static_cast<uint64_t>(row * quads), wts, seed, mine, warp_floor);
    }
  }
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    const double other_key = __shfl_xor_sync(kFullMask, mine.key, offset);
    const int64_t other_index = __shfl_xor_sync(kFullMask, mine.index, offset);
    if (beats(other_key, other_index, mine.key, mine.index)) {
      mine.key = other_key;
      mine.index = other_index;
    }
  }
  ChunkStats chunk{__reduce_add_sync(kFullMask, mine.nonzero), __reduce_or_sync(kFullMask, mine.flags)};
  if (warps > 1) {
    if (lane == 0) {
      part_key[warp] = mine.key;
      part_index[warp] = mine.index;
      part_stats[warp] = chunk;
    }
    __syncthreads();
    if (part == 0 && lane == 0) {
      for (int w = warp + 1; w < warp + warps; ++w) {
        if (beats(part_key[w], part_index[w], mine.key, mine.index)) {
          mine.key = part_key[w];
          mine.index = part_index[w];
        }
        chunk.nonzero += part_stats[w].nonzero;
        chunk.flags |= part_stats[w].flags;
      }
    }
  }
  if (!held || part != 0 || lane != 0) return;
  max_key[unit] = mine.key;
  max_index[unit] = mine.index;
  stats[unit] = chunk;
}

// Pass 2 of the two-pass top-k: the items of each row's k picked chunks whose keys are
// above the row's floor (its k-th chunk maximum less one ulp), appended in any order to
// the row's run (run_cap keys and items; the count goes on past it). They hold the row's
// top k: the picked chunks hold it, and its k-th key is at least the k-th chunk maximum.
// Almost every item the float bound rules out against the floor; about k are appended,
// where a top-k list per picked chunk wrote and merged k candidates each. Zero weights are
// never appended: a row with k nonzero weights never draws one, and a row with fewer
// counts fewer than k and takes the lists.
template <typename scalar_t, typename Weights>
__global__ void __launch_bounds__(kThreads)
    picked_run_kernel(const scalar_t* x, int64_t rows, int64_t n, int64_t k, int64_t chunk_quads, const int64_t* pick,
                      const unsigned long long* row_floor_bits, Weights wts, at::PhiloxCudaState philox,
                      int64_t run_cap, double* run_key, int64_t* run_index, unsigned* run_count) {
  const PhiloxSeed seed = philox_seed(philox);
  const int64_t quads = (n + 3) / 4;
  const int64_t row_quads = k * chunk_quads;
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < rows * row_quads;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = t / row_quads;
    const int64_t q = pick[t / chunk_quads] * chunk_quads + t % chunk_quads;
    if (q >= quads) continue;
    const scalar_t* xr = x + row * n;
    value_t<scalar_t> v[4];
    const uint32_t in_row = load_quad(xr, n, q, reinterpret_cast<uintptr_t>(xr) % sizeof(Quad<scalar_t>) == 0, v);
    const double floor = from_ordered_bits(row_floor_bits[row]);
    const float scale = ruling_scale(wts, floor);
    const uint64_t sub = static_cast<uint64_t>(row * quads + q);
    const uint4 high = philox_block_cuda(seed, sub);
    const uint32_t hi[4] = {high.x, high.y, high.z, high.w};
    uint32_t kept = 0;
#pragma unroll
    for (int h = 0; h < 4; ++h) {
      kept |= static_cast<uint32_t>((in_row >> h & 1) && nonzero_value<Weights>(v[h]) &&
                                    !ruled_out(wts, v[h], hi[h], scale)) << h;
    }
    if (kept == 0) continue;
    bool full[4];
    bool any_full = false;
#pragma unroll
    for (int h = 0; h < 4; ++h) {
      full[h] = (kept >> h & 1) && !surely_below(wts, v[h], hi[h], floor);
      any_full |= full[h];
    }
    if (!any_full) continue;
    const uint4 low = philox_block_cuda(PhiloxSeed{seed.seed, seed.offset + 4}, sub);
    const uint32_t lo[4] = {low.x, low.y, low.z, low.w};
#pragma unroll
    for (int h = 0; h < 4; ++h) {
      if (!full[h]) continue;
      const double key = wts.key(static_cast<double>(v[h]), exponential(lo[h], hi[h]));
      if (!(key > floor)) continue;
      const unsigned slot = atomicAdd(run_count + row, 1u);
      if (slot < run_cap) {
        run_key[row * run_cap + slot] = key;
        run_index[row * run_cap + slot] = 4 * q + h;
      }
    }
  }
}

// The two-pass top-k's chunks: kChunksPerDraw k per row where rows are long enough
// (the second pass then reads an eighth of the row), of kTripItems to kItemsPerWarp *
// kWarpsPerBlock items (a warp's trip; a block's 8 warps' stretches), kTripItems apart.
struct Chunking {
  int64_t quads;  // per chunk
  int64_t chunks;  // per row
  int warps;      // per chunk
};

Chunking chunking(int64_t n, int64_t k) {
  const int64_t items = std::clamp<int64_t>(n / (kChunksPerDraw * k), kTripItems, kItemsPerWarp * kWarpsPerBlock);
  const int64_t quads = items / kTripItems * kTripItems / 4;
  int warps = 1;
  while (warps < kWarpsPerBlock && 4 * quads > kItemsPerWarp * warps) warps *= 2;
  return {quads, ceil_div((n + 3) / 4, quads), warps};
}

// Pass 1 (chunk_best_kernel): each chunk's largest key and item, with its stats.
// select_chunks_kernel: the k chunks with the largest, the row's floor, the rows' flags.
// Pass 2 (picked_run_kernel): the picked chunks' keys above the floor, into each row's run.
// Rows the run does not serve (run_serves) take the top k of each picked chunk above the
// floor (topk_kernel; the others' warps return at once). Then a block per row merges its
// run or its lists.
template <typename scalar_t, typename Weights, int SLOTS>
void launch_two_pass(const DrawCall& call, const Weights& wts) {
  const auto [chunk_quads, chunks, warps] = chunking(call.n, call.k);
  TORCH_INTERNAL_ASSERT(chunks >= call.k);
  const int64_t units = call.rows * chunks;
  const int64_t lists = call.rows * call.k;
  const int64_t run_cap = kRunPerDraw * call.k;
  at::Tensor keep;
  const auto [max_key, max_index, stats, pick, row_floor_bits, cand_key, cand_index, run_key, run_index, run_count] =
      scratch_arrays<double, int64_t, ChunkStats, int64_t, unsigned long long, double, int64_t, double, int64_t,
                     unsigned>(keep, call.x.options(),
                               {units, units, units, lists, call.rows, lists * call.k, lists * call.k,
                                call.rows * run_cap, call.rows * run_cap, call.rows});
  C10_CUDA_CHECK(cudaMemsetAsync(run_count, 0, call.rows * sizeof(unsigned), call.stream));
  const scalar_t* x = call.x.const_data_ptr<scalar_t>();
  chunk_best_kernel<scalar_t, Weights><<<ceil_div(units, kWarpsPerBlock / warps), kThreads, 0, call.stream>>>(
      x, call.rows, call.n, chunks, chunk_quads, warps, wts, call.philox, max_key, max_index, stats);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  select_chunks_kernel<Weights, SLOTS><<<call.rows, kThreads, 0, call.stream>>>(
      call.k, chunks, 4 * chunk_quads, max_key, max_index, stats, pick, row_floor_bits, call.status);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  picked_run_kernel<scalar_t, Weights><<<grid_for(lists * chunk_quads, kThreads), kThreads, 0, call.stream>>>(
      x, call.rows, call.n, call.k, chunk_quads, pick, row_floor_bits, wts, call.philox, run_cap, run_key, run_index,
      run_count);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  topk_kernel<scalar_t, Weights, SLOTS><<<ceil_div(lists, kWarpsPerBlock / warps), kThreads, 0, call.stream>>>(
      x, call.rows, call.n, call.k, warps, /*units_per_row=*/call.k, chunk_quads, pick, wts, call.philox, call.out,
      cand_key, cand_index, nullptr, row_floor_bits, run_count, run_cap, call.status);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  merge_chunks_kernel<Weights, SLOTS><<<call.rows, kThreads, 0, call.stream>>>(
      call.k, /*lists_per_row=*/call.k, cand_key, cand_index, /*stats=*/nullptr, row_floor_bits, run_key, run_index,
      run_count, run_cap, call.out, call.status);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace

void draw_two_pass_topk(const DrawCall& call) {
  TORCH_INTERNAL_ASSERT(two_pass_serves(call.rows, call.n, call.k, call.logits));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, call.x.scalar_type(), "two_pass_topk_cuda", [&] {
    with_weights(call, [&](const auto& wts) {
      with_slots(call.k, [&](auto slots) { launch_two_pass<scalar_t, std::decay_t<decltype(wts)>, decltype(slots)::value>(call, wts); });
    });
  });
}

}  // namespace wrs::multinomial
