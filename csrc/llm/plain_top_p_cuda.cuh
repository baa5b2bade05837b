#pragma once
// The plain kernel's top-p alone (plain_cuda.cu): the draw by rejection with pivots.
#include "llm/plain_parts_cuda.cuh"

namespace wrs::llm {
namespace {

// Top-p alone, one sample a row (the top-k kernel variant): rejection. Draw from the kept
// weights (min-p's, over the items above the pivot); the draw t is in the top-p set exactly
// where the items with key above t's hold less than the target's integer mass (the sample
// kernel's set: ceil(p M) of the row's mass M, ties at the crossing value kept). If it is not,
// none of the set lies at or below t: t's key becomes the pivot and the draw is repeated over
// the items above it. Accepted draws follow the kept weights over the set exactly. Each round
// is one pass over the segments whose maximum is above the pivot (the first over the row, for
// M), which also sums the next round's weights. Round r > 0 takes its uniform point from
// subsequence r of the row's range. All CTAs of the cluster take the same decisions.
template <typename scalar_t, bool kLogits>
__device__ __noinline__ void draw_top_p_by_rejection(PlainShared& sh, cg::cluster_group& cluster, const scalar_t* xr,
                                                     int64_t v, int64_t q_begin, int64_t q_end, int nseg, bool aligned,
                                                     float scale, float row_max, const RowControls& rc,
                                                     double (&seg_weight)[kSegsPerThread],
                                                     double (&seg_before)[kSegsPerThread], double cta_before,
                                                     double cta_total, double grand, uint64_t key, uint64_t offset,
                                                     int64_t tag, int64_t* token, float* logprob, double log_norm) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const unsigned cs = cluster.num_blocks();
  const int64_t quads = (v + 3) / 4;
  const int bits = mass_bits(v);
  const bool min_p = rc.min_p_on();
  const float log_min_p = log_min_p_of(rc.min_p);
  auto positive = [](float y) { return kLogits ? y > -INFINITY : y > 0.0f; };
  uint32_t pivot = 0;
  bool pivoted = false;
  auto kept = [&](float y) {
    return (!pivoted || order_key(y) > pivot) && (!min_p || min_p_keeps<kLogits>(y, row_max, rc.min_p, log_min_p));
  };
  auto segment_weight = [&](int j) -> double {  // S_j from s_j
    if (j >= nseg) return 0.0;
    const float m = sh.seg_max[j];
    return !kLogits ? sh.seg_sum[j] : m > -INFINITY ? sh.seg_sum[j] * exp(static_cast<double>(m) - row_max) : 0.0;
  };
  uint64_t target = 0;
  for (int64_t round = 0;; ++round) {
    if (round > 0) {  // the kept weights above the pivot (summed by the last check): scan, the cluster's totals
#pragma unroll
      for (int k = 0; k < kSegsPerThread; ++k) seg_weight[k] = segment_weight(threadIdx.x * kSegsPerThread + k);
      cub::BlockScan<double, kPlainThreads>(sh.scan).ExclusiveSum(seg_weight, seg_before, cta_total);
      if (threadIdx.x == 0) sh.cta_total = cta_total;
      cluster.sync();
      cta_before = 0.0, grand = 0.0;
      for (unsigned r = 0; r < cs; ++r) {
        const double t = cluster.map_shared_rank(&sh, r)->cta_total;
        if (r < cluster.block_rank()) cta_before += t;
        grand += t;
      }
    }
    // The draw: the CTA whose range holds the point finds the item.
    const uint4 w4 = philox_block_at(key, offset / 4, subsequence(tag, quads, 4 * (round % quads)));
    const double point = min(uniform53(w4) * grand, nextafter(grand, 0.0));
    if (threadIdx.x == 0) sh.pick = -1;
    __syncthreads();
    if (point >= cta_before && point < cta_before + cta_total) {  // the same in a CTA
      const int seg = claim_segment(seg_weight, seg_before, cta_before, point, &sh.claim, &sh.claim_lo);
      int64_t item;
      float y;
      if (warp == 0 && walk_to_point<scalar_t, kLogits>(sh, seg, point, xr, v, q_begin, q_end, aligned, scale, row_max,
                                                        kept, item, y)) {
        sh.pick = item, sh.pick_y = y;
      }
    }
    cluster.sync();  // every CTA's pick written (and, past round 0, every cta_total read)
    int64_t t = -1;
    float yt = 0.0f;
    for (unsigned r = 0; r < cs; ++r) {
      const PlainShared* o = cluster.map_shared_rank(&sh, r);
      if (o->pick >= 0) t = o->pick, yt = o->pick_y;
    }
    if (t < 0) {  // no CTA drew (float rounding of the ranges; not expected): token 0, as an invalid row
      if (cluster.block_rank() == 0 && threadIdx.x == 0) {
        *token = 0;
        if (logprob) *logprob = NAN;
      }
      cluster.sync();  // every CTA done reading picks
      return;
    }
    // The check: the integer mass above the draw (and, in round 0, the row's). The same pass
    // sums the kept weights above the draw per segment: the next round's, if it is rejected.
    const uint32_t kt = order_key(yt);
    auto above_kt = [&](float y) { return order_key(y) > kt && (!min_p || min_p_keeps<kLogits>(y, row_max, rc.min_p, log_min_p)); };
    auto wanted = [&](int seg) {
      const float m = sh.seg_max[seg];
      return positive(m) && (round == 0 || order_key(m) > kt);
    };
    // Round 0 needs every item's mass (for M); later rounds and the weights need only the
    // items above the draw, and a segment whose maximum is not above it holds none.
    uint64_t all = 0, above = 0;
    for_segments(xr, v, q_begin, q_end, nseg, aligned, scale, wanted,
                 [&](int seg, const float (&y)[4], int present) {
#pragma unroll
                   for (int h = 0; h < 4; ++h) {
                     const bool up = order_key(y[h]) > kt;
                     if (h >= present || !positive(y[h]) || !(round == 0 || up)) continue;
                     const uint64_t mass = quantize_mass(mass_of<kLogits>(y[h], row_max), bits);
                     all += mass;
                     above += up ? mass : 0;
                   }
                   double sum = 0.0;
                   if (order_key(sh.seg_max[seg]) > kt) {  // the same for the whole warp
                     float w[4];
                     weights_of<kLogits>(y, present, sh.seg_max[seg], w);
#pragma unroll
                     for (int h = 0; h < 4; ++h) w[h] = above_kt(y[h]) ? w[h] : 0.0f;
                     sum = warp_sum(lane_sum(w));
                   }
                   if (lane == 0) sh.seg_sum[seg] = sum;
                 });
    const uint64_t cta_all = cub::BlockReduce<uint64_t, kPlainThreads>(sh.mass_reduce).Sum(all);
    __syncthreads();
    const uint64_t cta_above = cub::BlockReduce<uint64_t, kPlainThreads>(sh.mass_reduce).Sum(above);
    if (threadIdx.x == 0) sh.cta_mass = cta_all, sh.cta_above = cta_above;
    cluster.sync();
    uint64_t row_mass = 0, row_above = 0;
    for (unsigned r = 0; r < cs; ++r) {
      const PlainShared* o = cluster.map_shared_rank(&sh, r);
      row_mass += o->cta_mass, row_above += o->cta_above;
    }
    cluster.sync();  // every CTA done reading before the next round rewrites
    if (round == 0) target = top_p_target(rc.top_p, row_mass);
    if (row_above < target) {  // in the top-p set
      if (sh.pick >= 0 && threadIdx.x == 0) {
        *token = t;
        if (logprob) *logprob = static_cast<float>((kLogits ? yt : log(yt)) - log_norm);
      }
      return;
    }
    pivot = kt, pivoted = true;
  }
}

}  // namespace
}  // namespace wrs::llm
