#pragma once
// The plain kernel's top-k phase (plain_cuda.cu, phase 2): the threshold over the cluster's
// lists of items at or above the k-th largest segment maximum.
#include "llm/plain_parts_cuda.cuh"

namespace wrs::llm {
namespace {

static_assert(kPlainThreads == kThreads, "the select's scans assume the plain kernel's block");

// The score the floor's bins divide evenly: a logit itself; a probability's bits, which grow
// about as its logarithm (an octave a 2^23), so that small probabilities keep bins of their own.
template <bool kLogits>
__device__ inline float floor_score(float y) {
  return kLogits ? y : static_cast<float>(__float_as_uint(y));
}

// A floor under the top-k threshold key: a key that at least k of the row's segment maxima
// reach (they are k distinct items, so the k-th largest item does too), 0 where fewer than k
// carry weight. The maxima go into kPlainThreads bins of their scores' range [low, max], each
// bin keeping its count and its lowest key; the floor is the lowest key of the bin where the
// count from the top reaches k. One pass over the cluster's maxima, where a radix select
// takes a pass a level; the floor lies at most one bin under the k-th largest maximum.
template <bool kLogits>
__device__ inline uint32_t segment_floor(const PlainShared& sh, FloorShared& fs, cg::cluster_group& cluster,
                                         int64_t quads, int64_t share, float row_max, float row_low, uint64_t k) {
  const unsigned cs = cluster.num_blocks();
  fs.count[threadIdx.x] = 0, fs.low[threadIdx.x] = UINT32_MAX;
  if (threadIdx.x == 0) fs.floor = 0;
  __syncthreads();
  const float top = floor_score<kLogits>(row_max), spread = top - floor_score<kLogits>(row_low);
  float inv = static_cast<float>(kPlainThreads) / spread;
  if (!(spread > 0.0f) || !(inv <= FLT_MAX)) inv = 0.0f;  // one value, or a range past float: one bin
  const int most = static_cast<int>((min(quads, share) + 31) / 32);  // CTA 0's segments, the most of any
  for (int j = threadIdx.x; j < most; j += kPlainThreads) {
    float m[kMaxCluster];
#pragma unroll
    for (unsigned r = 0; r < kMaxCluster; ++r) {  // the loads first, all in flight
      const int64_t q = static_cast<int64_t>(r) * share + int64_t{32} * j;
      m[r] = r < cs && q < quads ? cluster.map_shared_rank(sh.seg_max, r)[j] : NAN;
    }
#pragma unroll
    for (unsigned r = 0; r < kMaxCluster; ++r) {
      if (!positive_value<kLogits>(m[r])) continue;
      const float d = (top - floor_score<kLogits>(m[r])) * inv;  // monotone in m: bins keep the order
      const int bin = d < kPlainThreads - 1.0f ? static_cast<int>(d) : kPlainThreads - 1;
      atomicAdd(&fs.count[bin], 1u);
      atomicMin(&fs.low[bin], order_key(m[r]));
    }
  }
  __syncthreads();
  const uint32_t count = fs.count[threadIdx.x];
  uint32_t from_top;
  cub::BlockScan<uint32_t, kPlainThreads>(fs.scan).InclusiveSum(count, from_top);
  if (from_top >= k && from_top - count < k) fs.floor = fs.low[threadIdx.x];
  __syncthreads();
  return fs.floor;
}

// The top-k threshold key of a row (then top-p's over the top-k set, where on): the lowest
// kept key, 0 keeping every item; the same in every CTA of the cluster, which each select
// over the whole row's lists. Phase 2 of plain_cuda.cu's comment; not inlined, so its registers do
// not crowd the stream's. kTopN: the short lists' ranking also places the row's top n (n <= k:
// the lists hold every item at or above the k-th largest) in tn.
template <typename scalar_t, bool kLogits, bool kTopN, typename RowT>
__device__ __noinline__ uint32_t top_k_threshold(PlainShared& sh, TopKShared& ts, TopNShared* tn, int64_t n,
                                                 cg::cluster_group& cluster, RowT xr, int64_t v, int64_t share,
                                                 bool aligned, float scale, float row_max, float row_low,
                                                 const RowControls& rc) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const unsigned cs = cluster.num_blocks(), rank = cluster.block_rank();
  const int64_t quads = (v + 3) / 4;
  auto first_quad = [&](unsigned r) { return min(quads, static_cast<int64_t>(r) * share); };
  auto segments = [&](unsigned r) { return static_cast<int>((first_quad(r + 1) - first_quad(r) + 31) / 32); };
  const int bits = mass_bits(v);
  const bool need_mass = rc.top_p_on();
  auto positive = [](float y) { return positive_value<kLogits>(y); };
  auto mass = [&](float y) { return need_mass ? quantize_mass(mass_of<kLogits>(y, row_max), bits) : uint64_t{0}; };
  const uint64_t k = static_cast<uint64_t>(rc.top_k);
  CountMass ge{0, 0};
  const uint32_t floor = segment_floor<kLogits>(sh, ts.floor, cluster, quads, share, row_max, row_low, k);
  // This CTA's list: the items at or above the floor, from the segments whose maximum is.
  if (threadIdx.x == 0) ts.listed = 0;
  __syncthreads();
  const int64_t q_begin = first_quad(rank), q_end = first_quad(rank + 1);
  for (int seg = warp; seg < segments(rank); seg += kPlainWarps) {
    const float m = sh.seg_max[seg];
    if (!positive(m) || order_key(m) < floor) continue;  // the same for the whole warp
    const int64_t q = q_begin + static_cast<int64_t>(seg) * 32 + lane;
    float y[4];
    const int present = q < q_end ? load_four(xr, v, q, aligned, scale, y) : 0;
#pragma unroll
    for (int h = 0; h < 4; ++h) {
      const bool take = h < present && positive(y[h]) && order_key(y[h]) >= floor;
      const unsigned mask = __ballot_sync(0xffffffffu, take);
      int base = 0;
      if (lane == 0 && mask) base = atomicAdd(&ts.listed, __popc(mask));
      base = __shfl_sync(0xffffffffu, base, 0);
      const int at = base + __popc(mask & ((1u << lane) - 1u));
      if (take && at < kCandidates) {
        ts.candidates[at] = y[h];
        if constexpr (kTopN) tn->listed_index[at] = static_cast<int32_t>(4 * q + h);
      }
    }
  }
  cluster.sync();  // every CTA's list complete
  // The lists' lengths, a lane a CTA, and where each CTA's list starts in the gathered order.
  const int lane_listed = cluster_lane_read(cluster, &ts.listed, 0);
  int listed_to = lane_listed;  // inclusive prefix over the lanes (CTAs)
#pragma unroll
  for (int d = 1; d < kMaxCluster; d *= 2) {
    const int o = __shfl_up_sync(0xffffffffu, listed_to, d);
    if (lane >= d) listed_to += o;
  }
  const bool listed = __all_sync(0xffffffffu, lane_listed <= kCandidates);
  const int total = __shfl_sync(0xffffffffu, listed_to, kMaxCluster - 1);
  if (threadIdx.x == 0) ts.thr_k = 0, ts.thr_p = 0, ts.mass_k = 0;
  if (kTopN && threadIdx.x == 0) {
    tn->total = total;
    tn->done = listed && total <= kRanked && static_cast<uint64_t>(n) <= k && total >= n;
  }
  if (listed && total <= kRanked) {
    // Short lists (the usual case): thread t ranks item t of the lists against all of them.
    // The top-k threshold is the key with fewer than k items above it and k at or above;
    // top-p's, the key with less than the target's mass above it and the target at or above.
    const bool mine = static_cast<int>(threadIdx.x) < total;
    // Item t lies in the list of the first CTA whose lists up to it pass t.
    unsigned r = 0;
    int starts = 0;
    for (unsigned c = 0; c + 1 < cs; ++c) {
      const int to = __shfl_sync(0xffffffffu, listed_to, c);
      if (to <= static_cast<int>(threadIdx.x)) r = c + 1, starts = to;
    }
    uint32_t key = 0;
    uint64_t q = 0;
    float y = 0.0f;
    int32_t index = 0;
    if (mine) {
      const int i = static_cast<int>(threadIdx.x) - starts;
      y = cluster.map_shared_rank(&ts, r)->candidates[i];
      key = order_key(y), q = mass(y);
      ts.keys[threadIdx.x] = key, ts.masses[threadIdx.x] = q;
      if constexpr (kTopN) index = cluster.map_shared_rank(tn, r)->listed_index[i], tn->index[threadIdx.x] = index;
    }
    __syncthreads();
    if (mine) {
      uint64_t above = 0, at_or_above = 0;
      for (int j = 0; j < total; ++j) above += ts.keys[j] > key, at_or_above += ts.keys[j] >= key;
      if (above < k && k <= at_or_above) ts.thr_k = key;  // every writer writes the same key
      if constexpr (kTopN) {
        // Equal values at lower indices (the composite key's order), counted only for a tied
        // item that may be placed: reading the indices in the loop above slowed every row.
        uint64_t tied_before = 0;
        if (above < static_cast<uint64_t>(n) && at_or_above > above + 1) {
          for (int j = 0; j < total; ++j) tied_before += ts.keys[j] == key && tn->index[j] < index;
        }
        const uint64_t place = above + tied_before;
        if (place < static_cast<uint64_t>(n)) tn->top_index[place] = index, tn->top_y[place] = y;
      }
    }
    __syncthreads();
    const uint32_t tk = ts.thr_k;
    if (!need_mass) return tk;
    if (mine && key >= tk) {
      // One pass: the top-k set's mass (each thread sums it alike: exact integers) and the
      // mass above this item.
      uint64_t mass_k = 0, above = 0, at_or_above = 0;
      for (int j = 0; j < total; ++j) {
        const uint32_t kj = ts.keys[j];
        const uint64_t qj = kj >= tk ? ts.masses[j] : 0;
        mass_k += qj, above += kj > key ? qj : 0, at_or_above += kj >= key ? qj : 0;
      }
      const uint64_t target = top_p_target(rc.top_p, mass_k);
      if (above < target && target <= at_or_above) ts.thr_p = key;
    }
    __syncthreads();
    return max(tk, ts.thr_p);
  }
  auto each = [&](auto&& f) {
    if (listed) {
      for (unsigned r = 0; r < cs; ++r) {
        const TopKShared* o = cluster.map_shared_rank(&ts, r);
        const int n = o->listed;
        for (int i = threadIdx.x; i < n; i += kPlainThreads) f(order_key(o->candidates[i]), mass(o->candidates[i]));
      }
      return;
    }
    for (int64_t q = threadIdx.x; q < quads; q += kPlainThreads) {  // rare: ties past a list; the whole row
      float y[4];
      const int present = load_four(xr, v, q, aligned, scale, y);
      for (int h = 0; h < present; ++h) {
        if (positive(y[h]) && order_key(y[h]) >= floor) f(order_key(y[h]), mass(y[h]));
      }
    }
  };
  const uint32_t tk = cta_select(ts.select, each, false, k, floor, ge);
  if (!need_mass) return tk;
  // The top-k set's mass (all listed items' where fewer than k have weight: tk = 0).
  each([&](uint32_t key, uint64_t q) {
    if (key >= tk && q) atomicAdd(&ts.mass_k, static_cast<unsigned long long>(q));
  });
  __syncthreads();
  CountMass ge_p{0, 0};
  return max(tk, cta_select(ts.select, each, true, top_p_target(rc.top_p, ts.mass_k), tk, ge_p));
}

}  // namespace
}  // namespace wrs::llm
