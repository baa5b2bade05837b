#pragma once
// The plain kernel's top-p alone (plain_cuda.cu): the draw by rejection with pivots.
#include "llm/plain_parts_cuda.cuh"

namespace wrs::llm {
namespace {

// Top-p alone, one sample a row (the top-k kernel variant): rejection. Each round draws two
// proposals from the kept weights (min-p's, over the items above the pivot); a draw t is in
// the top-p set exactly where the items with key above t's hold less than the target's
// integer mass (the sample kernel's set: ceil(p M) of the row's mass M, ties at the crossing
// value kept). The first proposal in the set is taken: it follows the kept weights over the
// set exactly, as the two are independent draws of one law. If neither is, none of the set
// lies at or below the higher: its key becomes the pivot and the round is repeated over the
// items above it. Two proposals a round make a second round rare (on the benchmark's rows at
// p = 0.9, 1 row in 80 against 1 in 9), and a call lasts as long as its slowest row.
// A round's check reads only the segments whose maximum is above the lower proposal and sums,
// in float, the weights above each proposal; with M estimated by the stream's float64 total,
// that decides a proposal unless its mass lies within the error bound (kMassSlack) of p M.
// Only then are the exact integer masses summed (the first time over the whole row, for M).
// Round r takes words (x, y) and (z, w) of one Philox block of subsequence r of the row's
// range; rounds past the range's length count in the block counter's high word. All CTAs of
// the cluster take the same decisions.

template <typename scalar_t, bool kLogits, typename RowT>
__device__ __noinline__ void draw_top_p_by_rejection(PlainShared& sh, cg::cluster_group& cluster, RowT xr,
                                                     int64_t v, int64_t q_begin, int64_t q_end, int nseg, bool aligned,
                                                     float scale, float row_max, const RowControls& rc,
                                                     double (&seg_weight)[kSegsPerThread],
                                                     double (&seg_before)[kSegsPerThread], double cta_before,
                                                     double cta_total, double grand, double grand_all, uint64_t key,
                                                     uint64_t offset, int64_t tag, int64_t* token, float* logprob,
                                                     double log_total) {
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
  // p M from the stream's total (grand_all, in the same units as estimate()'s sums), and how
  // far the exact masses may lie from the estimates: kMassSlack of M, and V half-units of the
  // integer masses.
  const double unit = ldexp(kLogits ? 1.0 : static_cast<double>(row_max), -bits);
  const double slack = 2.0 * (grand_all * kMassSlack + (static_cast<double>(v) + 2.0) * unit);
  const double p_mass = static_cast<double>(rc.top_p) * grand_all;
  const bool estimated = isfinite(grand_all) && grand_all > 0.0;
  bool exact = false;
  uint64_t target = 0;
  auto in_set = [&](double above) -> int {  // 1 surely in the set, 0 surely not, -1 too close to tell
    return above + slack < p_mass ? 1 : above > p_mass + slack ? 0 : -1;
  };
  for (int64_t round = 0;; ++round) {
    if (round > 0) {  // the kept weights above the pivot (summed after the last check): scan, the cluster's totals
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
    // The draws: the CTA whose range holds a point claims its segment, and warp j walks proposal j's.
    const uint64_t block = offset / 4 + (static_cast<uint64_t>(round / quads) << 32);
    const uint4 w4 = philox_block_at(key, block, subsequence(tag, quads, 4 * (round % quads)));
    const double top = nextafter(grand, 0.0);
    const double point[2] = {min(uniform53(w4) * grand, top),
                             min(uniform53(make_uint4(w4.z, w4.w, 0, 0)) * grand, top)};
    if (threadIdx.x < 2) sh.pick[threadIdx.x] = -1;
    __syncthreads();
    int seg[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const bool mine = point[j] >= cta_before && point[j] < cta_before + cta_total;  // the same in a CTA
      seg[j] = mine ? claim_segment(seg_weight, seg_before, cta_before, point[j], &sh.claim[j], &sh.claim_lo[j]) : -1;
    }
    if (warp < 2) {
      const int j = warp, s = j == 0 ? seg[0] : seg[1];
      const double at = j == 0 ? point[0] : point[1];
      int64_t item;
      float y;
      if (s >= 0 && walk_to_point<scalar_t, kLogits>(sh, s, sh.claim_lo[j], at, xr, v, q_begin, q_end, aligned, scale,
                                                     row_max, kept, item, y)) {
        sh.pick[j] = item, sh.pick_y[j] = y;
      }
    }
    cluster.sync();  // every CTA's picks written (and, past round 0, every cta_total read)
    int64_t t[2] = {-1, -1};
    float yt[2] = {0.0f, 0.0f};
    for (unsigned r = 0; r < cs; ++r) {
      const PlainShared* o = cluster.map_shared_rank(&sh, r);
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        if (o->pick[j] >= 0) t[j] = o->pick[j], yt[j] = o->pick_y[j];
      }
    }
    if (t[0] < 0 || t[1] < 0) {  // no CTA drew (float rounding of the ranges; not expected): token 0, as an invalid row
      if (cluster.block_rank() == 0 && threadIdx.x == 0) {
        *token = 0;
        if (logprob) *logprob = NAN;
      }
      cluster.sync();  // every CTA done reading picks
      return;
    }
    // The check: the mass above each draw. First its float estimate, from the segments whose
    // maximum is above the lower draw; where that is within the bound of p M, the exact integer
    // masses (and, the first time, the row's M from every positive item).
    const uint32_t ka = order_key(yt[0]), kb = order_key(yt[1]);
    const uint32_t k_lo = min(ka, kb), k_hi = max(ka, kb);
    auto above_lo = [&](int seg) {
      const float m = sh.seg_max[seg];
      return positive(m) && order_key(m) > k_lo;
    };
    auto masses = [&](bool all) {
      Masses mine{0, {0, 0}};
      auto wanted = [&](int seg) { return all ? positive(sh.seg_max[seg]) : above_lo(seg); };
      for_segments(xr, v, q_begin, q_end, nseg, aligned, scale, wanted, [&](int, const float (&y)[4], int present) {
#pragma unroll
        for (int h = 0; h < 4; ++h) {
          const uint32_t k = order_key(y[h]);
          if (h >= present || !positive(y[h]) || !(all || k > k_lo)) continue;
          const uint64_t mass = quantize_mass(mass_of<kLogits>(y[h], row_max), bits);
          mine.all += mass;
          mine.above[0] += k > ka ? mass : 0;
          mine.above[1] += k > kb ? mass : 0;
        }
      });
      const Masses cta = cub::BlockReduce<Masses, kPlainThreads>(sh.mass_reduce).Reduce(mine, SumMasses());
      if (threadIdx.x == 0) sh.cta_masses = cta;
      cluster.sync();
      Masses row{0, {0, 0}};
      for (unsigned r = 0; r < cs; ++r) row = SumMasses()(row, cluster.map_shared_rank(&sh, r)->cta_masses);
      cluster.sync();  // every CTA done reading before the next pass rewrites
      return row;
    };
    auto estimate = [&]() {  // in the stream's units: exp(y - M) for logits, y for probabilities
      double2 mine{0.0, 0.0};
      for_segments(xr, v, q_begin, q_end, nseg, aligned, scale, above_lo, [&](int, const float (&y)[4], int present) {
        float a = 0.0f, b = 0.0f;
#pragma unroll
        for (int h = 0; h < 4; ++h) {
          const uint32_t k = order_key(y[h]);
          const float w = h < present && k > k_lo ? (kLogits ? __expf(y[h] - row_max) : y[h]) : 0.0f;
          a += k > ka ? w : 0.0f;
          b += k > kb ? w : 0.0f;
        }
        mine.x += a, mine.y += b;
      });
      const double2 cta = cub::BlockReduce<double2, kPlainThreads>(sh.pair_reduce).Reduce(mine, SumPair());
      if (threadIdx.x == 0) sh.cta_pair = cta;
      cluster.sync();
      double2 row{0.0, 0.0};
      for (unsigned r = 0; r < cs; ++r) row = SumPair()(row, cluster.map_shared_rank(&sh, r)->cta_pair);
      cluster.sync();  // every CTA done reading before the next pass rewrites
      return row;
    };
    int in0 = -1, in1 = -1;
    if (!exact && estimated) {
      const double2 a = estimate();
      in0 = in_set(a.x), in1 = in_set(a.y);
    }
    if (in0 < 0 || (in0 == 0 && in1 < 0)) {  // too close to p M to tell
      const Masses row = masses(!exact);
      if (!exact) target = top_p_target(rc.top_p, row.all), exact = true;
      in0 = row.above[0] < target, in1 = row.above[1] < target;
    }
    const int in = in0 ? 0 : in1 ? 1 : -1;  // the first proposal in the set
    if (in >= 0) {
      if (sh.pick[in] >= 0 && threadIdx.x == 0) {
        *token = t[in];
        if (logprob) *logprob = static_cast<float>(log_share<kLogits>(yt[in], row_max, log_total));
      }
      return;
    }
    // Both rejected: the next round's kept weights, those above the higher draw, per segment.
    pivot = k_hi, pivoted = true;
    auto above_pivot = [&](int seg) { return order_key(sh.seg_max[seg]) > pivot; };
    for_segments(xr, v, q_begin, q_end, nseg, aligned, scale, above_pivot,
                 [&](int seg, const float (&y)[4], int present) {
                   float w[4];
                   weights_of<kLogits>(y, present, sh.seg_max[seg], w);
#pragma unroll
                   for (int h = 0; h < 4; ++h) w[h] = kept(y[h]) ? w[h] : 0.0f;
                   const double sum = warp_sum(lane_sum(w));
                   if (lane == 0) sh.seg_sum[seg] = sum;
                 });
    for (int j = threadIdx.x; j < nseg; j += kPlainThreads) {
      if (!above_pivot(j)) sh.seg_sum[j] = 0.0;  // no item above the pivot
    }
    __syncthreads();
  }
}

}  // namespace
}  // namespace wrs::llm
