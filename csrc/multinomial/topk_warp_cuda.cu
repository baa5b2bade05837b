// Without replacement, up to 64 draws per row in one pass: warps keep the top k race
// keys of their stretch (topk_warp.cuh); a long row's chunks are merged by a second
// kernel.
#include "multinomial/topk_warp.cuh"

namespace wrs::multinomial {
namespace {

// How a call's rows are spread: `warps` per row (a block serves 8 / warps rows), or 8
// warps over each of `chunks` chunks of a row. About one wave of the blocks the GPU holds
// at once, each warp streaming as long a stretch as that leaves: a stretch of m items
// admits about k (1 + ln(m / k)) keys, so longer stretches admit a smaller share, and
// fewer chunks leave fewer lists to merge. But a chunk needs only two trips of each warp
// (kMinChunkItems): few rows cut into longer chunks leave most SMs idle (docs/methods.md,
// "Without replacement").
struct Split {
  int warps;
  int64_t chunks;
};

Split split(int64_t rows, int64_t n, int64_t resident_blocks) {
  const int64_t resident_warps = resident_blocks * kWarpsPerBlock;
  int warps = 1;
  while (warps < kWarpsPerBlock && rows * warps < resident_warps && n > kItemsPerWarp * warps) warps *= 2;
  if (warps < kWarpsPerBlock) return {warps, 1};
  const int64_t most = std::max<int64_t>(1, n / kMinChunkItems);
  return {warps, std::max<int64_t>(1, std::min(resident_blocks / rows, most))};
}

template <typename scalar_t, typename Weights, int SLOTS>
int64_t resident_blocks() {
  static const int64_t blocks = [] {
    int per_sm = 0;
    C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, topk_kernel<scalar_t, Weights, SLOTS>,
                                                                 kThreads, 0));
    return static_cast<int64_t>(std::max(per_sm, 1)) * at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  }();
  return blocks;
}

template <typename scalar_t, typename Weights, int SLOTS>
void launch(const DrawCall& call, const Weights& wts) {
  const auto [warps, chunks] = split(call.rows, call.n, resident_blocks<scalar_t, Weights, SLOTS>());
  const scalar_t* x = call.x.const_data_ptr<scalar_t>();
  const int64_t quads = (call.n + 3) / 4;
  if (chunks == 1) {
    topk_kernel<scalar_t, Weights, SLOTS><<<ceil_div(call.rows, kWarpsPerBlock / warps), kThreads, 0, call.stream>>>(
        x, call.rows, call.n, call.k, warps, 1, quads, nullptr, wts, call.philox, call.out, nullptr, nullptr, nullptr,
        nullptr, nullptr, 0, call.status);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return;
  }
  const int64_t blocks = call.rows * chunks;
  at::Tensor keep;
  const auto [cand_key, cand_index, stats, row_floor_bits] =
      scratch_arrays<double, int64_t, ChunkStats, unsigned long long>(
          keep, call.x.options(), {blocks * call.k, blocks * call.k, blocks, call.rows});
  C10_CUDA_CHECK(cudaMemsetAsync(row_floor_bits, 0, call.rows * sizeof(unsigned long long), call.stream));
  topk_kernel<scalar_t, Weights, SLOTS><<<blocks, kThreads, 0, call.stream>>>(
      x, call.rows, call.n, call.k, kWarpsPerBlock, chunks, ceil_div(quads, chunks), nullptr, wts, call.philox,
      call.out, cand_key, cand_index, stats, row_floor_bits, nullptr, 0, call.status);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  merge_chunks_kernel<Weights, SLOTS><<<call.rows, kThreads, 0, call.stream>>>(
      call.k, chunks, cand_key, cand_index, stats, row_floor_bits, nullptr, nullptr, nullptr, 0, call.out,
      call.status);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace

void draw_topk(const DrawCall& call) {
  TORCH_INTERNAL_ASSERT(call.k <= kMaxTopK);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, call.x.scalar_type(), "topk_cuda", [&] {
    with_weights(call, [&](const auto& wts) {
      with_slots(call.k, [&](auto slots) { launch<scalar_t, std::decay_t<decltype(wts)>, decltype(slots)::value>(call, wts); });
    });
  });
}

}  // namespace wrs::multinomial
