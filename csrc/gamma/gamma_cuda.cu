// standard_gamma on CUDA: persistent warps, one rejection candidate per loop trip (pair j
// is elements 2j and 2j+1, drawing from Philox subsequence j, see gamma.h). A lane whose
// pair is done stores it and takes the next while the others keep trying, so a warp never
// waits for its slowest lane's element: it runs about pairs / acceptance trips instead of
// the sum over pairs of the worst lane's candidate count (Ericsson 2024, sec. 2.7).
//
// Each warp walks its own contiguous range of pairs, and lanes finishing together claim
// the range's next unclaimed pairs in lane order (a ballot). The pairs a warp holds thus
// stay within a window of about 64, so its loads are contiguous and its stores fall in a
// few cache lines. (Striding each lane through the array on its own, as before, let the
// lanes drift apart by hundreds of pairs: at 2^26 elements most sectors were moved for a
// few bytes and the kernel ran 30-40% slower than at 2^24.) The output depends only on
// the seed, not on the grid.
#include "gamma/gamma_ops.h"

#include "common/cuda_utils.cuh"
#include "common/philox_cuda.cuh"
#include "common/status_word.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <optional>

namespace wrs::gamma {

namespace {

constexpr int kThreads = 256;
constexpr int kWarp = 32;

// Philox blocks of one pair's subsequence, in order (counter layout of curand_init).
struct SubsequenceBits {
  uint64_t seed;
  uint64_t block;  // offset / 4 + blocks consumed
  uint64_t subsequence;
  __device__ void start(const PhiloxSeed& s, uint64_t pair) {
    seed = s.seed;
    block = s.offset / 4;
    subsequence = pair;
  }
  // The next `blocks` Philox blocks into words (a candidate's: kBlocksPerCandidate).
  template <typename acc_t, int blocks = kBlocksPerCandidate<acc_t>>
  __device__ void next(CandidateWords<acc_t>& words) {
#pragma unroll
    for (int b = 0; b < blocks; ++b, ++block) {
      const uint4 r = philox_block_at(seed, block, subsequence);
      words.w[4 * b] = r.x;
      words.w[4 * b + 1] = r.y;
      words.w[4 * b + 2] = r.z;
      words.w[4 * b + 3] = r.w;
    }
  }
};

// Resident blocks per SM asked of the compiler (a register budget: 64 for float64, 40
// for float): the loop is long chains of dependent operations, and with fewer warps the
// schedulers ran out of eligible ones (float64 at 72 registers, 3 blocks: a third of the
// time; Nsight Compute, H100). At these budgets Marsaglia-Tsang spills 16 bytes in
// float64 and 4 in float.
template <typename scalar_t>
constexpr int kMinBlocksPerSm = std::is_same_v<at::opmath_type<scalar_t>, double> ? 4 : 6;

constexpr unsigned kAllLanes = 0xffffffffu;

// One warp runs the pairs [0, count) of a range through Pair<acc_t, Gen>: pair p draws
// from Philox subsequence first_subsequence + p. load(p, a0, a1) gives a pair's alphas
// (a1 = 0 where the pair has no second element), on_constant(a0, a1) sees the alphas of
// a pair with a constant element (zero, inf, negative or NaN alpha: where validation
// looks), and finish(p, x0, x1) takes its results. Indices within the range are 32-bit:
// registers are what bounds the resident warps.
template <typename acc_t, typename Gen, typename Load, typename OnConstant, typename Finish>
__device__ void run_warp_pairs(int count, int64_t first_subsequence, const PhiloxSeed& seed, bool log_output,
                               const Load& load, const OnConstant& on_constant, const Finish& finish) {
  const int lane = threadIdx.x % kWarp;
  const unsigned lanes_below = (1u << lane) - 1;
  // Each lane holds its pair p and has claimed its next one (alphas already loading, so
  // finishing never waits on memory); `claimed` is the same in every lane.
  int p = lane;
  int next_p = kWarp + lane;
  int claimed = 2 * kWarp;
  acc_t a0 = 0, a1 = 0, next0 = 0, next1 = 0;
  bool has_second = false, next_has_second = false;
  if (p < count) has_second = load(p, a0, a1);
  if (next_p < count) next_has_second = load(next_p, next0, next1);
  Pair<acc_t, Gen> pair;
  SubsequenceBits bits;
  // A pair's start: its subsequence; block 0 holds the boost uniforms, drawn only when
  // an element needs one; the candidates follow from block 1.
  auto begin_pair = [&] {
    pair.start(a0, a1, has_second);
    if (pair.any_constant()) on_constant(a0, a1);
    bits.start(seed, first_subsequence + p);
    if (pair.needs_boost) {
      CandidateWords<acc_t> words;
      bits.next<acc_t, 1>(words);  // the two boost uniforms fit in block 0, also in float64
      pair.boost_words(words);
    }
    bits.block = seed.offset / 4 + 1;
  };
  if (p < count) begin_pair();
  // One flat loop, left by the whole warp at once: lanes on different pairs stay
  // converged instead of splitting the warp for good.
  while (__any_sync(kAllLanes, p < count)) {
    bool finished = false;
    if (p < count) {
      CandidateWords<acc_t> words;
      bits.next(words);
      if (pair.step(words, log_output)) {
        finish(p, pair.out[0], pair.out[1]);
        finished = true;
      }
    }
    const unsigned finishing = __ballot_sync(kAllLanes, finished);
    if (finished) {
      p = next_p;
      a0 = next0;
      a1 = next1;
      has_second = next_has_second;
      next_p = claimed + __popc(finishing & lanes_below);
      if (next_p < count) next_has_second = load(next_p, next0, next1);
      if (p < count) begin_pair();
    }
    claimed += __popc(finishing);
  }
}

// VALIDATE: flag invalid alphas. Only pairs with a constant element can hold one, so
// the check runs on that rare branch, not on every load (a flags register OR-ed per load
// cost the loop 4-7%); validate=False compiles it out.
template <typename scalar_t, typename Gen, bool VALIDATE>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm<scalar_t>)
    standard_gamma_kernel(const scalar_t* __restrict__ alpha, scalar_t* __restrict__ out, int64_t n,
                          bool log_output, at::PhiloxCudaState philox, uint32_t* status) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t pairs = (n + 1) / 2;
  // This warp's pairs: first + [0, count).
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (kThreads / kWarp);
  const int64_t warp = static_cast<int64_t>(blockIdx.x) * (kThreads / kWarp) + threadIdx.x / kWarp;
  const int64_t per_warp = (pairs + warps - 1) / warps;
  const int64_t first = warp * per_warp;
  if (first >= pairs) return;  // the whole warp
  const int count = static_cast<int>(pairs - first < per_warp ? pairs - first : per_warp);
  auto load = [&](int p, acc_t& a0, acc_t& a1) {
    const int64_t e = 2 * (first + p);
    const bool has_second = e + 1 < n;
    a0 = static_cast<acc_t>(alpha[e]);
    a1 = has_second ? static_cast<acc_t>(alpha[e + 1]) : acc_t(0);
    return has_second;
  };
  // Invalid alphas come out NaN (no endless loop); validation flags them.
  auto on_constant = [&](acc_t a0, acc_t a1) {
    if (VALIDATE) {
      const uint32_t flags = alpha_flags(a0) | alpha_flags(a1);
      if (flags) atomicOr(status, flags);
    }
  };
  auto finish = [&](int p, acc_t x0, acc_t x1) {
    const int64_t e = 2 * (first + p);
    out[e] = static_cast<scalar_t>(x0);
    if (e + 1 < n) out[e + 1] = static_cast<scalar_t>(x1);
  };
  run_warp_pairs<acc_t, Gen>(count, first, philox_seed(philox), log_output, load, on_constant, finish);
}

// Fused Dirichlet rows (float and double): a warp per row (rows j, j + W, ...) generates
// the row's log-gammas as above (pair q of row r: elements 2q and 2q+1, Philox subsequence
// r * ceil(K / 2) + q), writing them to `out` and keeping an online log-sum-exp per lane;
// a warp reduction gives the row's log total L, and a second sweep over the row (from L1,
// the warp just wrote it) writes exp(log g - L). One read of the concentrations, one
// write of the rows, where the composite reads and writes each element three times.
// Invalid concentrations give NaN rows as the composite does: NaN or negative (NaN
// log-gamma), inf (+inf: inf - inf), a row of zeros (all -inf: L = -inf).
template <typename acc_t>
struct LogSumExp {
  acc_t max, sum;  // sum of exp(v - max); max = -inf while empty
  __device__ void add(acc_t v) {
    if (v != v) {
      sum = v;  // NaN stays NaN
    } else if (v > max) {
      sum = sum * ::exp(max - v) + 1;  // exp(-inf) = 0 while empty
      max = v;
    } else if (v > -INFINITY) {
      sum += ::exp(v - max);
    }
  }
  __device__ void combine(const LogSumExp& o) {
    if (o.sum != o.sum || sum != sum) {
      sum = o.sum != o.sum ? o.sum : sum;
      return;
    }
    if (o.sum == 0) return;
    if (sum == 0) {
      *this = o;
      return;
    }
    const acc_t m = max > o.max ? max : o.max;
    sum = sum * ::exp(max - m) + o.sum * ::exp(o.max - m);
    max = m;
  }
};

template <typename scalar_t, typename Gen>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm<scalar_t>)
    dirichlet_kernel(const scalar_t* __restrict__ conc, scalar_t* __restrict__ out, int64_t rows, int64_t k,
                     at::PhiloxCudaState philox, uint32_t* status) {
  using acc_t = scalar_t;  // float or double
  const PhiloxSeed seed = philox_seed(philox);
  const int64_t pairs_per_row = (k + 1) / 2;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (kThreads / kWarp);
  const int lane = threadIdx.x % kWarp;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * (kThreads / kWarp) + threadIdx.x / kWarp; row < rows;
       row += warps) {
    const scalar_t* c = conc + row * k;
    scalar_t* o = out + row * k;
    LogSumExp<acc_t> lse{-INFINITY, 0};
    bool nonzero = false;
    auto load = [&](int p, acc_t& a0, acc_t& a1) {
      const bool has_second = 2 * p + 1 < k;
      a0 = c[2 * p];
      a1 = has_second ? c[2 * p + 1] : acc_t(0);
      nonzero |= a0 != 0 || a1 != 0;
      return has_second;
    };
    auto on_constant = [&](acc_t a0, acc_t a1) {
      if (status) {
        const uint32_t flags = alpha_flags(a0) | alpha_flags(a1) |
                               (a0 == INFINITY || a1 == INFINITY ? static_cast<uint32_t>(kWeightInf) : 0u);
        if (flags) atomicOr(status, flags);
      }
    };
    auto finish = [&](int p, acc_t log_g0, acc_t log_g1) {
      o[2 * p] = log_g0;
      lse.add(log_g0);
      if (2 * p + 1 < k) {
        o[2 * p + 1] = log_g1;
        lse.add(log_g1);
      }
    };
    run_warp_pairs<acc_t, Gen>(static_cast<int>(pairs_per_row), row * pairs_per_row, seed, /*log_output=*/true,
                               load, on_constant, finish);
#pragma unroll
    for (int offset = kWarp / 2; offset > 0; offset /= 2) {
      LogSumExp<acc_t> other{__shfl_xor_sync(kAllLanes, lse.max, offset), __shfl_xor_sync(kAllLanes, lse.sum, offset)};
      lse.combine(other);
    }
    if (status && !__any_sync(kAllLanes, nonzero) && lane == 0) atomicOr(status, static_cast<uint32_t>(kRowZeroSum));
    __syncwarp();  // the row's log-gammas, written by other lanes, are visible
    const acc_t log_total = lse.max + ::log(lse.sum);
    for (int64_t i = lane; i < k; i += kWarp) o[i] = ::exp(o[i] - log_total);
  }
}

// One launch of a standard_gamma kernel: about one wave of resident blocks, each warp
// taking a contiguous stretch of pairs (the occupancy is the kernel's own, asked once).
template <typename scalar_t, auto kernel>
void launch_gamma_kernel(const at::Tensor& alpha, at::Tensor& out, bool log, const at::PhiloxCudaState& philox,
                         uint32_t* status) {
  static const int blocks_per_sm = [&] {
    int b = 0;
    C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, kernel, kThreads, 0));
    return std::max(b, 1);
  }();
  const int64_t n = alpha.numel();
  const int64_t resident = static_cast<int64_t>(blocks_per_sm) * at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const int blocks = static_cast<int>(std::min(ceil_div((n + 1) / 2, kThreads), resident));
  TORCH_CHECK(ceil_div((n + 1) / 2, int64_t{blocks} * (kThreads / kWarp)) < (int64_t{1} << 30),
              "standard_gamma: too many elements for one call (", n, ")");
  kernel<<<blocks, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
      alpha.const_data_ptr<scalar_t>(), out.mutable_data_ptr<scalar_t>(), n, log, philox, status);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename scalar_t, typename Gen>
void launch_standard_gamma(const at::Tensor& alpha, at::Tensor& out, bool log, const at::PhiloxCudaState& philox,
                           uint32_t* status) {
  if (status != nullptr) {
    launch_gamma_kernel<scalar_t, standard_gamma_kernel<scalar_t, Gen, true>>(alpha, out, log, philox, status);
  } else {
    launch_gamma_kernel<scalar_t, standard_gamma_kernel<scalar_t, Gen, false>>(alpha, out, log, philox, status);
  }
}

at::Tensor standard_gamma_cuda(const at::Tensor& alpha, c10::string_view method, bool log, bool validate,
                               std::optional<at::Generator> generator) {
  const Method m = check_standard_gamma(alpha, method, "standard_gamma", "alpha");
  const c10::cuda::CUDAGuard guard(alpha.device());
  const at::Tensor a = alpha.contiguous();
  at::Tensor out = at::empty_like(a);
  if (a.numel() == 0) return out;
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  // validate: the kernel flags invalid alphas in its own pass; one 4-byte read back,
  // skipped while the stream is capturing a CUDA graph (as torch does; NaN comes out).
  std::optional<StatusWord> status;
  if (validate) status.emplace(a.options(), stream);
  const bool read_back = validate && !status->capturing();
  uint32_t* status_ptr = validate ? status->bits() : nullptr;
  const at::PhiloxCudaState philox = cuda_philox_state(generator, a.device().index(), kDrawsPerSubsequence);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, a.scalar_type(), "standard_gamma_cuda", [&] {
    dispatch_method<at::opmath_type<scalar_t>>(
        m, [&](auto gen) { launch_standard_gamma<scalar_t, decltype(gen)>(a, out, log, philox, status_ptr); });
  });
  if (read_back) raise_alpha_flags(status->read(), "standard_gamma", "alpha");
  return out;
}

// Which kernel serves Dirichlet rows without a gradient on CUDA, and why:
//
// | rows                               | method                 | why                                   |
// | ---------------------------------- | ---------------------- | ------------------------------------- |
// | float or double, K >= 64           | fused (a warp per row) | one read and one write per element    |
// | half, bfloat16, or K < 64          | the composite          | arithmetic in float needs a converted |
// |                                    | (gamma.cpp)            | copy anyway; below 64 a warp per row  |
// |                                    |                        | would leave most of its lanes idle    |
constexpr int64_t kFusedMinCategories = 64;

at::Tensor dirichlet_rows_cuda(const at::Tensor& concentration, bool validate, std::optional<at::Generator> generator) {
  constexpr const char* kOp = "dirichlet";
  check_floating(concentration, kOp, "concentration");
  check_has_last_dim(concentration, kOp, "concentration");
  const at::ScalarType dtype = concentration.scalar_type();
  const int64_t k = concentration.size(-1);
  if ((dtype != at::kFloat && dtype != at::kDouble) || k < kFusedMinCategories) {
    return dirichlet_composite(concentration, validate, std::move(generator));
  }
  const c10::cuda::CUDAGuard guard(concentration.device());
  const at::Tensor c = concentration.contiguous();
  at::Tensor out = at::empty_like(c);
  const int64_t rows = c.numel() / k;
  if (rows == 0) return out;
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  std::optional<StatusWord> status;
  if (validate) status.emplace(c.options(), stream);
  const bool read_back = validate && !status->capturing();
  uint32_t* status_ptr = validate ? status->bits() : nullptr;
  TORCH_CHECK((k + 1) / 2 < (int64_t{1} << 30), kOp, ": too many categories for one row (", k, ")");
  const at::PhiloxCudaState philox = cuda_philox_state(generator, c.device().index(), kDrawsPerSubsequence);
  AT_DISPATCH_FLOATING_TYPES(dtype, "dirichlet_cuda", [&] {
    const auto kernel = dirichlet_kernel<scalar_t, MarsagliaTsang<scalar_t>>;
    static const int blocks_per_sm = [&] {
      int b = 0;
      C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, kernel, kThreads, 0));
      return std::max(b, 1);
    }();
    const int64_t resident =
        static_cast<int64_t>(blocks_per_sm) * at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
    const int blocks = static_cast<int>(std::min(ceil_div(rows, kThreads / kWarp), resident));
    kernel<<<blocks, kThreads, 0, stream>>>(c.const_data_ptr<scalar_t>(), out.mutable_data_ptr<scalar_t>(), rows, k,
                                            philox, status_ptr);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  if (read_back) raise_concentration_flags(status->read(), kOp, "concentration");
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(wrs, CUDA, m) {
  m.impl("standard_gamma", &standard_gamma_cuda);
  m.impl("dirichlet_rows", &dirichlet_rows_cuda);
}

}  // namespace wrs::gamma
