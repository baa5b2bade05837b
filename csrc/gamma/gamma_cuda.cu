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
#include <cub/block/block_reduce.cuh>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <limits>
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

// Resident blocks per SM asked of the compiler (a register budget: 80 for float64, 48
// for float): the loop is long chains of dependent operations, so warps matter, but not
// at the price of spills: float at 6 blocks (40 registers) spills inside the loop, at 5
// it takes 46 and spills nothing; float64 at 4 blocks spills (docs/methods.md, "Gamma and
// Dirichlet on CUDA").
template <typename scalar_t>
constexpr int kMinBlocksPerSm = std::is_same_v<at::opmath_type<scalar_t>, double> ? 3 : 5;

constexpr unsigned kAllLanes = 0xffffffffu;

// One warp runs the pairs [0, count) of a range through Pair<acc_t, Gen>: pair p draws
// from Philox subsequence first_subsequence + p. load(p, a0, a1) gives a pair's alphas
// (a1 = 0 where the pair has no second element: a constant, finished on its first
// candidate), on_constant(a0, a1) sees the alphas of a pair with a constant element
// (zero, inf, negative or NaN alpha: where validation looks), and finish(p, x0, x1) takes
// its results. count >= 1. Indices within the range are 32-bit: registers are what
// bounds the resident warps.
template <typename acc_t, typename Gen, typename Load, typename OnConstant, typename Finish>
__device__ void run_warp_pairs(int count, int64_t first_subsequence, const PhiloxSeed& seed, bool log_output,
                               const Load& load, const OnConstant& on_constant, const Finish& finish) {
  const int lane = threadIdx.x % kWarp;
  const unsigned lanes_below = (1u << lane) - 1;
  const int last = count - 1;
  // Each lane holds its pair p and has claimed its next one, whose alphas are loading;
  // `claimed` is the same in every lane.
  int p = lane;
  int next_p = kWarp + lane;
  int claimed = 2 * kWarp;
  acc_t a0, a1, next0, next1;
  load(min(p, last), a0, a1);
  load(min(next_p, last), next0, next1);
  Pair<acc_t, Gen> pair;
  SubsequenceBits bits;
  // A pair's start: its subsequence; block 0 holds the boost uniforms, drawn only when
  // an element needs one; the candidates follow from block 1.
  auto begin_pair = [&] {
    pair.start(a0, a1, /*has_second=*/true);  // a missing second has alpha 0 (above)
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
      next_p = claimed + __popc(finishing & lanes_below);
    }
    // Every lane loads its next pair's alphas on every trip (a lane still on its pair
    // the same ones again, from L1), so only the load writes those registers and nothing
    // waits for it before that pair starts, a trip or more later. Loading only after a
    // finish leaves a move at the loop's end waiting on the load (docs/methods.md).
    load(min(next_p, last), next0, next1);
    if (finished && p < count) begin_pair();
    claimed += __popc(finishing);
  }
}

// A warp's share of a call's pairs, [first, first + count): each warp of the grid (about
// one wave of resident blocks, launch_over_pairs) takes a contiguous stretch.
struct WarpPairs {
  int64_t first;
  int64_t per_warp;
  int count;
  // False when this warp has no pairs (the whole warp).
  __device__ bool take(int64_t pairs) {
    const int64_t warps = static_cast<int64_t>(gridDim.x) * (kThreads / kWarp);
    const int64_t warp = static_cast<int64_t>(blockIdx.x) * (kThreads / kWarp) + threadIdx.x / kWarp;
    per_warp = (pairs + warps - 1) / warps;
    first = warp * per_warp;
    if (first >= pairs) return false;
    count = static_cast<int>(pairs - first < per_warp ? pairs - first : per_warp);
    return true;
  }
};

// VALIDATE: flag invalid alphas. Only pairs with a constant element can hold one, so
// the check runs on that rare branch, not on every load (a flags register OR-ed per load
// cost the loop 4-7%); validate=False compiles it out.
template <typename scalar_t, typename Gen, bool VALIDATE>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm<scalar_t>)
    standard_gamma_kernel(const scalar_t* __restrict__ alpha, scalar_t* __restrict__ out, int64_t n,
                          bool log_output, at::PhiloxCudaState philox, uint32_t* status) {
  using acc_t = at::opmath_type<scalar_t>;
  WarpPairs w;
  if (!w.take((n + 1) / 2)) return;
  // The warp's elements, indexed in 32 bits (fewer than 2^31: the launch checks per_warp).
  const scalar_t* warp_alpha = alpha + 2 * w.first;
  scalar_t* warp_out = out + 2 * w.first;
  const int elements = static_cast<int>(n - 2 * w.first < 2 * w.per_warp ? n - 2 * w.first : 2 * w.per_warp);
  auto load = [&](int p, acc_t& a0, acc_t& a1) {
    const int e = 2 * p;
    a0 = static_cast<acc_t>(warp_alpha[e]);
    a1 = e + 1 < elements ? static_cast<acc_t>(warp_alpha[e + 1]) : acc_t(0);
  };
  // Invalid alphas come out NaN (no endless loop); validation flags them.
  auto on_constant = [&](acc_t a0, acc_t a1) {
    if (VALIDATE) {
      const uint32_t flags = alpha_flags(a0) | alpha_flags(a1);
      if (flags) atomicOr(status, flags);
    }
  };
  auto finish = [&](int p, acc_t x0, acc_t x1) {
    const int e = 2 * p;
    warp_out[e] = static_cast<scalar_t>(x0);
    if (e + 1 < elements) warp_out[e + 1] = static_cast<scalar_t>(x1);
  };
  run_warp_pairs<acc_t, Gen>(w.count, w.first, philox_seed(philox), log_output, load, on_constant, finish);
}

// Beta(a_i, b_i) = sigmoid(log G_a - log G_b), pair i of the call being (a_i, b_i): the
// pair standard_gamma draws for row i of the stacked [..., 2] tensor, from the same Philox
// subsequence, so a seed gives the same log-gammas as dirichlet of the stacked pairs. The
// sigmoid is written when the pair finishes: one kernel, where dirichlet_rows took a
// stacked copy, the log-gammas' write and read, and a normalising kernel. With VALIDATE
// it flags every invalid pair on the constant branch: alpha_flags (negative, NaN), and
// inf or two zeros as kRowNotFinite (their sigmoid is NaN; a zero against a positive
// entry is valid, 0 or 1).
template <typename acc_t, typename Gen, bool VALIDATE>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm<acc_t>)
    beta_pairs_kernel(const acc_t* __restrict__ a, const acc_t* __restrict__ b, acc_t* __restrict__ out, int64_t n,
                      at::PhiloxCudaState philox, uint32_t* status) {
  WarpPairs w;
  if (!w.take(n)) return;
  const acc_t* warp_a = a + w.first;
  const acc_t* warp_b = b + w.first;
  acc_t* warp_out = out + w.first;
  auto load = [&](int p, acc_t& x, acc_t& y) {
    x = warp_a[p];
    y = warp_b[p];
  };
  auto on_constant = [&](acc_t x, acc_t y) {
    if (VALIDATE) {
      constexpr acc_t kInf = std::numeric_limits<acc_t>::infinity();
      const bool inf_or_zeros = x == kInf || y == kInf || (x == 0 && y == 0);
      const uint32_t flags = alpha_flags(x) | alpha_flags(y) | (inf_or_zeros ? kRowNotFinite : 0u);
      if (flags) atomicOr(status, flags);
    }
  };
  auto finish = [&](int p, acc_t log_x, acc_t log_y) {
    warp_out[p] = 1 / (1 + ::exp(log_y - log_x));
  };
  run_warp_pairs<acc_t, Gen>(w.count, w.first, philox_seed(philox), /*log_output=*/true, load, on_constant, finish);
}

// Dirichlet rows from their log-gammas (standard_gamma's log output): row r becomes
// exp(v - m) / sum_i exp(v_i - m), m the row's largest log-gamma. Every invalid
// concentration, and only an invalid one, makes m non-finite: NaN or negative (a NaN
// log-gamma), inf (+inf), a row of zeros (all -inf). Such a row comes out NaN, and with
// `status` it is flagged (kRowNotFinite), so validation needs no pass of its own: the host
// reads the word once and, only if it is set, runs the detailed check for the message.
//
// A tile is up to kRowThreads x kItems values of one row in registers (thread t holds
// elements t, t + kRowThreads, ...), so a row is read once however many passes use it.
// kRowThreads threads share a tile: a power of two up to a warp (reducing by shuffles) or
// the block.
constexpr int kTileItems = 32;
constexpr int64_t kBlockTile = int64_t{kThreads} * kTileItems;

template <typename acc_t>
__device__ acc_t max_or_nan(acc_t a, acc_t b) {
  return a > b || a != a ? a : b;
}

template <typename acc_t, int kRowThreads>
struct TileReduce {
  using BlockReduce = cub::BlockReduce<acc_t, kThreads>;
  struct Storage {
    typename BlockReduce::TempStorage temp;
    acc_t result;
  };
  template <typename Op>
  __device__ static acc_t all(acc_t v, const Op& op, Storage& s) {
    if constexpr (kRowThreads <= kWarp) {
#pragma unroll
      for (int offset = kRowThreads / 2; offset > 0; offset /= 2) {
        v = op(v, __shfl_xor_sync(kAllLanes, v, offset, kRowThreads));
      }
      return v;
    } else {
      static_assert(kRowThreads == kThreads, "a tile takes a sub-warp group, a warp or the block");
      const acc_t r = BlockReduce(s.temp).Reduce(v, op);
      if (threadIdx.x == 0) s.result = r;
      __syncthreads();
      const acc_t out = s.result;
      __syncthreads();  // the storage serves the next reduction
      return out;
    }
  }
};

template <typename acc_t, int kRowThreads, int kItems>
struct Tile {
  acc_t v[kItems];  // past the row's end: -inf, whose exp(v - m) is 0
  int count;        // values of the row this thread holds: v[0, count)
  __device__ void load(const acc_t* in, int64_t len, int first) {
    count = first < len ? static_cast<int>((len - first + kRowThreads - 1) / kRowThreads) : 0;
#pragma unroll
    for (int j = 0; j < kItems; ++j) v[j] = j < count ? in[first + int64_t{j} * kRowThreads] : -INFINITY;
  }
  // max and exp_sum run over the padding too: branches around each exp keep the compiler
  // from overlapping them (docs/methods.md, "Gamma and Dirichlet on CUDA").
  __device__ acc_t max() const {
    acc_t m = -INFINITY;
#pragma unroll
    for (int j = 0; j < kItems; ++j) m = max_or_nan(m, v[j]);
    return m;
  }
  // Each value becomes exp(v - m); returns their sum.
  __device__ acc_t exp_sum(acc_t m) {
    acc_t sum = 0;
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      v[j] = ::exp(v[j] - m);
      sum += v[j];
    }
    return sum;
  }
  template <typename out_t>
  __device__ void store(out_t* out, int first, acc_t sum) const {
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      if (j < count) out[first + int64_t{j} * kRowThreads] = static_cast<out_t>(v[j] / sum);
    }
  }
};

template <typename acc_t>
__device__ void flag_not_finite(acc_t m, uint32_t* status) {
  if (status && !(m > -INFINITY && m < INFINITY)) atomicOr(status, kRowNotFinite);
}

// Rows of one tile each, kRows per group of kRowThreads threads (their loads all issued
// before the first reduction: short rows give a thread too little to read otherwise).
// A block's groups take kRows x kGroups consecutive rows, round r rows base + r kGroups +
// group, so each round's loads are contiguous.
template <typename acc_t, typename out_t, int kRowThreads, int kItems, int kRows>
__global__ void __launch_bounds__(kThreads)
    normalise_tile_rows_kernel(const acc_t* log_g, out_t* out, int64_t rows, int64_t k, uint32_t* status) {
  constexpr int kGroups = kThreads / kRowThreads;
  using Reduce = TileReduce<acc_t, kRowThreads>;
  __shared__ typename Reduce::Storage storage;
  const int first = threadIdx.x % kRowThreads;
  const int64_t base = static_cast<int64_t>(blockIdx.x) * kGroups * kRows + threadIdx.x / kRowThreads;
  Tile<acc_t, kRowThreads, kItems> tiles[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    // Threads past the last row take part in the reductions with an empty row.
    const int64_t row = base + r * kGroups;
    tiles[r].load(log_g + (row < rows ? row * k : 0), row < rows ? k : 0, first);
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int64_t row = base + r * kGroups;
    const acc_t m = Reduce::all(tiles[r].max(), max_or_nan<acc_t>, storage);
    const acc_t sum = Reduce::all(tiles[r].exp_sum(m), [](acc_t a, acc_t b) { return a + b; }, storage);
    if (row < rows) {
      tiles[r].store(out + row * k, first, sum);
      if (first == 0) flag_not_finite(m, status);
    }
  }
}

// Longer rows in chunks of a block tile, over two kernels: each chunk's largest value and
// its sum of exp(v - max); then each chunk, combining its row's chunk sums (a few hundred
// values for rows of millions) and normalising.
template <typename acc_t>
struct ExpSum {
  acc_t max, sum;  // sum of exp(v - max); an empty stretch: max = -inf, sum = 0
};

template <typename acc_t>
struct CombineExpSums {
  __device__ ExpSum<acc_t> operator()(const ExpSum<acc_t>& a, const ExpSum<acc_t>& b) const {
    const acc_t m = max_or_nan(a.max, b.max);
    // exp(-inf - m) is 0, but -inf - -inf is NaN: an empty side adds nothing.
    return {m, (a.sum == 0 ? acc_t(0) : a.sum * ::exp(a.max - m)) + (b.sum == 0 ? acc_t(0) : b.sum * ::exp(b.max - m))};
  }
};

template <typename acc_t>
__global__ void __launch_bounds__(kThreads)
    chunk_exp_sums_kernel(const acc_t* log_g, int64_t k, int64_t chunks, ExpSum<acc_t>* chunk_sums) {
  using Reduce = TileReduce<acc_t, kThreads>;
  __shared__ typename Reduce::Storage storage;
  const int64_t row = blockIdx.x / chunks, start = (blockIdx.x % chunks) * kBlockTile;
  Tile<acc_t, kThreads, kTileItems> tile;
  tile.load(log_g + row * k + start, k - start < kBlockTile ? k - start : kBlockTile, threadIdx.x);
  const acc_t m = Reduce::all(tile.max(), max_or_nan<acc_t>, storage);
  const acc_t sum = Reduce::all(tile.exp_sum(m), [](acc_t a, acc_t b) { return a + b; }, storage);
  if (threadIdx.x == 0) chunk_sums[blockIdx.x] = {m, sum};
}

template <typename acc_t, typename out_t>
__global__ void __launch_bounds__(kThreads) normalise_chunks_kernel(const acc_t* log_g, out_t* out, int64_t k,
                                                                   int64_t chunks, const ExpSum<acc_t>* chunk_sums,
                                                                   uint32_t* status) {
  using BlockReduce = cub::BlockReduce<ExpSum<acc_t>, kThreads>;
  __shared__ typename BlockReduce::TempStorage temp;
  __shared__ ExpSum<acc_t> row_sum;
  const int64_t row = blockIdx.x / chunks, chunk = blockIdx.x % chunks;
  const int64_t rest = k - chunk * kBlockTile;
  Tile<acc_t, kThreads, kTileItems> tile;
  tile.load(log_g + row * k + chunk * kBlockTile, rest < kBlockTile ? rest : kBlockTile, threadIdx.x);
  const CombineExpSums<acc_t> combine;
  ExpSum<acc_t> acc{-INFINITY, 0};
  for (int64_t c = threadIdx.x; c < chunks; c += kThreads) acc = combine(acc, chunk_sums[row * chunks + c]);
  acc = BlockReduce(temp).Reduce(acc, combine);
  if (threadIdx.x == 0) {
    row_sum = acc;
    if (chunk == 0) flag_not_finite(acc.max, status);
  }
  __syncthreads();
  tile.exp_sum(row_sum.max);
  tile.store(out + row * k + chunk * kBlockTile, threadIdx.x, row_sum.sum);
}

// One launch of a kernel over `pairs` pairs (run_warp_pairs): about one wave of resident
// blocks, each warp taking a contiguous stretch (WarpPairs; the occupancy is the
// kernel's own, asked once).
template <auto kernel, typename... Args>
void launch_over_pairs(int64_t pairs, const char* op, Args... args) {
  static const int blocks_per_sm = [&] {
    int b = 0;
    C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, kernel, kThreads, 0));
    return std::max(b, 1);
  }();
  const int64_t resident = static_cast<int64_t>(blocks_per_sm) * at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const int blocks = static_cast<int>(std::min(ceil_div(pairs, kThreads), resident));
  // A warp's indices are 32-bit (run_warp_pairs; standard_gamma's elements are twice its pairs).
  TORCH_CHECK(ceil_div(pairs, int64_t{blocks} * (kThreads / kWarp)) < (int64_t{1} << 30), op,
              ": too many elements for one call (", pairs, " pairs)");
  kernel<<<blocks, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(args...);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename scalar_t, typename Gen>
void launch_standard_gamma(const at::Tensor& alpha, at::Tensor& out, bool log, const at::PhiloxCudaState& philox,
                           uint32_t* status) {
  const int64_t n = alpha.numel();
  const scalar_t* in = alpha.const_data_ptr<scalar_t>();
  scalar_t* o = out.mutable_data_ptr<scalar_t>();
  if (status != nullptr) {
    launch_over_pairs<standard_gamma_kernel<scalar_t, Gen, true>>((n + 1) / 2, "standard_gamma", in, o, n, log, philox,
                                                                  status);
  } else {
    launch_over_pairs<standard_gamma_kernel<scalar_t, Gen, false>>((n + 1) / 2, "standard_gamma", in, o, n, log,
                                                                   philox, status);
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

// How a row is normalised, by its length K, and why:
//
// | K            | threads per row x values each | rows per group | why                        |
// | ------------ | ----------------------------- | -------------- | -------------------------- |
// | <= 32        | K up to a power of two (>= 2) | 8              | a warp serves 32 / T rows; |
// |              | x 1                           |                | 8 loads in flight a thread |
// | <= 256       | a warp x 8                    | 4              | reductions by shuffles     |
// | <= 1,024     | a warp x 32                   | 1              |                            |
// | <= 8,192     | the block x 32                | 1              | a warp holds 1,024 values  |
// | longer       | chunks of 8,192, a block      |                | a block per row leaves the |
// |              | each; two kernels             |                | GPU idle when rows are few |
// |              |                               |                | (docs/methods.md)          |
template <typename acc_t, typename out_t, int kRowThreads, int kItems, int kRows>
void launch_tile_rows(const at::Tensor& log_g, at::Tensor& out, int64_t rows, int64_t k, uint32_t* status) {
  const int64_t blocks = ceil_div(rows, int64_t{kThreads / kRowThreads * kRows});
  TORCH_CHECK(blocks < (int64_t{1} << 31), "dirichlet: too many rows for one call (", rows, ")");
  normalise_tile_rows_kernel<acc_t, out_t, kRowThreads, kItems, kRows>
      <<<blocks, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(log_g.const_data_ptr<acc_t>(),
                                                                 out.mutable_data_ptr<out_t>(), rows, k, status);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename acc_t, typename out_t>
void normalise_log_rows(const at::Tensor& log_g, at::Tensor& out, int64_t rows, int64_t k, uint32_t* status) {
  if (k <= 2) return launch_tile_rows<acc_t, out_t, 2, 1, 8>(log_g, out, rows, k, status);
  if (k <= 4) return launch_tile_rows<acc_t, out_t, 4, 1, 8>(log_g, out, rows, k, status);
  if (k <= 8) return launch_tile_rows<acc_t, out_t, 8, 1, 8>(log_g, out, rows, k, status);
  if (k <= 16) return launch_tile_rows<acc_t, out_t, 16, 1, 8>(log_g, out, rows, k, status);
  if (k <= 32) return launch_tile_rows<acc_t, out_t, 32, 1, 8>(log_g, out, rows, k, status);
  if (k <= kWarp * 8) return launch_tile_rows<acc_t, out_t, kWarp, 8, 4>(log_g, out, rows, k, status);
  if (k <= kWarp * kTileItems) return launch_tile_rows<acc_t, out_t, kWarp, kTileItems, 1>(log_g, out, rows, k, status);
  if (k <= kBlockTile) return launch_tile_rows<acc_t, out_t, kThreads, kTileItems, 1>(log_g, out, rows, k, status);
  const int64_t chunks = ceil_div(k, kBlockTile);
  TORCH_CHECK(rows * chunks < (int64_t{1} << 31), "dirichlet: too many elements for one call (", rows * k, ")");
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  at::Tensor sums = at::empty({rows * chunks * 2}, log_g.options());  // an ExpSum per chunk
  auto* chunk_sums = reinterpret_cast<ExpSum<acc_t>*>(sums.mutable_data_ptr<acc_t>());
  chunk_exp_sums_kernel<acc_t><<<rows * chunks, kThreads, 0, stream>>>(log_g.const_data_ptr<acc_t>(), k, chunks,
                                                                       chunk_sums);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  normalise_chunks_kernel<acc_t, out_t><<<rows * chunks, kThreads, 0, stream>>>(
      log_g.const_data_ptr<acc_t>(), out.mutable_data_ptr<out_t>(), k, chunks, chunk_sums, status);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// Dirichlet rows without a gradient: the composite's log-gammas (the same standard_gamma
// call, so the same draws for a seed), then one normalising kernel that also finds the
// invalid rows: less than at::softmax plus a check pass, and than a warp per row that
// generates the gammas itself, whose float64 log-sum-exp and per-row tails cost more than
// the second pass (docs/methods.md, "Gamma and Dirichlet on CUDA").
at::Tensor dirichlet_rows_cuda(const at::Tensor& concentration, bool validate, std::optional<at::Generator> generator) {
  constexpr const char* kOp = "dirichlet";
  check_floating(concentration, kOp, "concentration");
  check_has_last_dim(concentration, kOp, "concentration");
  const c10::cuda::CUDAGuard guard(concentration.device());
  const at::ScalarType dtype = concentration.scalar_type();
  const at::ScalarType acc = dtype == at::kDouble ? at::kDouble : at::kFloat;
  const int64_t k = concentration.size(-1);
  const int64_t rows = concentration.numel() / k;
  if (rows == 0) return at::empty_like(concentration, at::MemoryFormat::Contiguous);
  at::Tensor log_g = standard_gamma_cuda(concentration.to(acc).contiguous(), "auto", /*log=*/true,
                                         /*validate=*/false, std::move(generator));
  at::Tensor out = dtype == acc ? log_g : at::empty_like(log_g, log_g.options().dtype(dtype));  // in place
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  std::optional<StatusWord> status;
  if (validate) status.emplace(log_g.options(), stream);
  const bool read_back = validate && !status->capturing();
  uint32_t* status_ptr = validate ? status->bits() : nullptr;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, "dirichlet_cuda", [&] {
    normalise_log_rows<at::opmath_type<scalar_t>, scalar_t>(log_g, out, rows, k, status_ptr);
  });
  if (read_back && status->read() != 0) {
    check_values(concentration, kOp, "concentration", /*normalised=*/true);
    TORCH_CHECK(false, kOp, ": concentration gave a row that is not finite");  // not reached: the check names the cause
  }
  return out;
}

// Beta without a gradient: beta_pairs_kernel over (a, b) broadcast, in float (double
// where either is). An invalid pair sets the status word; the detailed check then names
// the cause in beta's words, as the CPU's beta_pairs does.
at::Tensor beta_pairs_cuda(const at::Tensor& a, const at::Tensor& b, bool validate,
                           std::optional<at::Generator> generator) {
  const c10::cuda::CUDAGuard guard(a.device());
  const BetaPairs pairs = beta_pairs_operands(a, b);
  // Written in float or double, then converted (half and bfloat16 are rare here; one
  // kernel per accumulation type keeps the instantiations to two per method).
  at::Tensor out = at::empty(pairs.a.sizes(), pairs.a.options());
  const int64_t n = out.numel();
  if (n == 0) return out.to(pairs.out_dtype);
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  std::optional<StatusWord> status;
  if (validate) status.emplace(pairs.a.options(), stream);
  const bool read_back = validate && !status->capturing();
  uint32_t* status_ptr = validate ? status->bits() : nullptr;
  // As many Philox draws per pair as standard_gamma's: the same offsets for a seed.
  const at::PhiloxCudaState philox = cuda_philox_state(generator, a.device().index(), kDrawsPerSubsequence);
  AT_DISPATCH_FLOATING_TYPES(pairs.a.scalar_type(), "beta_pairs_cuda", [&] {
    const scalar_t* pa = pairs.a.const_data_ptr<scalar_t>();
    const scalar_t* pb = pairs.b.const_data_ptr<scalar_t>();
    scalar_t* po = out.mutable_data_ptr<scalar_t>();
    dispatch_method<scalar_t>(pairs.method, [&](auto gen) {
      using Gen = decltype(gen);
      if (validate) {
        launch_over_pairs<beta_pairs_kernel<scalar_t, Gen, true>>(n, "beta", pa, pb, po, n, philox, status_ptr);
      } else {
        launch_over_pairs<beta_pairs_kernel<scalar_t, Gen, false>>(n, "beta", pa, pb, po, n, philox, status_ptr);
      }
    });
  });
  if (read_back && status->read() != 0) raise_invalid_pair(pairs);
  return out.to(pairs.out_dtype);
}

}  // namespace

TORCH_LIBRARY_IMPL(wrs, CUDA, m) {
  m.impl("standard_gamma", &standard_gamma_cuda);
  m.impl("dirichlet_rows", &dirichlet_rows_cuda);
  m.impl("beta_pairs", &beta_pairs_cuda);
}

}  // namespace wrs::gamma
