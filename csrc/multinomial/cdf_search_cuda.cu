// With replacement, more draws than the inverse CDF's blocks hold: the rows' cumulative
// units stored (the inverse CDF's quantized law, inverse_cdf.cuh), then a binary search
// per draw, over a guide table where draws are many against the row's items.
#include "multinomial/inverse_cdf.cuh"

namespace wrs::multinomial {
namespace {

// Many draws (more than a block's hit list holds): the rows' cumulative units stored,
// cdf[row * n + i] = units of items 0..i (uint64, exact), then a binary search per draw.
// A block per chunk scans its chunk tile by tile, starting from the units before it
// (from the chunk totals, or 0 for a whole row, whose summary the block makes itself).
template <typename scalar_t, typename Weights, bool kWholeRow>
__global__ void __launch_bounds__(kThreads)
    cdf_kernel(const scalar_t* x, int64_t n, int64_t chunks, int64_t chunk_items, Weights wts,
               const Summary* summaries, const uint64_t* chunk_total, uint64_t* cdf, uint32_t* status) {
  __shared__ ReduceShared sh;
  const ChunkOf ch(blockIdx.x, n, kWholeRow ? 1 : chunks, kWholeRow ? n : chunk_items);
  const scalar_t* xc = x + ch.row * n + ch.first;
  const Summary s = kWholeRow ? summarize(xc, n, wts, sh) : row_summary<Weights>(summaries + ch.row * chunks, chunks, sh);
  if (threadIdx.x == 0) {
    sh.law = row_law<Weights>(s, n);
    const uint32_t flags = summary_flags(s);
    if (ch.c == 0 && flags) atomicOr(status, flags);
  }
  uint64_t before = 0;
  if (!kWholeRow) {
    for (int64_t c = threadIdx.x; c < ch.c; c += kThreads) before += chunk_total[ch.row * chunks + c];
  }
  __syncthreads();
  if (!kWholeRow) {
    before = UnitsReduce(sh.tmp.units).Sum(before);
    if (threadIdx.x == 0) sh.before = before;
    __syncthreads();
  }
  uint64_t running = kWholeRow ? 0 : sh.before;
  uint64_t* out = cdf + ch.row * n + ch.first;
  for (int64_t tile = 0; tile < ch.count; tile += kTile) {
    uint64_t q[kItems];
    uint64_t mine = 0;
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      const int64_t i = tile + threadIdx.x * kItems + j;
      q[j] = i < ch.count ? units(wts, static_cast<double>(xc[i]), sh.law, n) : 0;
      mine += q[j];
    }
    uint64_t through, tile_total;
    UnitsScan(sh.tmp.scan).ExclusiveSum(mine, through, tile_total);
    through += running;
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      const int64_t i = tile + threadIdx.x * kItems + j;
      through += q[j];
      if (i < ch.count) out[i] = through;
    }
    running += tile_total;
    __syncthreads();  // the scan's storage is reused
  }
}

// A guide table over a row's stored CDF, for draws many against the row's items: the
// points [0, 2^L) of a row of total < 2^L units (L = its total's bit length) in G = 2^g
// buckets of 2^(L - g) points (L <= g: buckets of one point), and guide[b] = the item
// holding the bucket's first point (n - 1 where that is past the total). A point of bucket
// b lies in an item of [guide[b], guide[b + 1]]: the search over the row's n items
// becomes one over the few a bucket spans (a row's total is at least 2^(L - 1), so over
// G / 2 buckets or more). The draws are the same: only where the search starts changes.
__device__ inline int guide_shift(uint64_t total, int guide_bits) {
  const int bits = 64 - __clzll(static_cast<long long>(total));
  return bits > guide_bits ? bits - guide_bits : 0;
}

// The first item of c[lo, hi] whose cumulative units pass point (hi where none before).
__device__ inline int64_t first_past(const uint64_t* c, int64_t lo, int64_t hi, uint64_t point) {
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (c[mid] > point) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

// guide[row * (G + 1) + b] for b in [0, G]: a thread per entry, each a binary search.
__global__ void __launch_bounds__(kThreads)
    guide_kernel(const uint64_t* cdf, int64_t n, int64_t rows, int guide_bits, int64_t* guide) {
  const int64_t per_row = (int64_t{1} << guide_bits) + 1;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; e < rows * per_row;
       e += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t row = e / per_row, b = e - row * per_row;
    const uint64_t* c = cdf + row * n;
    const uint64_t total = c[n - 1];
    const uint64_t point = static_cast<uint64_t>(b) << guide_shift(total, guide_bits);  // <= 2^63
    guide[e] = point < total ? first_past(c, 0, n - 1, point) : n - 1;
  }
}

// Draw i (sample i % k of row i / k) from Philox subsequence i, the point the chunked
// kernels above draw for it (collect_hits): the first item whose cumulative units pass
// it, searched over the row, or with a guide table over its point's bucket. A zero row
// (total 0, flagged) gives item 0.
__global__ void __launch_bounds__(kThreads)
    search_kernel(const uint64_t* cdf, int64_t n, int64_t k, int64_t draws, const int64_t* guide, int guide_bits,
                  at::PhiloxCudaState philox, int64_t* out) {
  const PhiloxSeed seed = philox_seed(philox);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < draws;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t row = i / k;
    const uint64_t* c = cdf + row * n;
    const uint64_t total = c[n - 1];
    const uint4 r = philox_block_cuda(seed, static_cast<uint64_t>(i));
    const uint64_t point = uniform_point(r.x, r.y, total);
    int64_t lo = 0, hi = n - 1;  // the item is in [lo, hi]: c[n - 1] = total > point
    if (guide != nullptr) {
      const int64_t* g = guide + row * ((int64_t{1} << guide_bits) + 1) + (point >> guide_shift(total, guide_bits));
      lo = g[0];
      hi = g[1];
    }
    out[i] = total > 0 ? first_past(c, lo, hi, point) : 0;
  }
}

// A guide table where a row's draws are as many as its items, or 2^20 and more: G = 2^bits
// buckets, the largest power of two up to n, k and 2^kMaxGuideBits. Fewer draws keep the
// plain search: the guide's launch and G searches then cost more than they save
// (docs/methods.md, "Many draws: stored CDF or alias tables").
constexpr int kMaxGuideBits = 22;
constexpr int64_t kGuideFromDraws = int64_t{1} << 20;

int guide_bits(int64_t n, int64_t k) {
  if (k < std::min(n, kGuideFromDraws)) return 0;
  const int64_t most = std::min(n, k);
  int bits = 0;
  while (bits < kMaxGuideBits && (int64_t{2} << bits) <= most) ++bits;
  return bits >= 4 ? bits : 0;  // rows of under 16 items: the search is short anyway
}

template <typename scalar_t, typename Weights>
void launch_cdf_search(const DrawCall& call, const Weights& wts, int64_t chunks) {
  const scalar_t* x = call.x.const_data_ptr<scalar_t>();
  const int64_t blocks = call.rows * chunks;
  at::Tensor keep;
  const auto [cdf, summaries, chunk_total] = scratch_arrays<uint64_t, Summary, uint64_t>(
      keep, call.x.options(), {call.rows * call.n, chunks == 1 ? 0 : blocks, chunks == 1 ? 0 : blocks});
  if (chunks == 1) {
    cdf_kernel<scalar_t, Weights, true><<<call.rows, kThreads, 0, call.stream>>>(x, call.n, 1, call.n, wts, nullptr,
                                                                                  nullptr, cdf, call.status);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  } else {
    const int64_t chunk_items = ceil_div(ceil_div(call.n, chunks), kTile) * kTile;
    summarize_kernel<scalar_t, Weights><<<blocks, kThreads, 0, call.stream>>>(x, call.n, 0, chunks, chunk_items, wts,
                                                                            0.0f, summaries, nullptr);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    units_kernel<scalar_t, Weights><<<blocks, kThreads, 0, call.stream>>>(x, call.n, chunks, chunk_items, wts,
                                                                        summaries, chunk_total);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    cdf_kernel<scalar_t, Weights, false><<<blocks, kThreads, 0, call.stream>>>(
        x, call.n, chunks, chunk_items, wts, summaries, chunk_total, cdf, call.status);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  const int bits = guide_bits(call.n, call.k);
  int64_t* guide = nullptr;
  at::Tensor guide_keep;
  if (bits > 0) {
    const int64_t entries = call.rows * ((int64_t{1} << bits) + 1);
    guide_keep = at::empty({entries}, call.x.options().dtype(at::kLong));
    guide = guide_keep.mutable_data_ptr<int64_t>();
    guide_kernel<<<grid_for(entries, kThreads), kThreads, 0, call.stream>>>(cdf, call.n, call.rows, bits, guide);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  const int64_t draws = call.rows * call.k;
  search_kernel<<<grid_for(draws, kThreads), kThreads, 0, call.stream>>>(cdf, call.n, call.k, draws, guide, bits,
                                                                       call.philox, call.out);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace

void draw_cdf_search(const DrawCall& call) {
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, call.x.scalar_type(), "cdf_search_cuda", [&] {
    const int64_t chunks = inverse_cdf_chunks(call.rows, call.n, device_sms());
    with_weights(call, [&](const auto& wts) { launch_cdf_search<scalar_t>(call, wts, chunks); });
  });
}

}  // namespace wrs::multinomial
