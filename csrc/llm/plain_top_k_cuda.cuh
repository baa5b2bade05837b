#pragma once
// The plain kernel's top-k phase (plain_cuda.cu, phase 2): the threshold over the cluster's
// lists of items at or above the k-th largest segment maximum.
#include "llm/plain_parts_cuda.cuh"

namespace wrs::llm {
namespace {

static_assert(kPlainThreads == kThreads, "the select's scans assume the plain kernel's block");

// The top-k threshold key of a row (then top-p's over the top-k set, where on): the lowest
// kept key, 0 keeping every item; the same in every CTA of the cluster, which each select
// over the whole row's lists. Phase 2 of plain_cuda.cu's comment; not inlined, so its registers do
// not crowd the stream's. kTopN: the short lists' ranking also places the row's top n (n <= k:
// the lists hold every item at or above the k-th largest) in tn.
template <typename scalar_t, bool kLogits, bool kTopN, typename RowT>
__device__ __noinline__ uint32_t top_k_threshold(PlainShared& sh, TopKShared& ts, TopNShared* tn, int64_t n,
                                                 cg::cluster_group& cluster, RowT xr, int64_t v, int64_t share,
                                                 bool aligned, float scale, float row_max, const RowControls& rc) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const unsigned cs = cluster.num_blocks(), rank = cluster.block_rank();
  const int64_t quads = (v + 3) / 4;
  auto first_quad = [&](unsigned r) { return min(quads, static_cast<int64_t>(r) * share); };
  auto segments = [&](unsigned r) { return static_cast<int>((first_quad(r + 1) - first_quad(r) + 31) / 32); };
  const int bits = mass_bits(v);
  const bool need_mass = rc.top_p_on();
  auto positive = [](float y) { return kLogits ? y > -INFINITY : y > 0.0f; };
  auto mass = [&](float y) { return need_mass ? quantize_mass(mass_of<kLogits>(y, row_max), bits) : uint64_t{0}; };
  const uint64_t k = static_cast<uint64_t>(rc.top_k);
  CountMass ge{0, 0};
  // The floor: the k-th largest segment maximum of the row (every CTA's, complete since the
  // cluster step that found the row's maximum).
  const uint32_t floor = cta_select(
      ts.select,
      [&](auto&& f) {
        for (unsigned r = 0; r < cs; ++r) {
          const float* seg_max = cluster.map_shared_rank(sh.seg_max, r);
          for (int j = threadIdx.x; j < segments(r); j += kPlainThreads) {
            if (positive(seg_max[j])) f(order_key(seg_max[j]), uint64_t{0});
          }
        }
      },
      false, k, 0u, ge);
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
  bool listed = true;
  int total = 0;
  for (unsigned r = 0; r < cs; ++r) {
    const int n = cluster.map_shared_rank(&ts, r)->listed;
    listed &= n <= kCandidates;
    total += n;
  }
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
    uint32_t key = 0;
    uint64_t q = 0;
    float y = 0.0f;
    int32_t index = 0;
    if (mine) {
      int i = threadIdx.x;
      unsigned r = 0;
      for (; i >= cluster.map_shared_rank(&ts, r)->listed; ++r) i -= cluster.map_shared_rank(&ts, r)->listed;
      y = cluster.map_shared_rank(&ts, r)->candidates[i];
      key = order_key(y), q = mass(y);
      ts.keys[threadIdx.x] = key, ts.masses[threadIdx.x] = q;
      if constexpr (kTopN) index = cluster.map_shared_rank(tn, r)->listed_index[i], tn->index[threadIdx.x] = index;
    }
    __syncthreads();
    if (mine) {
      uint64_t above = 0, at_or_above = 0;
      int tied_before = 0;  // equal values at lower indices: the composite key's order
      for (int j = 0; j < total; ++j) {
        above += ts.keys[j] > key, at_or_above += ts.keys[j] >= key;
        if constexpr (kTopN) tied_before += ts.keys[j] == key && tn->index[j] < index;
      }
      if (above < k && k <= at_or_above) ts.thr_k = key;  // every writer writes the same key
      if constexpr (kTopN) {
        const uint64_t place = above + tied_before;
        if (place < static_cast<uint64_t>(n)) tn->top_index[place] = index, tn->top_y[place] = y;
      }
    }
    __syncthreads();
    const uint32_t tk = ts.thr_k;
    if (!need_mass) return tk;
    if (mine && key >= tk) atomicAdd(&ts.mass_k, static_cast<unsigned long long>(q));
    __syncthreads();
    const uint64_t target = top_p_target(rc.top_p, ts.mass_k);
    if (mine && key >= tk) {
      uint64_t above = 0, at_or_above = 0;
      for (int j = 0; j < total; ++j) {
        const uint32_t kj = ts.keys[j];
        if (kj >= tk) above += kj > key ? ts.masses[j] : 0, at_or_above += kj >= key ? ts.masses[j] : 0;
      }
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
