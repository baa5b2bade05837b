// Top-p alone on CUDA, a CTA a row (route.h's Kernel::kTopP): scalar controls, one sample a
// row, no min-p, no processed log-probabilities. The law is the plain kernel's rejection
// (plain_top_p_cuda.cuh): proposals from the row's weights, the first whose mass above lies
// under the target's is taken, and when both of a round are rejected the higher becomes a
// pivot. What differs is the layout, which needs no cluster and no segment table:
//   1. stream: thread t reads quads t, t + T, t + 2T, ... (coalesced) and keeps their maximum
//      and weight (exp(y - m_t) for logits, rescaled as m_t rises; y for probabilities);
//   2. a block scan of the threads' weights; the thread whose range holds a proposal's point
//      is walked by one warp (its quads re-read, a lane a few);
//   3. the check: one pass sums, in float, the weights above each proposal. It also yields
//      each thread's weight above the higher one, the next round's scan input, so a rejected
//      round costs no pass of its own.
// The draw inverts each thread's quads in that order, not in row order: the same law.
// Decisions near the boundary take the exact integer masses, as in the plain kernel.
#include "llm/plain_cuda.cuh"
#include "llm/plain_parts_cuda.cuh"

#include <ATen/Dispatch.h>

namespace wrs::llm {
namespace {

constexpr int kTopPBatch = 4;  // quads a thread loads before it uses any
constexpr int kWalkQuads = 4;  // a lane's quads when a warp walks one thread's: kTopPMaxItems over 512 threads
static_assert(kTopPMaxItems <= int64_t{4} * 512 * 32 * kWalkQuads, "a warp walks any thread's quads at once");

template <int kThreads>
struct TopPShared {
  union {
    typename cub::BlockScan<double, kThreads, cub::BLOCK_SCAN_WARP_SCANS>::TempStorage scan;
    typename cub::BlockReduce<float, kThreads>::TempStorage max_reduce;
    typename cub::BlockReduce<double2, kThreads>::TempStorage pair_reduce;
    typename cub::BlockReduce<Masses, kThreads>::TempStorage mass_reduce;
  };
  float row_max;
  int claim[2];  // the thread whose range holds each proposal's point
  double lo[2];  // where that range starts
  int64_t pick[2];
  float pick_y[2];
  double point[2];  // the round's proposals' points
  int in;           // the proposal taken (-1: both rejected, -2: the exact masses decide), by thread 0
  // Thread 0's per-row state: the row's weight, p M and the estimates' slack, the target's
  // integer mass once known.
  double all, p_mass, slack;
  bool exact;
  uint64_t target;
};

// fn(y, present) for each batch of this thread's quads, loaded before any is used.
template <int kThreads, typename RowT, typename Fn>
__device__ inline void for_quads(const RowT& xr, int64_t v, int64_t quads, bool aligned, float scale, Fn fn) {
  for (int64_t q0 = threadIdx.x; q0 < quads; q0 += int64_t{kThreads} * kTopPBatch) {
    float y[kTopPBatch][4];
    int present[kTopPBatch];
    int64_t q[kTopPBatch];
    bool want[kTopPBatch];
#pragma unroll
    for (int u = 0; u < kTopPBatch; ++u) q[u] = q0 + int64_t{u} * kThreads, want[u] = q[u] < quads;
    load_quads(xr, v, q, want, aligned, scale, y, present);
    fn(y, present);
  }
}

// Warp-wide: the item of thread `owner`'s quads (in their order) where their cumulative weight
// passes `target`, or where rounding leaves it past their total, the last with weight. The
// lane holding it returns true with the item and its value.
template <int kThreads, typename RowT, typename Weight>
__device__ inline bool walk_owner(const RowT& xr, int64_t v, int64_t quads, bool aligned, float scale, int owner,
                                  double target, Weight weight, int64_t& item, float& value) {
  const int lane = threadIdx.x % 32;
  const int64_t count = owner < quads ? (quads - 1 - owner) / kThreads + 1 : 0;
  const int64_t per = (count + 31) / 32;
  float y[kWalkQuads][4];
  int present[kWalkQuads];
#pragma unroll
  for (int r = 0; r < kWalkQuads; ++r) {
    const int64_t k = lane * per + r;
    present[r] = r < per && k < count ? load_four(xr, v, owner + k * kThreads, aligned, scale, y[r]) : 0;
  }
  double mine = 0.0;
#pragma unroll
  for (int r = 0; r < kWalkQuads; ++r) {
    float w[4];
#pragma unroll
    for (int h = 0; h < 4; ++h) w[h] = h < present[r] ? weight(y[r][h]) : 0.0f;
    mine += lane_sum(w);
  }
  double cum = warp_inclusive_sum(mine) - mine;
  int64_t hit = -1, last = -1;
  float hit_y = 0.0f, last_y = 0.0f;
#pragma unroll
  for (int r = 0; r < kWalkQuads; ++r) {
#pragma unroll
    for (int h = 0; h < 4; ++h) {
      const float w = h < present[r] ? weight(y[r][h]) : 0.0f;
      cum += w;
      const int64_t i = 4 * (owner + (lane * per + r) * kThreads) + h;
      if (w > 0.0f) last = i, last_y = y[r][h];
      if (hit < 0 && w > 0.0f && target < cum) hit = i, hit_y = y[r][h];
    }
  }
  const unsigned found = __ballot_sync(0xffffffffu, hit >= 0);
  const unsigned with_weight = __ballot_sync(0xffffffffu, last >= 0);
  const int chosen = found ? __ffs(found) - 1 : with_weight ? 31 - __clz(with_weight) : -1;
  if (lane != chosen) return false;
  item = found ? hit : last, value = found ? hit_y : last_y;
  return true;
}

template <typename scalar_t, bool kLogits, int kThreads, bool kPlan>
__global__ void __launch_bounds__(kThreads, 1024 / kThreads)  // 64 registers: two CTAs of 512 an SM
    top_p_kernel(const scalar_t* x, int64_t v, Controls controls, at::PhiloxCudaState philox, int64_t* tokens,
                 float* logprobs, PlanArg plan) {
  __shared__ TopPShared<kThreads> sh;
  wait_for_previous_grid();  // started early behind the stream's previous kernel, whose outputs it reads
  let_next_grid_start();     // top-n's kernels wait for this one's end themselves
  const int64_t row = blockIdx.x;
  const RowControls rc = row_controls(controls, row);
  const int64_t quads = (v + 3) / 4;
  extern __shared__ int32_t staging[];  // a plan's prefixes and values (kPlan)
  const auto xr = make_row<kPlan>(plan, x, row, v, 0, quads, staging, plan.stage_words, plan.stage_values);
  const bool aligned = four_aligned(xr);
  const float scale = kLogits ? rc.inv_temperature : 1.0f;
  const int warp = threadIdx.x / 32;

  // 1. stream: this thread's maximum m and weight s (relative to m for logits)
  float m = -INFINITY;
  double s = 0.0;
  int bad = 0;
  for_quads<kThreads>(xr, v, quads, aligned, scale, [&](const float (&y)[kTopPBatch][4], const int (&present)[kTopPBatch]) {
    float bm = -INFINITY;
#pragma unroll
    for (int u = 0; u < kTopPBatch; ++u) {
#pragma unroll
      for (int h = 0; h < 4; ++h) {
        if (h < present[u]) bad |= bad_value<kLogits>(y[u][h]), bm = fmaxf(bm, y[u][h]);
      }
    }
    if (kLogits && bm > m) s = m > -INFINITY ? s * __expf(m - bm) : 0.0, m = bm;
    if (!kLogits) m = fmaxf(m, bm);
    float f = 0.0f;
#pragma unroll
    for (int u = 0; u < kTopPBatch; ++u) {
#pragma unroll
      for (int h = 0; h < 4; ++h) {
        const bool in = h < present[u] && (!kLogits || m > -INFINITY);
        f += in ? (kLogits ? __expf(y[u][h] - m) : y[u][h]) : 0.0f;
      }
    }
    s += f;
  });
  const float block_max = cub::BlockReduce<float, kThreads>(sh.max_reduce).Reduce(m, MaxOf());
  if (threadIdx.x == 0) sh.row_max = block_max;
  const int any_bad = __syncthreads_or(bad);
  const float row_max = sh.row_max;
  // This thread's kept weight, in the check's units (exp(y - max) for logits, y for probabilities).
  double kept = !kLogits ? s : m > -INFINITY ? s * exp(static_cast<double>(m) - row_max) : 0.0;

  const int bits = mass_bits(v);
  auto positive = [](float y) { return kLogits ? y > -INFINITY : y > 0.0f; };
  uint32_t pivot = 0;
  bool pivoted = false;
  for (int64_t round = 0;; ++round) {
    double before, total;
    cub::BlockScan<double, kThreads, cub::BLOCK_SCAN_WARP_SCANS>(sh.scan).ExclusiveSum(kept, before, total);
    if (round == 0 && (!rc.valid || any_bad || !(total > 0.0))) {
      if (threadIdx.x == 0) tokens[row] = 0;
      if (threadIdx.x == 0 && logprobs) logprobs[row] = NAN;
      return;
    }
    if (threadIdx.x == 0) {
      if (round == 0) {
        // p M from the stream's total, and how far the exact masses may lie from the float sums:
        // kMassSlack of M, and V half-units of the integer masses.
        const double unit = ldexp(kLogits ? 1.0 : static_cast<double>(row_max), -bits);
        sh.all = total, sh.p_mass = static_cast<double>(rc.top_p) * total, sh.exact = false;
        sh.slack = 2.0 * (total * kMassSlack + (static_cast<double>(v) + 2.0) * unit);
      }
      const bool own_seed = controls.seeds != nullptr;
      const PhiloxSeed gen = philox_seed(philox);
      const uint64_t key = own_seed ? static_cast<uint64_t>(controls.seeds[row]) : gen.seed;
      const uint64_t offset = own_seed ? 0 : gen.offset;
      const uint64_t block = offset / 4 + (static_cast<uint64_t>(round / quads) << 32);
      const uint4 w4 = philox_block_at(key, block, subsequence(own_seed ? 0 : row, quads, 4 * (round % quads)));
      const double top = nextafter(total, 0.0);
      sh.point[0] = min(uniform53(w4) * total, top);
      sh.point[1] = min(uniform53(make_uint4(w4.z, w4.w, 0, 0)) * total, top);
    }
    if (threadIdx.x < 2) sh.claim[threadIdx.x] = -1, sh.pick[threadIdx.x] = -1;
    __syncthreads();
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      if (kept > 0.0 && before <= sh.point[j]) atomicMax(&sh.claim[j], static_cast<int>(threadIdx.x));
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      if (sh.claim[j] == static_cast<int>(threadIdx.x)) sh.lo[j] = before;
    }
    __syncthreads();
    // 2. warp j walks the thread that holds proposal j's point
    if (warp < 2 && sh.claim[warp] >= 0) {
      auto weight = [&](float y) {
        return !pivoted || order_key(y) > pivot ? (kLogits ? __expf(y - row_max) : y) : 0.0f;
      };
      int64_t item;
      float y;
      if (walk_owner<kThreads>(xr, v, quads, aligned, scale, sh.claim[warp], sh.point[warp] - sh.lo[warp], weight,
                               item, y)) {
        sh.pick[warp] = item, sh.pick_y[warp] = y;
      }
    }
    __syncthreads();
    if (sh.pick[0] < 0 || sh.pick[1] < 0) {  // no thread drew (float rounding of the ranges; not expected)
      if (threadIdx.x == 0) tokens[row] = 0;
      if (threadIdx.x == 0 && logprobs) logprobs[row] = NAN;
      return;
    }
    const uint32_t ka = order_key(sh.pick_y[0]), kb = order_key(sh.pick_y[1]);
    const uint32_t k_lo = min(ka, kb);
    // 3. the check: the float mass above each proposal (and this thread's: the next round's weights)
    double above_a = 0.0, above_b = 0.0;
    for_quads<kThreads>(xr, v, quads, aligned, scale, [&](const float (&y)[kTopPBatch][4], const int (&present)[kTopPBatch]) {
      float a = 0.0f, b = 0.0f;
#pragma unroll
      for (int u = 0; u < kTopPBatch; ++u) {
#pragma unroll
        for (int h = 0; h < 4; ++h) {
          const uint32_t k = order_key(y[u][h]);
          const float w = h < present[u] && k > k_lo ? (kLogits ? __expf(y[u][h] - row_max) : y[u][h]) : 0.0f;
          a += k > ka ? w : 0.0f;
          b += k > kb ? w : 0.0f;
        }
      }
      above_a += a, above_b += b;
    });
    const double2 est = cub::BlockReduce<double2, kThreads>(sh.pair_reduce).Reduce(double2{above_a, above_b}, SumPair());
    // 1 surely in the set, 0 surely not, -1 too close to tell
    auto in_set = [&](double above) { return above + sh.slack < sh.p_mass ? 1 : above > sh.p_mass + sh.slack ? 0 : -1; };
    if (threadIdx.x == 0) {
      const int in0 = sh.exact ? -1 : in_set(est.x), in1 = sh.exact ? -1 : in_set(est.y);
      sh.in = in0 < 0 || (in0 == 0 && in1 < 0) ? -2 : in0 ? 0 : in1 ? 1 : -1;
    }
    __syncthreads();
    if (sh.in == -2) {  // too close to p M: the exact integer masses (the first time, the row's M too)
      const bool all = !sh.exact;
      Masses mine{0, {0, 0}};
      for_quads<kThreads>(xr, v, quads, aligned, scale, [&](const float (&y)[kTopPBatch][4], const int (&present)[kTopPBatch]) {
#pragma unroll
        for (int u = 0; u < kTopPBatch; ++u) {
#pragma unroll
          for (int h = 0; h < 4; ++h) {
            const uint32_t k = order_key(y[u][h]);
            if (h >= present[u] || !positive(y[u][h]) || !(all || k > k_lo)) continue;
            const uint64_t mass = quantize_mass(mass_of<kLogits>(y[u][h], row_max), bits);
            mine.all += mass;
            mine.above[0] += k > ka ? mass : 0;
            mine.above[1] += k > kb ? mass : 0;
          }
        }
      });
      const Masses exact = cub::BlockReduce<Masses, kThreads>(sh.mass_reduce).Reduce(mine, SumMasses());
      if (threadIdx.x == 0) {
        if (all) sh.target = top_p_target(rc.top_p, exact.all), sh.exact = true;
        sh.in = exact.above[0] < sh.target ? 0 : exact.above[1] < sh.target ? 1 : -1;
      }
      __syncthreads();
    }
    const int in = sh.in;  // the first proposal in the set
    if (in >= 0) {
      if (threadIdx.x == 0) {
        tokens[row] = sh.pick[in];
        const float yt = sh.pick_y[in];
        if (logprobs) logprobs[row] = static_cast<float>(log_share<kLogits>(yt, row_max, log(sh.all)));
      }
      return;
    }
    // Both rejected: the next round draws from the items above the higher proposal.
    pivot = max(ka, kb), pivoted = true;
    kept = ka > kb ? above_a : above_b;
  }
}

template <typename scalar_t, bool kLogits, int kThreads, bool kPlan = false>
void launch(const Call& call, at::PhiloxCudaState philox, int64_t* tokens, float* logprobs) {
  PlanArg plan{call.plan, call.plan_stride, call.plan_cap};
  constexpr int64_t kPlanSmem = (kThreads == 1024 ? 200 : 100) * 1024;  // beside TopPShared, 1 or 2 CTAs an SM
  if (kPlan) plan.stage_for(call.v, kPlanSmem);
  // The attribute is set once a device: a plan's launches take up to kPlanSmem.
  if (kPlan) allow_shared_memory<top_p_kernel<scalar_t, kLogits, kThreads, kPlan>>(kPlanSmem);
  launch_after_previous(top_p_kernel<scalar_t, kLogits, kThreads, kPlan>, static_cast<unsigned>(call.rows), kThreads,
                        plan.stage_bytes(), at::cuda::getCurrentCUDAStream(), call.x.const_data_ptr<scalar_t>(), call.v,
                        call.controls, philox, tokens, logprobs, plan);
}

}  // namespace

void launch_top_p(const Call& call, const Route& route, at::PhiloxCudaState philox, int64_t* tokens,
                  float* logprobs) {
  const bool wide = route.threads == 1024;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, call.x.scalar_type(), "sample_llm_top_p", [&] {
    if (call.plan) {  // penalty plans are of logits
      wide ? launch<scalar_t, true, 1024, true>(call, philox, tokens, logprobs)
           : launch<scalar_t, true, 512, true>(call, philox, tokens, logprobs);
    } else if (call.logits) {
      wide ? launch<scalar_t, true, 1024>(call, philox, tokens, logprobs)
           : launch<scalar_t, true, 512>(call, philox, tokens, logprobs);
    } else {
      wide ? launch<scalar_t, false, 1024>(call, philox, tokens, logprobs)
           : launch<scalar_t, false, 512>(call, philox, tokens, logprobs);
    }
  });
}

}  // namespace wrs::llm
