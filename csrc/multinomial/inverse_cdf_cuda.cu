// With replacement, few draws per row: the integer inverse CDF over chunks of a row
// (inverse_cdf.cuh says how), and the value flags of rows without drawing.
#include "multinomial/inverse_cdf.cuh"

namespace wrs::multinomial {
namespace {

template <typename scalar_t, typename Weights, int HITS>
__global__ void __launch_bounds__(kThreads)
    draw_kernel(const scalar_t* x, int64_t n, int64_t k, int64_t chunks, int64_t chunk_items, Weights wts,
                const Summary* summaries, const uint64_t* chunk_total, at::PhiloxCudaState philox, int64_t* out,
                uint32_t* status) {
  __shared__ Shared<HITS> sh;
  const ChunkOf ch(blockIdx.x, n, chunks, chunk_items);
  const Summary s = row_summary<Weights>(summaries + ch.row * chunks, chunks, sh);
  if (threadIdx.x == 0) {
    sh.law = row_law<Weights>(s, n);
    sh.hits = 0;
    const uint32_t flags = summary_flags(s);
    if (ch.c == 0 && flags) atomicOr(status, flags);
  }
  const uint64_t* units_of_row = chunk_total + ch.row * chunks;
  uint64_t before = 0, all = 0;
  for (int64_t c = threadIdx.x; c < chunks; c += kThreads) {
    all += units_of_row[c];
    before += c < ch.c ? units_of_row[c] : 0;
  }
  __syncthreads();
  all = UnitsReduce(sh.tmp.units).Sum(all);
  __syncthreads();
  before = UnitsReduce(sh.tmp.units).Sum(before);
  if (threadIdx.x == 0) {
    sh.total = all;
    sh.before = before;
  }
  __syncthreads();
  collect_hits(philox_seed(philox), ch.row, k, units_of_row[ch.c], sh);
  if (sh.hits == 0) return;
  sort_hits(sh);
  find_hits(x + ch.row * n + ch.first, ch.count, wts, sh.law, n, ch.first, sh, out + ch.row * k);
}

static_assert(kMaxChunks <= kThreads * 4, "a block scans a row's chunk bounds, 4 per thread");

template <typename scalar_t, typename Weights>
__global__ void __launch_bounds__(kThreads)
    one_draw_kernel(const scalar_t* x, int64_t n, int64_t rows, int64_t k, int64_t chunks, int64_t chunk_items,
                    Weights wts, const Summary* bounds, at::PhiloxCudaState philox, int64_t* out, uint32_t* status) {
  __shared__ Shared<1> sh;
  __shared__ uint64_t point;
  __shared__ int64_t chunk;  // the chunk holding the point
  __shared__ int64_t item;   // the item holding it, -1 for none (rejected)
  const int64_t draw = blockIdx.x;
  const int64_t row = draw / k;
  const Summary* row_bounds = bounds + row * chunks;
  const Summary s = row_summary<Weights>(row_bounds, chunks, sh);
  if (threadIdx.x == 0) {
    sh.law = row_law<Weights>(s, n);
    const uint32_t flags = summary_flags(s);
    if (flags && draw == row * k) atomicOr(status, flags);
  }
  __syncthreads();
  uint64_t bound[4], start[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int64_t c = 4 * threadIdx.x + j;
    const int64_t count = n - c * chunk_items < chunk_items ? n - c * chunk_items : chunk_items;
    bound[j] = c < chunks ? chunk_units_bound(row_bounds[c], count, sh.law) : 0;
  }
  uint64_t total;
  __syncthreads();  // sh.tmp held the summary reduction
  UnitsScan(sh.tmp.scan).ExclusiveSum(bound, start, total);
  const PhiloxSeed seed = philox_seed(philox);
  for (int attempt = 0; attempt < kMaxBoundAttempts; ++attempt) {
    if (threadIdx.x == 0) {
      const uint4 r = philox_block_cuda(seed, static_cast<uint64_t>(draw + attempt * rows * k));
      point = uniform_point(r.x, r.y, total);
      chunk = -1;
      item = -1;
      sh.hits = 1;
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint64_t offset = point - start[j];  // wraps below the chunk
      if (offset < bound[j]) {
        chunk = 4 * threadIdx.x + j;
        sh.sorted[0] = Hit{0, offset};
      }
    }
    __syncthreads();
    if (chunk < 0) return;  // only where invalid values wrapped the bounds' sum: item 0 stays
    const int64_t first = chunk * chunk_items;
    find_hits(x + row * n + first, n - first < chunk_items ? n - first : chunk_items, wts, sh.law, n, first, sh,
              &item);
    __syncthreads();
    if (item >= 0) {
      if (threadIdx.x == 0) out[draw] = item;
      return;
    }
  }
}

// One block per row: the three steps in one kernel.
template <typename scalar_t, typename Weights>
__global__ void __launch_bounds__(kThreads)
    row_kernel(const scalar_t* x, int64_t n, int64_t k, Weights wts, at::PhiloxCudaState philox, int64_t* out,
               uint32_t* status) {
  __shared__ Shared<kRowHits> sh;
  const int64_t row = blockIdx.x;
  const scalar_t* xr = x + row * n;
  for (int64_t s = threadIdx.x; s < k; s += kThreads) out[row * k + s] = 0;
  const Summary s = summarize(xr, n, wts, sh);
  if (threadIdx.x == 0) {
    sh.law = row_law<Weights>(s, n);
    sh.hits = 0;
    sh.before = 0;
    const uint32_t flags = summary_flags(s);
    if (flags) atomicOr(status, flags);
  }
  __syncthreads();
  const uint64_t total = chunk_units(xr, n, wts, sh.law, n, sh);
  if (threadIdx.x == 0) sh.total = total;
  __syncthreads();
  collect_hits(philox_seed(philox), row, k, sh.total, sh);
  sort_hits(sh);
  find_hits(xr, n, wts, sh.law, n, 0, sh, out + row * k);
}

// One thread per row: its flags from its chunks' summaries.
template <typename Weights>
__global__ void row_flags_kernel(const Summary* summaries, int64_t rows, int64_t chunks, uint32_t* status) {
  const int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (row >= rows) return;
  Summary s = Weights::empty();
  for (int64_t c = 0; c < chunks; ++c) s = Weights::combine(s, summaries[row * chunks + c]);
  const uint32_t flags = summary_flags(s);
  if (flags) atomicOr(status, flags);
}

template <typename scalar_t, typename Weights>
void launch_flags(const DrawCall& call, const Weights& wts) {
  const int64_t chunks = inverse_cdf_chunks(call.rows, call.n, device_sms());
  const int64_t chunk_items = ceil_div(ceil_div(call.n, chunks), kTile) * kTile;
  at::Tensor keep;
  const auto [summaries] = scratch_arrays<Summary>(keep, call.x.options(), {call.rows * chunks});
  summarize_kernel<scalar_t, Weights><<<call.rows * chunks, kThreads, 0, call.stream>>>(
      call.x.const_data_ptr<scalar_t>(), call.n, 0, chunks, chunk_items, wts, 0.0f, summaries, nullptr);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  row_flags_kernel<Weights><<<ceil_div(call.rows, kThreads), kThreads, 0, call.stream>>>(summaries, call.rows, chunks,
                                                                                       call.status);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename scalar_t, typename Weights>
void launch(const DrawCall& call, const Weights& wts, int64_t chunks) {
  const scalar_t* x = call.x.const_data_ptr<scalar_t>();
  if (chunks == 1) {
    row_kernel<scalar_t, Weights><<<call.rows, kThreads, 0, call.stream>>>(x, call.n, call.k, wts, call.philox,
                                                                         call.out, call.status);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return;
  }
  at::Tensor keep;
  if (call.k <= kMaxBoundedDraws && call.rows * call.k <= kMaxBoundedDrawBlocks) {
    // log2(e) / T for the fast logit bound, where float holds it as a normal number
    // (else the exact summary serves).
    const double c = call.logits ? 1.4426950408889634 * call.inv_temperature : 0.0;
    const float log2e_over_t = c > 0x1.0p-100 && c < 0x1.0p100 ? static_cast<float>(c) : 0.0f;
    const int64_t tiles = ceil_div(call.n, kTile);
    // Chunks of several tiles become single tiles, a warp each, where a row has at most
    // kMaxChunks tiles. Chunks that are single tiles already keep a block each: its 256
    // threads load a tile in one round, a warp's 32 lanes in several (docs/methods.md,
    // "The inverse CDF").
    const bool warp_tiles = chunks < tiles && tiles <= kMaxChunks;
    const int64_t bound_chunks = warp_tiles ? tiles : chunks;
    const int64_t chunk_items = warp_tiles ? kTile : ceil_div(ceil_div(call.n, chunks), kTile) * kTile;
    const auto [bounds] = scratch_arrays<Summary>(keep, call.x.options(), {call.rows * bound_chunks});
    if (warp_tiles) {
      summarize_tiles_kernel<scalar_t, Weights>
          <<<ceil_div(call.rows * tiles, kThreads / kWarp), kThreads, 0, call.stream>>>(
              x, call.n, call.k, call.rows, tiles, wts, log2e_over_t, bounds, call.out);
    } else {
      summarize_kernel<scalar_t, Weights><<<call.rows * chunks, kThreads, 0, call.stream>>>(
          x, call.n, call.k, chunks, chunk_items, wts, log2e_over_t, bounds, call.out);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    one_draw_kernel<scalar_t, Weights><<<call.rows * call.k, kThreads, 0, call.stream>>>(
        x, call.n, call.rows, call.k, bound_chunks, chunk_items, wts, bounds, call.philox, call.out, call.status);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return;
  }
  const int64_t chunk_items = ceil_div(ceil_div(call.n, chunks), kTile) * kTile;
  const int64_t blocks = call.rows * chunks;
  const auto [summaries, chunk_total] = scratch_arrays<Summary, uint64_t>(keep, call.x.options(), {blocks, blocks});
  summarize_kernel<scalar_t, Weights><<<blocks, kThreads, 0, call.stream>>>(x, call.n, call.k, chunks, chunk_items,
                                                                          wts, 0.0f, summaries, call.out);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  units_kernel<scalar_t, Weights><<<blocks, kThreads, 0, call.stream>>>(x, call.n, chunks, chunk_items, wts,
                                                                      summaries, chunk_total);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  const auto draw = call.k <= kRowHits ? draw_kernel<scalar_t, Weights, kRowHits>
                                       : draw_kernel<scalar_t, Weights, kMaxChunkSamples>;
  draw<<<blocks, kThreads, 0, call.stream>>>(x, call.n, call.k, chunks, chunk_items, wts, summaries, chunk_total,
                                            call.philox, call.out, call.status);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace

int64_t device_sms() {
  static const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  return sms;
}

void draw_inverse_cdf(const DrawCall& call, int64_t chunks) {
  TORCH_INTERNAL_ASSERT(call.k <= (chunks == 1 ? kMaxRowSamples : kMaxChunkSamples));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, call.x.scalar_type(), "inverse_cdf_cuda", [&] {
    with_weights(call, [&](const auto& wts) { launch<scalar_t>(call, wts, chunks); });
  });
}

void flag_rows(const DrawCall& call) {
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, call.x.scalar_type(), "flag_rows_cuda", [&] {
    with_weights(call, [&](const auto& wts) { launch_flags<scalar_t>(call, wts); });
  });
}

}  // namespace wrs::multinomial
