// CUDA kernel of speculative_accept (the law in llm_cpu.cpp's speculative_rows, which this
// follows draw for draw). A row is served by a cluster of CTAs (route.h's size),
// each over whole 128-item segments of its share:
//   1. acceptance: warp 0's lanes test drafts j = lane, lane + 32, ... at once; the first
//      failure is the row's accepted count (every CTA of the row finds the same);
//   2. one read of the residual max(0, q - p) (or of the bonus row): per segment its float64
//      weight, scanned over the CTA and the cluster in row order; where the residual is all
//      zero, the target row is read instead;
//   3. the inverse CDF at a 53-bit uniform point: the segment holding it is walked by one warp.
#include "common/philox_cuda.cuh"
#include "llm/dispatch_cuda.h"
#include "llm/llm_ops.h"
#include "llm/segments_cuda.cuh"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cooperative_groups.h>
#include <cub/block/block_scan.cuh>
#include <torch/library.h>

#include <cfloat>

namespace wrs::llm {
namespace {

namespace cg = cooperative_groups;

constexpr int kSpecThreads = 512;
constexpr int kSpecWarps = kSpecThreads / 32;
constexpr int kSegsPerThread = 4;  // a thread's segments in the scan (blocked)
constexpr int kMaxSegments = kSpecThreads * kSegsPerThread;
constexpr int kSegsInFlight = 4;  // segments a warp loads before it sums any (warp_reduce_four's)

struct SpecShared {
  double seg_sum[kMaxSegments];
  double cta_total;
  double claim_lo;
  int64_t acc;
  int claim;
  typename cub::BlockScan<double, kSpecThreads>::TempStorage scan;
};

// The draw's weights of a lane's quad: the residual max(0, q - p), or q; bad or
// non-positive values weigh 0.
__device__ inline void spec_weights(const float (&q)[4], const float (&p)[4], int present, bool residual,
                                    float (&w)[4]) {
#pragma unroll
  for (int h = 0; h < 4; ++h) {
    const float x = residual ? fmaxf(0.0f, q[h] - p[h]) : q[h];
    w[h] = h < present && x > 0.0f && x <= FLT_MAX ? x : 0.0f;
  }
}

template <typename scalar_t, typename token_t>
__global__ void __launch_bounds__(kSpecThreads, 2)
    speculative_kernel(const scalar_t* draft, const token_t* draft_tokens, const scalar_t* target, int64_t s_count,
                       int64_t v, at::PhiloxCudaState philox, int64_t* out, int64_t* accepted) {
  __shared__ SpecShared sh;
  cg::cluster_group cluster = cg::this_cluster();
  const int64_t cs = cluster.num_blocks();
  const int64_t b = blockIdx.x / cs;
  const int64_t rank = cluster.block_rank();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const PhiloxSeed seed = philox_seed(philox);
  const int64_t quads = (v + 3) / 4;
  const uint64_t sub = subsequence(b, quads, 0);

  // 1. acceptance: draft j is kept where u_j p < q, u_j word j % 4 of block offset / 4 + 1 + j / 4
  if (warp == 0) {
    int64_t acc = s_count;
    for (int64_t base = 0; base < s_count; base += 32) {
      const int64_t j = base + lane;
      bool rejected = false;
      if (j < s_count) {
        const int64_t tok = static_cast<int64_t>(draft_tokens[b * s_count + j]);
        const bool in_range = tok >= 0 && tok < v;
        const double p = in_range ? static_cast<double>(draft[(b * s_count + j) * v + tok]) : 0.0;
        const double q = in_range ? static_cast<double>(target[(b * (s_count + 1) + j) * v + tok]) : 0.0;
        const uint4 w4 = philox_block_at(seed.seed, seed.offset / 4 + 1 + j / 4, sub);
        const uint32_t w = j % 4 == 0 ? w4.x : j % 4 == 1 ? w4.y : j % 4 == 2 ? w4.z : w4.w;
        rejected = !((w + 0.5) * 0x1.0p-32 * p < q);
      }
      const unsigned r = __ballot_sync(0xffffffffu, rejected);
      if (r) {
        acc = base + __ffs(r) - 1;
        break;
      }
    }
    if (lane == 0) sh.acc = acc;
  }
  __syncthreads();
  const int64_t acc = sh.acc;
  if (rank == 0) {
    for (int64_t j = threadIdx.x; j <= s_count; j += kSpecThreads) {
      if (j != acc) out[b * (s_count + 1) + j] = j < acc ? static_cast<int64_t>(draft_tokens[b * s_count + j]) : -1;
    }
    if (threadIdx.x == 0) accepted[b] = acc;
  }

  // 2. the segments' weights
  const scalar_t* q_row = target + (b * (s_count + 1) + acc) * v;
  const scalar_t* p_row = acc < s_count ? draft + (b * s_count + acc) * v : q_row;
  const bool q_aligned = four_aligned(q_row), p_aligned = four_aligned(p_row);
  const int64_t share = share_quads(v, cs);
  const int64_t q_begin = min(quads, rank * share), q_end = min(quads, (rank + 1) * share);
  // A segment is `chunks` runs of 128 items: one, unless the share holds over kMaxSegments runs.
  const int64_t runs = (q_end - q_begin + 31) / 32;
  const int64_t chunks = max(int64_t{1}, (runs + kMaxSegments - 1) / kMaxSegments);
  const int nseg = static_cast<int>((runs + chunks - 1) / chunks);
  auto load = [&](int seg, int64_t ch, bool residual, float (&w)[4]) {  // the weights of this lane's quad
    const int64_t q = q_begin + (seg * chunks + ch) * 32 + lane;
    float qv[4], pv[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    const int present = seg < nseg && q < q_end ? load_four(q_row, v, q, q_aligned, 1.0f, qv) : 0;
    if (residual && present > 0) load_four(p_row, v, q, p_aligned, 1.0f, pv);
    spec_weights(qv, pv, present, residual, w);
  };
  bool residual = acc < s_count;
  double seg_weight[kSegsPerThread], seg_before[kSegsPerThread];
  double cta_total = 0.0, cta_before = 0.0, grand = 0.0;
  for (;;) {
    for (int seg0 = warp; seg0 < nseg; seg0 += kSpecWarps * kSegsInFlight) {
      double s[kSegsInFlight] = {};
      for (int64_t ch = 0; ch < chunks; ++ch) {
        float w[kSegsInFlight][4];
#pragma unroll
        for (int u = 0; u < kSegsInFlight; ++u) load(seg0 + u * kSpecWarps, ch, residual, w[u]);
#pragma unroll
        for (int u = 0; u < kSegsInFlight; ++u) s[u] += lane_sum(w[u]);
      }
      const double total = warp_reduce_four(s, Plus());  // lane l: segment seg0 + l / 8 * kSpecWarps
      if (lane % 8 == 0 && seg0 + lane / 8 * kSpecWarps < nseg) sh.seg_sum[seg0 + lane / 8 * kSpecWarps] = total;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kSegsPerThread; ++k) {
      const int j = threadIdx.x * kSegsPerThread + k;
      seg_weight[k] = j < nseg ? sh.seg_sum[j] : 0.0;
    }
    cub::BlockScan<double, kSpecThreads>(sh.scan).ExclusiveSum(seg_weight, seg_before, cta_total);
    if (threadIdx.x == 0) sh.cta_total = cta_total;
    cluster.sync();
    cta_before = 0.0, grand = 0.0;
    for (unsigned r = 0; r < cluster.num_blocks(); ++r) {
      const double t = cluster.map_shared_rank(&sh, r)->cta_total;
      if (r < rank) cta_before += t;
      grand += t;
    }
    cluster.sync();  // no CTA rewrites (or leaves) while another reads its shared memory
    if (grand > 0.0 || !residual) break;
    residual = false;  // the residual is all zero: the target row (the same in every CTA)
  }

  // 3. the draw
  if (!(grand > 0.0)) {  // no positive target weight: token 0
    if (rank == 0 && threadIdx.x == 0) out[b * (s_count + 1) + acc] = 0;
    return;
  }
  const uint4 w4 = philox_block_at(seed.seed, seed.offset / 4, sub);
  const double point = min(uniform53(w4) * grand, nextafter(grand, 0.0));
  if (point < cta_before || point >= cta_before + cta_total) return;  // another CTA's (the same in a CTA)
  const int seg = claim_segment(seg_weight, seg_before, cta_before, point, &sh.claim, &sh.claim_lo);
  if (warp != 0) return;
  // Walk the segment's runs to the one holding the point; where rounding leaves the point
  // past them all, the last item with weight.
  double t = point - sh.claim_lo;
  int64_t last_run = -1;
  for (int64_t ch = 0; ch < chunks; ++ch) {
    float w[4];
    load(seg, ch, residual, w);
    const double run_total = warp_sum(lane_sum(w));
    if (run_total > 0.0) last_run = ch;
    if (t < run_total || ch + 1 == chunks) {
      if (!(t < run_total)) {  // past every run: the last run with weight, its last item
        load(seg, last_run, residual, w);
        t = INFINITY;
      }
      int h = 0;
      const int pick = walk_segment(w, t, h);
      const int64_t ch_q = t == INFINITY ? last_run : ch;
      if (lane == pick) out[b * (s_count + 1) + acc] = 4 * (q_begin + (seg * chunks + ch_q) * 32 + lane) + h;
      return;
    }
    t -= run_total;
  }
}

std::tuple<at::Tensor, at::Tensor> speculative_accept_cuda(const at::Tensor& draft_probs,
                                                           const at::Tensor& draft_tokens,
                                                           const at::Tensor& target_probs,
                                                           std::optional<at::Generator> generator) {
  check_speculative(draft_probs, draft_tokens, target_probs);
  const c10::cuda::CUDAGuard guard(draft_probs.device());
  const int64_t b = draft_probs.size(0), s = draft_probs.size(1), v = draft_probs.size(2);
  const auto dtype = at::promote_types(draft_probs.scalar_type(), target_probs.scalar_type());
  const at::Tensor draft = draft_probs.to(dtype).contiguous();
  const at::Tensor target = target_probs.to(dtype).contiguous();
  const at::Tensor tokens = draft_tokens.contiguous();
  at::Tensor out = at::empty({b, s + 1}, draft_probs.options().dtype(at::kLong));
  at::Tensor accepted = at::empty({b}, draft_probs.options().dtype(at::kLong));
  if (b == 0) return {out, accepted};
  const at::PhiloxCudaState philox = cuda_philox_state(generator, draft_probs.device().index(), 4 * (2 + s / 4));
  const int cluster = cluster_size(b, v, false);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, "speculative_accept_cuda", [&] {
    AT_DISPATCH_INDEX_TYPES(tokens.scalar_type(), "speculative_accept_cuda", [&] {
      launch_clusters(false, speculative_kernel<scalar_t, index_t>, b, cluster, kSpecThreads, 0,
                      draft.const_data_ptr<scalar_t>(), tokens.const_data_ptr<index_t>(),
                      target.const_data_ptr<scalar_t>(), s, v, philox, out.mutable_data_ptr<int64_t>(),
                      accepted.mutable_data_ptr<int64_t>());
    });
  });
  return {out, accepted};
}

}  // namespace

TORCH_LIBRARY_IMPL(wrs, CUDA, m) { m.impl("speculative_accept", &speculative_accept_cuda); }

}  // namespace wrs::llm
