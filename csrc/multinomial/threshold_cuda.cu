// Beyond kMaxTopK draws without replacement, the candidates (a row's `cands` largest float
// race keys, rank_keys) where they are a small share of the row: rather than torch.topk
// over every key, a threshold from a sample of the row's keys, the keys at or above it
// compacted in order into a row of `cap`, and torch.topk over those.
//
// The threshold only decides how much work is left, never the draws: a row whose keys at
// or above it number fewer than `cands` or more than `cap` is flagged kFloatKeyTies, and
// the caller ranks every float64 key instead (as it does for float ties). With the
// sample's rank set below, that happens about once in 30,000 rows for any weights.
#include "common/cuda_utils.cuh"
#include "common/philox_cuda.cuh"
#include "multinomial/kernels_cuda.cuh"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cub/block/block_radix_sort.cuh>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_scan.cuh>

#include <cmath>

namespace wrs::multinomial {
namespace {

constexpr int kThreads = 256;
// A row's sample: 1,024 keys, or 4,096 from rows of kLongRow items or more. A larger sample
// sets the threshold closer to the candidates (4 standard deviations of the rank are a
// share 2 / sqrt(S k / n) of them), so fewer keys are kept and ranked: 1 x 2^24, k = 2^20
// keeps about 1.3 million keys in rows of 1.75 million rather than 1.6 in 2.6.
constexpr int kSamplesPerThread = 4;  // one Philox block's words
constexpr int kLongRowSamplesPerThread = 16;
constexpr int64_t kLongRow = int64_t{1} << 20;
constexpr int kRounds = 16;  // a chunk of the count and write passes is kRounds x kThreads items
constexpr int64_t kSortKeptFrom = int64_t{1} << 14;
constexpr int64_t kChunk = int64_t{kThreads} * kRounds;
// The sample's positions come from their own Philox key (any key would do: they set the
// work, not the draws), so they do not follow the race keys' bits.
constexpr uint64_t kPositionKey = 0x9e3779b97f4a7c15ull;

// Is key v among a row's compacted keys? At or above the row's threshold, and above a zero
// weight's key: zero weights are never candidates unless the row has too few others, and
// then the row is short of candidates anyway (flagged).
__device__ inline bool kept(float v, float threshold, float zero_key) { return v >= threshold && v > zero_key; }

// A block per row: S = kThreads x SAMPLES keys, sample j from stratum [j n / S, (j + 1) n /
// S) at a Philox-drawn point, sorted; the threshold is the one of rank `rank` (0 the
// largest). (Sorting only their high 16 bits would halve the radix passes, but a threshold
// rounded down by 2^-7 of its value keeps e^0.8 times the keys above logit keys near 100.)
template <int SAMPLES>
__global__ void __launch_bounds__(kThreads)
    sample_threshold_kernel(const float* keys, int64_t n, int rank, at::PhiloxCudaState philox, float* threshold) {
  using Sort = cub::BlockRadixSort<float, kThreads, SAMPLES>;
  __shared__ typename Sort::TempStorage temp;
  constexpr int kBlocks = SAMPLES / 4;  // Philox blocks a thread takes
  const int64_t row = blockIdx.x;
  const PhiloxSeed seed = philox_seed(philox);
  float v[SAMPLES];
#pragma unroll
  for (int b = 0; b < kBlocks; ++b) {
    const uint4 r = philox_block_at(seed.seed ^ kPositionKey, seed.offset / 4 + b, row * kThreads + threadIdx.x);
    const uint32_t words[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
    for (int h = 0; h < 4; ++h) {
      const int j = threadIdx.x * SAMPLES + 4 * b + h;
      const double at = (j + words[h] * 0x1.0p-32) * static_cast<double>(n) / (kThreads * SAMPLES);
      const int64_t pos = min(static_cast<int64_t>(at), n - 1);
      v[4 * b + h] = keys[row * n + pos];
    }
  }
  Sort(temp).SortDescendingBlockedToStriped(v);  // v[i] of thread t has rank i * kThreads + t
  if (threadIdx.x == rank % kThreads) {
#pragma unroll
    for (int i = 0; i < SAMPLES; ++i) {
      if (i == rank / kThreads) threshold[row] = v[i];
    }
  }
}

// A block per chunk of kChunk items of a row (chunks per row): how many keys it keeps.
__global__ void __launch_bounds__(kThreads) count_kept_kernel(const float* keys, int64_t n, int64_t chunks,
                                                              const float* threshold, float zero_key, int64_t* counts) {
  using Reduce = cub::BlockReduce<int, kThreads>;
  __shared__ typename Reduce::TempStorage temp;
  const int64_t row = blockIdx.x / chunks, start = (blockIdx.x % chunks) * kChunk;
  const float* chunk = keys + row * n + start;
  const int len = static_cast<int>(n - start < kChunk ? n - start : kChunk);
  const float t = threshold[row];
  int count = 0;
  for (int i = threadIdx.x; i < len; i += kThreads) count += kept(chunk[i], t, zero_key);
  count = Reduce(temp).Sum(count);
  if (threadIdx.x == 0) counts[blockIdx.x] = count;
}

// The same chunks, each writing its kept keys and their items from its offset in the row
// (`offsets`: the exclusive sum over every chunk of every row), up to `cap`: thread t's
// kept keys of the chunk's items t, t + kThreads, ... in turn, after those of the threads
// before it. (The order among kept keys sets only torch.topk's order among equal float
// keys, which rank_candidates orders by float64 key.) All of a thread's loads are in
// flight before the one scan. The row's last chunk flags a row keeping fewer than `cands`
// or more than `cap`.
__global__ void __launch_bounds__(kThreads)
    write_kept_kernel(const float* keys, int64_t n, int64_t chunks, const float* threshold, float zero_key,
                      const int64_t* counts, const int64_t* offsets, int64_t cands, int64_t cap, float* kept_keys,
                      int64_t* kept_items, uint32_t* status) {
  using Scan = cub::BlockScan<int, kThreads>;
  __shared__ typename Scan::TempStorage temp;
  const int64_t row = blockIdx.x / chunks, chunk = blockIdx.x % chunks, start = chunk * kChunk;
  const int64_t row_first = offsets[row * chunks];
  const int64_t chunk_at = offsets[blockIdx.x] - row_first;
  if (chunk == chunks - 1 && threadIdx.x == 0) {
    const int64_t total = chunk_at + counts[blockIdx.x];
    if (total < cands || total > cap) atomicOr(status, kFloatKeyTies);
  }
  const float t = threshold[row];
  const float* chunk_keys = keys + row * n + start;
  const int len = static_cast<int>(n - start < kChunk ? n - start : kChunk);
  float v[kRounds];
  uint32_t keep = 0;  // bit r: item threadIdx.x + r kThreads is kept
#pragma unroll
  for (int r = 0; r < kRounds; ++r) {
    const int i = r * kThreads + threadIdx.x;
    v[r] = i < len ? chunk_keys[i] : 0.0f;
  }
#pragma unroll
  for (int r = 0; r < kRounds; ++r) {
    if (r * kThreads + static_cast<int>(threadIdx.x) < len && kept(v[r], t, zero_key)) keep |= 1u << r;
  }
  int before;
  Scan(temp).ExclusiveSum(__popc(keep), before);
  int64_t at = chunk_at + before;
  float* row_keys = kept_keys + row * cap;
  int64_t* row_items = kept_items + row * cap;
#pragma unroll
  for (int r = 0; r < kRounds; ++r) {
    if ((keep >> r & 1u) && at < cap) {
      row_keys[at] = v[r];
      row_items[at] = start + r * kThreads + threadIdx.x;
    }
    at += keep >> r & 1u;
  }
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> threshold_candidates(const DrawCall& call, const at::Tensor& keys, int64_t cands) {
  const int64_t rows = call.rows, n = call.n;
  // The sample's rank: its expected share of kept keys, cands / n, plus 4 standard
  // deviations and 4, so a row keeps fewer than cands with probability about 3e-5; `cap`
  // holds what that rank's share keeps plus 6 of its standard deviations.
  const int samples = kThreads * (n >= kLongRow ? kLongRowSamplesPerThread : kSamplesPerThread);
  const double share = static_cast<double>(cands) / n;
  const double mean = samples * share;
  const int rank = static_cast<int>(std::min<double>(samples - 1, std::floor(mean + 4 * std::sqrt(mean * (1 - share)) + 4)));
  const double kept_share = (rank + 1.0) / samples;
  const int64_t cap = std::min<int64_t>(
      n, static_cast<int64_t>(std::ceil(n * (kept_share + 6 * std::sqrt(kept_share * (1 - kept_share) / samples)))) + 64);
  const int64_t chunks = ceil_div(n, kChunk);
  TORCH_CHECK(rows * chunks < (int64_t{1} << 31), "multinomial: too many items for one call (", rows * n, ")");
  const float zero_key = call.logits ? -INFINITY : 0.0f;  // a zero weight's float key (race_keys_kernel)
  const auto opts = keys.options();
  at::Tensor threshold = at::empty({rows}, opts);
  at::Tensor counts = at::empty({rows * chunks * 2}, opts.dtype(at::kLong));
  int64_t* count = counts.mutable_data_ptr<int64_t>();
  int64_t* offset = count + rows * chunks;
  const float* k = keys.const_data_ptr<float>();
  if (n >= kLongRow) {
    sample_threshold_kernel<kLongRowSamplesPerThread>
        <<<rows, kThreads, 0, call.stream>>>(k, n, rank, call.philox, threshold.mutable_data_ptr<float>());
  } else {
    sample_threshold_kernel<kSamplesPerThread>
        <<<rows, kThreads, 0, call.stream>>>(k, n, rank, call.philox, threshold.mutable_data_ptr<float>());
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  count_kept_kernel<<<rows * chunks, kThreads, 0, call.stream>>>(k, n, chunks, threshold.const_data_ptr<float>(),
                                                                 zero_key, count);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  size_t bytes = 0;
  C10_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, bytes, count, offset, static_cast<int>(rows * chunks), call.stream));
  at::Tensor scratch = at::empty({static_cast<int64_t>(bytes)}, opts.dtype(at::kByte));
  C10_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(scratch.mutable_data_ptr(), bytes, count, offset, static_cast<int>(rows * chunks),
                                               call.stream));
  // Unfilled places: -inf keys of item 0, never among the top cands of a row not flagged.
  at::Tensor kept_keys = at::full({rows, cap}, -INFINITY, opts);
  at::Tensor kept_items = at::zeros({rows, cap}, opts.dtype(at::kLong));
  write_kept_kernel<<<rows * chunks, kThreads, 0, call.stream>>>(
      k, n, chunks, threshold.const_data_ptr<float>(), zero_key, count, offset, cands, cap,
      kept_keys.mutable_data_ptr<float>(), kept_items.mutable_data_ptr<int64_t>(), call.status);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  // One long kept row: torch.sort, one device-wide radix sort, costs less than
  // torch.topk's select and then its sort of the candidates; more rows, or shorter:
  // torch.topk (docs/methods.md, "More than 64 draws without replacement").
  if (rows == 1 && cap > kSortKeptFrom) {
    auto [sorted, pos] = kept_keys.sort(-1, /*descending=*/true);
    const at::Tensor first = pos.narrow(-1, 0, cands);
    return {sorted.narrow(-1, 0, cands).contiguous(), kept_items.gather(-1, first)};
  }
  auto [cand_g, pos] = kept_keys.topk(cands, -1, /*largest=*/true, /*sorted=*/true);
  return {cand_g, kept_items.gather(-1, pos)};
}

}  // namespace wrs::multinomial
