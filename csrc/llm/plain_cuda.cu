// The plain LLM sampler on CUDA (plain_cuda.cuh says which calls): each row read once, then
// only the segments that can hold kept items read again. Its pieces: plain_parts_cuda.cuh
// (shared memory, segment loops), plain_top_k_cuda.cuh (phase 2), plain_top_p_cuda.cuh (top-p
// alone, by rejection).
// A row is served by a cluster of CTAs (route.h's size for rows that are not
// resident), each over whole 128-item segments of its share:
//   1. stream: a warp per segment, several segments in flight; per segment its largest
//      value m_j and the float64 sum s_j of its weights (exp(y - m_j) for logits, y for
//      probabilities), and whether any value is bad;
//   2. the row's maximum M; under top-k (a kernel of its own), the threshold: the k-th
//      largest segment maximum of the row is a floor under it (the maxima are k distinct
//      items), each CTA lists its items at or above the floor from its segments, and every
//      CTA runs the sample kernel's radix select over all the cluster's lists (over the row,
//      should a list overflow), then top-p by mass over the top-k set;
//   3. the segments whose maximum is kept re-summed over their kept items (the others hold
//      none); per segment S_j = s_j exp(m_j - M), scanned over the CTA and the cluster in
//      row order;
//   4. per sample, the 53-bit uniform point of the resident path; the segment holding it is
//      re-read by one warp and walked (top-p alone: rejection rounds of such draws).
#include "llm/plain_cuda.cuh"
#include "llm/plain_top_k_cuda.cuh"
#include "llm/plain_top_p_cuda.cuh"

#include <ATen/Dispatch.h>
#include <c10/cuda/CUDAException.h>

#include <cfloat>

namespace wrs::llm {
namespace {

template <typename scalar_t, bool kLogits, bool kTopK, bool kPlan, bool kTopN>
__global__ void __launch_bounds__(kPlainThreads, 2)  // two CTAs an SM: more loads in flight
    plain_kernel(const scalar_t* x, int64_t v, int64_t samples, Controls controls, at::PhiloxCudaState philox,
                 int64_t logprob_mode, int64_t* tokens, float* logprobs, uint8_t* deferred, PlanArg plan,
                 TopNArg top) {
  static_assert(!kTopN || (kLogits && kTopK && !kPlan), "top n: logits, the thresholds variant, no plan");
  extern __shared__ __align__(16) unsigned char smem[];  // top-k: over the 48 KB of static shared memory
  PlainShared& sh = *reinterpret_cast<PlainShared*>(smem);
  wait_for_previous_grid();  // started early behind the stream's previous kernel, whose outputs it reads
  let_next_grid_start();     // after the wait: a grid started sooner would only hold SMs to wait on this one
  cg::cluster_group cluster = cg::this_cluster();
  const int64_t cs = cluster.num_blocks();
  const int64_t row = blockIdx.x / cs;
  const int64_t rank = cluster.block_rank();
  const RowControls rc = row_controls(controls, row);
  const int64_t quads = (v + 3) / 4;
  const int64_t share = share_quads(v, cs);
  const int64_t q_begin = min(quads, rank * share), q_end = min(quads, (rank + 1) * share);
  const int nseg = static_cast<int>((q_end - q_begin + 31) / 32);
  const auto xr = make_row<kPlan>(plan, x, row, v, q_begin, q_end,
                                  reinterpret_cast<int32_t*>(smem + (kTopK ? kTopKOffset + sizeof(TopKShared)
                                                                           : kTopKOffset)),
                                  plan.stage_words, plan.stage_values);
  const bool aligned = four_aligned(xr);
  const float scale = kLogits ? rc.inv_temperature : 1.0f;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // Top-p alone by rejection: one sample, and no log-probabilities under the top-p set (whose
  // total rejection does not find).
  const bool rejection_fits = samples == 1 && !(logprobs != nullptr && logprob_mode == kProcessed);
  if (deferred) {  // per-row controls: greedy rows, top-p alone where rejection does not fit, and k over 1,024 go to the sample kernel
    const bool serve = !rc.valid || (!rc.greedy && (rc.top_k_on(v) ? kTopK && rc.top_k <= kPlainMaxTopK
                                                                     : !rc.top_p_on() || (kTopK && rejection_fits)));
    if (rank == 0 && threadIdx.x == 0) deferred[row] = !serve;
    if (kTopN && !serve && rank == 0 && threadIdx.x == 0) top.redo[row] = 1;
    if (!serve) return;  // the same in every CTA of the row
  }
  const bool min_p = rc.min_p_on();
  const bool top_k = kTopK && rc.top_k_on(v);
  const bool top_p_alone = kTopK && !top_k && rc.top_p_on();  // served by rejection (rejection_fits)
  const bool filtering = min_p || top_k;
  const bool raw_all = filtering && logprobs != nullptr && logprob_mode == kRaw;
  const bool need_all = raw_all || top_p_alone;  // the whole row's weight (top-p: its estimate of M)

  // 1. stream, a warp's batch of segments reduced together (lane l ends with segment l / 8's)
  int bad = 0;
  const bool need_max = kLogits || min_p || top_k || top_p_alone;  // probabilities: only thresholds need it
  for (int seg0 = warp; seg0 < nseg; seg0 += kPlainWarps * kSegsInFlight) {
    float y[kSegsInFlight][4], m[kSegsInFlight];
    int present[kSegsInFlight];
    load_segments(xr, v, q_begin, q_end, nseg, aligned, scale, seg0, [](int) { return true; }, y, present);
#pragma unroll
    for (int u = 0; u < kSegsInFlight; ++u) {
      m[u] = -INFINITY;
#pragma unroll
      for (int h = 0; h < 4; ++h) {
        if (h < present[u]) {
          bad |= bad_value<kLogits>(y[u][h]);
          m[u] = fmaxf(m[u], y[u][h]);
        }
      }
    }
    const float seg_m = need_max ? warp_reduce_four(m, MaxOf()) : 0.0f;
    double s[kSegsInFlight];
#pragma unroll
    for (int u = 0; u < kSegsInFlight; ++u) {
      float w[4];
      weights_of<kLogits>(y[u], present[u], need_max ? __shfl_sync(0xffffffffu, seg_m, 8 * u) : 0.0f, w);
      s[u] = lane_sum(w);
    }
    const double seg_s = warp_reduce_four(s, Plus());
    const int seg = seg0 + lane / 8 * kPlainWarps;
    if (lane % 8 == 0 && seg < nseg) sh.seg_max[seg] = seg_m, sh.seg_sum[seg] = seg_s;
  }
  __syncthreads();

  // 2. the row's maximum and the threshold; 3. the re-sums, S_j and their scan
  float2 mine{-INFINITY, INFINITY};  // the largest segment maximum; top-k: the lowest positive one
  for (int j = threadIdx.x; j < nseg; j += kPlainThreads) {
    const float m = sh.seg_max[j];
    mine.x = fmaxf(mine.x, m);
    if (kTopK && positive_value<kLogits>(m)) mine.y = fminf(mine.y, m);
  }
  const int any_bad = __syncthreads_or(bad);
  if constexpr (kTopK) {
    const float2 range = cub::BlockReduce<float2, kPlainThreads>(sh.range_reduce).Reduce(mine, MaxLow());
    if (threadIdx.x == 0) sh.cta_max = range.x, sh.cta_low = range.y, sh.bad = any_bad;
  } else {
    const float block_max = cub::BlockReduce<float, kPlainThreads>(sh.max_reduce).Reduce(mine.x, MaxOf());
    if (threadIdx.x == 0) sh.cta_max = block_max, sh.bad = any_bad;
  }
  cluster.sync();
  // Each lane reads one CTA's values; every thread folds them in rank order, as every CTA does.
  const float lane_max = cluster_lane_read(cluster, &sh.cta_max, -INFINITY);
  const float lane_low = kTopK ? cluster_lane_read(cluster, &sh.cta_low, INFINITY) : INFINITY;
  const int row_bad = __any_sync(0xffffffffu, cluster_lane_read(cluster, &sh.bad, 0));
  float row_max = -INFINITY, row_low = INFINITY;
  for (unsigned r = 0; r < cs; ++r) {
    row_max = fmaxf(row_max, __shfl_sync(0xffffffffu, lane_max, r));
    if (kTopK) row_low = fminf(row_low, __shfl_sync(0xffffffffu, lane_low, r));
  }
  auto segment_weight = [&](int j) -> double {  // S_j from s_j
    if (j >= nseg) return 0.0;
    const float m = sh.seg_max[j];
    return !kLogits ? sh.seg_sum[j] : m > -INFINITY ? sh.seg_sum[j] * exp(static_cast<double>(m) - row_max) : 0.0;
  };
  if (need_all) {
    double all = 0.0;
#pragma unroll
    for (int k = 0; k < kSegsPerThread; ++k) all += segment_weight(threadIdx.x * kSegsPerThread + k);
    const double cta_all = cub::BlockReduce<double, kPlainThreads>(sh.sum_reduce).Sum(all);
    if (threadIdx.x == 0) sh.cta_all = cta_all;
  }
  __syncthreads();  // every s_j read before the re-sums replace them
  TopNShared* tn = kTopN ? reinterpret_cast<TopNShared*>(smem + kTopNOffset) : nullptr;
  const uint32_t thr = top_k ? top_k_threshold<scalar_t, kLogits, kTopN>(
                                   sh, *reinterpret_cast<TopKShared*>(smem + kTopKOffset), tn, top.n, cluster, xr, v,
                                   share, aligned, scale, row_max, row_low, rc)
                             : 0u;
  const bool top_n = kTopN && top_k && tn->done;  // thread-uniform: written before the threshold's syncs
  // Kept: key >= the top-k (top-p) threshold, and y >= log(min_p) + max (logits) or
  // min_p * max. Both are thresholds on y, so a segment holds a kept item exactly where its
  // maximum is kept, and only those are re-read and re-summed.
  const float log_min_p = log_min_p_of(rc.min_p);
  auto kept = [&](float y) {
    return order_key(y) >= thr && (!min_p || min_p_keeps<kLogits>(y, row_max, rc.min_p, log_min_p));
  };
  if (filtering) {
    for (int seg = warp; seg < nseg; seg += kPlainWarps) {
      const float m = sh.seg_max[seg];
      double s = 0.0;
      if (kept(m)) {  // the same for the whole warp
        const int64_t q = q_begin + static_cast<int64_t>(seg) * 32 + lane;
        float y[4], w[4];
        const int present = q < q_end ? load_four(xr, v, q, aligned, scale, y) : 0;
        weights_of<kLogits>(y, present, m, w);
#pragma unroll
        for (int h = 0; h < 4; ++h) w[h] = kept(y[h]) ? w[h] : 0.0f;
        s = warp_sum(lane_sum(w));
      }
      if (lane == 0) sh.seg_sum[seg] = s;
    }
    __syncthreads();
  }
  double seg_weight[kSegsPerThread], seg_before[kSegsPerThread];
#pragma unroll
  for (int k = 0; k < kSegsPerThread; ++k) seg_weight[k] = segment_weight(threadIdx.x * kSegsPerThread + k);
  double cta_total = 0.0;
  cub::BlockScan<double, kPlainThreads>(sh.scan).ExclusiveSum(seg_weight, seg_before, cta_total);
  if (threadIdx.x == 0) sh.cta_total = cta_total;
  cluster.sync();
  // Folded in rank order, so that each CTA's range starts where the one before ends.
  const double lane_total = cluster_lane_read(cluster, &sh.cta_total, 0.0);
  const double lane_all = need_all ? cluster_lane_read(cluster, &sh.cta_all, 0.0) : 0.0;
  double cta_before = 0.0, grand = 0.0, grand_all = 0.0;
  for (unsigned r = 0; r < cs; ++r) {
    const double t = __shfl_sync(0xffffffffu, lane_total, r);
    if (r < rank) cta_before += t;
    grand += t;
    if (need_all) grand_all += __shfl_sync(0xffffffffu, lane_all, r);
  }
  cluster.sync();  // no CTA leaves while another reads its shared memory

  // 4. the draws
  const bool row_ok = rc.valid && !row_bad && grand > 0.0;
  if (kTopN && rank == 0 && threadIdx.x == 0) top.redo[row] = !(top_n && row_ok);
  if (!row_ok) {
    if (rank == 0) {
      for (int64_t s = threadIdx.x; s < samples; s += kPlainThreads) {
        tokens[row * samples + s] = 0;
        if (logprobs) logprobs[row * samples + s] = NAN;
      }
    }
    return;
  }
  // Log-probabilities: under the kept weight, or (raw) under the whole row's.
  const double log_total = log(raw_all ? grand_all : grand);
  if (kTopN && top_n && rank == 0) {  // raw log-probs: raw_all holds (a top-k, raw mode)
    for (int64_t c = threadIdx.x; c < top.n; c += kPlainThreads) {
      top.top_tokens[row * top.n + c] = tn->top_index[c];
      top.top_lp[row * top.n + c] = static_cast<float>(log_share<true>(tn->top_y[c], row_max, log_total));
    }
  }
  const bool own_seed = controls.seeds != nullptr;
  const PhiloxSeed gen = philox_seed(philox);
  const uint64_t key = own_seed ? static_cast<uint64_t>(controls.seeds[row]) : gen.seed;
  const uint64_t offset = own_seed ? 0 : gen.offset;
  const uint64_t sub = subsequence(own_seed ? 0 : row, quads, 0);
  if (top_p_alone) {
    return draw_top_p_by_rejection<scalar_t, kLogits>(sh, cluster, xr, v, q_begin, q_end, nseg, aligned, scale,
                                                      row_max, rc, seg_weight, seg_before, cta_before, cta_total,
                                                      grand, grand_all, key, offset, own_seed ? 0 : row, tokens + row,
                                                      logprobs ? logprobs + row : nullptr, log_total);
  }
  const double below_grand = nextafter(grand, 0.0);
  for (int64_t s = 0; s < samples; ++s) {
    const uint4 w4 = philox_block_at(key, offset / 4 + s, sub);
    const double point = min(uniform53(w4) * grand, below_grand);
    if (point < cta_before || point >= cta_before + cta_total) continue;  // another CTA's (the same in a CTA)
    // >= 0: the CTA's range holds the point, so one of its segments does
    const int seg = claim_segment(seg_weight, seg_before, cta_before, point, &sh.claim[0], &sh.claim_lo[0]);
    int64_t item;
    float y;
    if (warp == 0) {
      const bool found = walk_to_point<scalar_t, kLogits>(sh, seg, sh.claim_lo[0], point, xr, v, q_begin, q_end,
                                                          aligned, scale, row_max, kept, item, y);
      if (found) {
        tokens[row * samples + s] = item;
        if (logprobs) logprobs[row * samples + s] = static_cast<float>(log_share<kLogits>(y, row_max, log_total));
      }
      if constexpr (kTopN) {
        // The rank: the kept draw's larger items are all in the gathered keys (they are kept).
        const unsigned who = __ballot_sync(0xffffffffu, found);
        if (top_n && who) {
          const uint32_t key = order_key(__shfl_sync(0xffffffffu, y, __ffs(who) - 1));
          const uint32_t* keys = reinterpret_cast<const TopKShared*>(smem + kTopKOffset)->keys;
          unsigned above = 0;
          for (int j = lane; j < tn->total; j += 32) above += keys[j] > key;
          above = __reduce_add_sync(0xffffffffu, above);
          if (found) top.ranks[row * samples + s] = static_cast<int64_t>(above) + 1;
        }
      }
    }
    __syncthreads();
  }
}

template <typename scalar_t, bool kLogits, bool kTopK, bool kPlan = false, bool kTopN = false>
void launch(const Call& call, at::PhiloxCudaState philox, int64_t* tokens, float* logprobs, uint8_t* deferred,
            int cluster, TopNArg top = {}) {
  PlanArg plan{call.plan, call.plan_stride, call.plan_cap};
  const size_t base = kTopN ? kTopNOffset + sizeof(TopNShared) : kTopK ? kTopKOffset + sizeof(TopKShared) : kTopKOffset;
  constexpr size_t kPlanSmem = 113 * 1024;  // two CTAs an SM (__launch_bounds__) share its 227 KB
  if (kPlan) plan.stage_for(share_items(call.v, cluster), static_cast<int64_t>(kPlanSmem - base));
  const size_t smem = kPlan ? base + plan.stage_bytes() : kTopK ? base : sizeof(PlainShared);
  // The attribute is set once a device: a plan's launches take up to kPlanSmem.
  auto kernel = plain_kernel<scalar_t, kLogits, kTopK, kPlan, kTopN>;
  if (kTopK || kPlan) allow_shared_memory<plain_kernel<scalar_t, kLogits, kTopK, kPlan, kTopN>>(kPlan ? kPlanSmem : smem);
  launch_clusters(true, kernel, call.rows, cluster, kPlainThreads, smem, call.x.const_data_ptr<scalar_t>(), call.v,
                  call.samples, call.controls, philox, call.logprobs, tokens, logprobs, deferred, plan, top);
}

}  // namespace

void launch_plain(const Call& call, const Route& route, at::PhiloxCudaState philox, int64_t* tokens, float* logprobs,
                  uint8_t* deferred, const TopNArg* top) {
  const bool thresholds = route.kernel == Kernel::kPlainThresholds;
  TORCH_INTERNAL_ASSERT(!top || (thresholds && call.logits && !call.plan && call.logprobs == kRaw && logprobs));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, call.x.scalar_type(), "sample_llm_plain", [&] {
    if (top) {
      launch<scalar_t, true, true, false, true>(call, philox, tokens, logprobs, deferred, route.cluster, *top);
    } else if (call.plan) {  // penalty plans are of logits
      thresholds ? launch<scalar_t, true, true, true>(call, philox, tokens, logprobs, deferred, route.cluster)
                 : launch<scalar_t, true, false, true>(call, philox, tokens, logprobs, deferred, route.cluster);
    } else if (call.logits) {
      thresholds ? launch<scalar_t, true, true>(call, philox, tokens, logprobs, deferred, route.cluster)
                 : launch<scalar_t, true, false>(call, philox, tokens, logprobs, deferred, route.cluster);
    } else {
      thresholds ? launch<scalar_t, false, true>(call, philox, tokens, logprobs, deferred, route.cluster)
                 : launch<scalar_t, false, false>(call, philox, tokens, logprobs, deferred, route.cluster);
    }
  });
}

}  // namespace wrs::llm
