// multinomial and sample_logits on CUDA: the method table, then one call's launches and
// its one 4-byte read back of the value checks (skipped under CUDA-graph capture, as
// torch does; the kernels keep every output in range whatever the input).
#include "alias/alias_cuda.h"
#include "common/cuda_utils.cuh"
#include "common/philox_cuda.cuh"
#include "common/status_word.h"
#include "multinomial/kernels_cuda.cuh"
#include "multinomial/multinomial.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <algorithm>

namespace wrs::multinomial {
namespace {

// Which kernel serves a shape class on CUDA, and why:
//
// | replacement      | shape (n items per row, k draws)       | method              | why                                              |
// | ---------------- | -------------------------------------- | ------------------- | ------------------------------------------------ |
// | k = 1            | n <= 8                                 | thread top-k (race) | a thread per row of a few items: warp rows give  |
// |                  |                                        |                     | a row 8 lanes and reduce over them (2^20 x 4:    |
// |                  |                                        |                     | 0.23 ms, a thread per row about half of that)    |
// | k = 1, logits    | rows >= 65,536, 128 < n <= 4,096       | thread top-k (race) | warp rows take a float64 exp per item, the warp  |
// |                  |                                        |                     | top-k merges lists: 65,536 x 1,024 bfloat16:     |
// |                  |                                        |                     | 0.53 against 1.31 ms (warp rows); x 130: 0.13    |
// |                  |                                        |                     | against 0.19; at 100 items the two tie           |
// | yes, or k = 1    | n <= 1,024 (float64: 512), k <= 64;    | warp rows           | one read; 8-32 lanes per row share the per-row   |
// |                  | n <= 32, k <= 1,024, rows x k <= 2^18  |                     | reductions and scale, and beyond 8 samples       |
// |                  |                                        |                     | search for one each; more samples are cut into   |
// |                  |                                        |                     | slices over warps (past these bounds each        |
// |                  |                                        |                     | sample's walk costs more than an alias lookup)   |
// | k = 1            | rows x n <= 2^19; up to 2^22 where a   | race (race_cuda)    | one read, one launch; past 2^19 items its Philox |
// |                  | row is one chunk (rows fill the GPU);  |                     | block and bound per item cost more than the one  |
// |                  | logits: rows x n <= 2^22, or rows of   |                     | draw over chunks (H200, us: 64 x 32,000 31.9     |
// |                  | n >= 2^14 that are one chunk           |                     | against 25.3, 8 x 128,256 25.4 / 23.1), for      |
// |                  |                                        |                     | logits only past 2^22 (64 x 32,000: 34.9 against |
// |                  |                                        |                     | 44.5; 64 x 128,256: 70.4 against 51.8); whole    |
// |                  |                                        |                     | rows of logits in one chunk would take the       |
// |                  |                                        |                     | exact CDF's float64 exps (4,096 x 32,000: 0.69   |
// |                  |                                        |                     | against 0.37 ms for probabilities)               |
// | k = 1, logits    | other rows x n >= 2^21, n < 2^14       | warp top-k (race)   | rows under 2^14 leave the race's blocks idle     |
// |                  |                                        |                     | lanes (16,384 x 1,100: 0.27 against 0.23 ms);    |
// |                  |                                        |                     | one read and a float bound per item, where the   |
// |                  |                                        |                     | inverse CDF takes a float64 exp per item twice   |
// | yes              | other rows of up to 1,024 items, k>64  | alias tables        | a block per short row of the inverse CDF costs   |
// |                  |                                        |                     | more: 65,536 x 4, k = 128: 2.9 against 0.2 ms    |
// | yes, or k = 1    | longer rows; k <= 128, or k <= 1,024   | inverse CDF         | about two reads, no table; few rows are cut into |
// |                  | where the row is cut into chunks       |                     | chunks over many blocks (the LLM decode case);   |
// |                  |                                        |                     | up to 32 draws a row (2,048 in all) then take    |
// |                  |                                        |                     | chunk bounds and a block per draw that draws     |
// |                  |                                        |                     | against them: one read and a chunk a draw        |
// |                  |                                        |                     | (logits: float bounds, no float64 exp but in the |
// |                  |                                        |                     | chunk drawn)                                     |
// | yes              | more draws, k <= n / 16; or rows x k   | stored CDF, search  | the same law and draws; one scan writes the CDF, |
// |                  | <= 2^21 from rows of >= 2^14 items     | (many_draws below)  | cheaper than the alias build where draws are few |
// | yes              | more draws                             | alias tables        | the O(n) build pays for itself over many draws;  |
// |                  |                                        |                     | its value checks flag the call's status word     |
// | no               | k <= 8 and n <= 32, or rows >= 65,536  | thread top-k        | a row's keys fit one thread; a warp per row      |
// |                  | and n <= 4,096                         |                     | would idle most lanes and sort 32-key lists, and |
// |                  |                                        |                     | with many rows costs more (1,048,576 x 100,      |
// |                  |                                        |                     | k = 2: 3.9 against 1.2 ms)                       |
// | no               | 2 <= k <= 64, 1,000 <= n <= 32,768, by | floor top-k         | a block per row: a floor below the k-th key from |
// |                  | the table in kernels_cuda.cuh (fewer   | (floor_topk_serves) | float bounds on every key (no log for probabil-  |
// |                  | rows where rows are longer)            |                     | ities), then only the float64 keys that could    |
// |                  |                                        |                     | reach it: no lists, one read (4,096 x 16,384,    |
// |                  |                                        |                     | k = 64: 1.27 ms for one pass against 0.55)       |
// | no               | 2 <= k <= 64, n >= 256 k, by the table | two-pass top-k      | each chunk's largest key first (the race's trips |
// |                  | in kernels_cuda.cuh: long rows, few    | (two_pass_serves)   | in each chunk), then only the keys of the k      |
// |                  | draws only from large calls            |                     | chunks with the largest above the k-th of them:  |
// |                  |                                        |                     | one pass admits about k (1 + ln(m / k)) keys per |
// |                  |                                        |                     | warp's stretch of m items into its lists         |
// |                  |                                        |                     | (float16 256 x 128,256, k = 64: 588 against 367  |
// |                  |                                        |                     | us)                                              |
// | no               | other k <= 64                          | warp top-k          | one read of race keys; few long rows in chunks,  |
// |                  |                                        |                     | merged by a second kernel                        |
// | no               | k > 64, n >= 64 k, n >= 2^20,          | chunk maxima +      | each chunk's largest key, torch.topk of those,   |
// |                  | rows x n >= 2^26, while capturing      | torch.topk          | then of the k picked chunks' keys: two ranks of  |
// |                  |                                        |                     | about sqrt(n k) keys each instead of one of n    |
// |                  |                                        |                     | (under capture no host read can send a row the   |
// |                  |                                        |                     | threshold misses to the float64 keys)            |
// | no               | other k > 64                           | keys + torch.topk   | one key pass, then torch's radix select (or its  |
// |                  |                                        |                     | sort, for the whole row) over float keys (half   |
// |                  |                                        |                     | the bytes of float64 keys; for k + 64 <= 2^14    |
// |                  |                                        |                     | computed in float, no float64 log per item); the |
// |                  |                                        |                     | near-ties among the first k + 64 by float64 key. |
// |                  |                                        |                     | Where those k + 64 are at most n / 8, only the   |
// |                  |                                        |                     | keys above a threshold sampled from the row's    |
// |                  |                                        |                     | (threshold_cuda.cu; H200, one process, torch /   |
// |                  |                                        |                     | ours, every key against it: 4,096 x 32,000,      |
// |                  |                                        |                     | k = 1,024 1.00x / 1.22x, 256 x 128,256 1.07x /   |
// |                  |                                        |                     | 1.41x; chunk maxima against it: 64 x 2^20,       |
// |                  |                                        |                     | k = 1,024 1.04x / 1.55x, 8 x 2^24 1.33x / 1.65x) |
//
// One draw without replacement is one draw with it, so k = 1 takes the with-replacement
// rows, and one draw may take the race (laws.h: its law is within 2^-49 of the exact one
// in total variation, the quantized law's within 2^-33). Thresholds are measured
// (docs/benchmarks.md: the sweep, and the race against the inverse CDF and the warp
// top-k, in one process on an H100).
enum class Method {
  kWarpRows,
  kRace,
  kInverseCdf,
  kCdfSearch,
  kAliasTables,
  kThreadTopK,
  kTwoPassTopK,
  kFloorTopK,
  kTopK,
  kChunkMaxTopK,
  kKeysTopK
};

constexpr int64_t kLogitRaceFromItems = int64_t{1} << 21;
constexpr int64_t kRaceThreadRowsUpTo = 8;
constexpr int64_t kWarpLogitRowsUpTo = 128;  // one draw: longer logit rows from many rows take a thread
constexpr int64_t kRaceUpToItems = int64_t{1} << 22;
constexpr int64_t kRaceProbsUpToItems = int64_t{1} << 19;  // past it, rows cut into chunks: the one draw over chunks
constexpr int64_t kRaceLogitRowsFrom = int64_t{1} << 14;

bool race_serves(const Request& r) {
  const int64_t items = r.rows * r.n;
  const bool one_chunk = inverse_cdf_chunks(r.rows, r.n) == 1;
  if (r.logits) return items <= kRaceUpToItems || (r.n >= kRaceLogitRowsFrom && one_chunk);
  return items <= kRaceProbsUpToItems || (items <= kRaceUpToItems && one_chunk);
}

// With replacement, more draws than the inverse CDF over chunks holds:
//
// | draws                                       | method           | why                            |
// | ------------------------------------------- | ---------------- | ------------------------------ |
// | k <= n / 16                                 | stored CDF       | its build is a scan, the alias |
// |                                             |                  | tables' several passes         |
// | rows x k <= 2^21 over rows of >= 2^14 items | stored CDF       | the alias build's ten small    |
// |                                             | (guide table)    | kernels cost more than three   |
// |                                             |                  | gathers a draw against one     |
// | more                                        | alias tables     | a lookup per draw              |
//
// Measured side by side on an H100 (docs/benchmarks.md), stored CDF against alias tables,
// ms: 4,096 x 32,000, k = 1,024: 1.48 / 2.93; 1 x 1e8, k = 2^20: 1.50 / 2.24; 1 x 32,000,
// k = 2^20: 0.087 / 0.143; 8 x 32,000, k = 65,536: 0.079 / 0.138; 8 x 32,000, k = 2^20:
// 0.224 / 0.202; 64 x 32,000, k = 2^20: 1.51 / 0.75; 1 x 1,000, k = 2^20: 0.062 / 0.053.
constexpr int64_t kCdfSearchItemsPerDraw = 16;
constexpr int64_t kCdfSearchFewDraws = int64_t{1} << 21;
constexpr int64_t kCdfSearchFewDrawsFromItems = int64_t{1} << 14;

Method many_draws(const Request& r) {
  const bool few_per_item = r.k * kCdfSearchItemsPerDraw <= r.n;
  const bool few_in_all = r.rows * r.k <= kCdfSearchFewDraws && r.n >= kCdfSearchFewDrawsFromItems;
  return few_per_item || few_in_all ? Method::kCdfSearch : Method::kAliasTables;
}

Method choose(const Request& r, bool capturing) {
  if (r.k == 1 && r.n <= kRaceThreadRowsUpTo) return Method::kThreadTopK;
  if (r.k == 1 && r.logits && r.n > kWarpLogitRowsUpTo && thread_rows_serve(r.rows, r.n, 1)) {
    return Method::kThreadTopK;
  }
  if (r.replacement || r.k == 1) {
    if (warp_rows_serve(r.rows, r.n, r.k, r.x.scalar_type() == at::kDouble)) return Method::kWarpRows;
    if (r.k == 1 && race_serves(r)) return Method::kRace;
    if (r.k == 1 && r.logits && r.n < kRaceLogitRowsFrom && r.rows * r.n >= kLogitRaceFromItems) return Method::kTopK;
    if (r.n <= kMaxWarpRow && r.k > kWarpRowSlice) return many_draws(r);
    const int64_t chunks = inverse_cdf_chunks(r.rows, r.n);
    const bool fits = r.k <= (chunks == 1 ? kMaxRowSamples : kMaxChunkSamples);
    return fits ? Method::kInverseCdf : many_draws(r);
  }
  if (thread_rows_serve(r.rows, r.n, r.k)) return Method::kThreadTopK;
  if (floor_topk_serves(r.rows, r.n, r.k)) return Method::kFloorTopK;
  if (two_pass_serves(r.rows, r.n, r.k, r.logits)) return Method::kTwoPassTopK;
  if (r.k <= kMaxTopK) return Method::kTopK;
  return capturing && chunk_max_serves(r.rows, r.n, r.k) ? Method::kChunkMaxTopK : Method::kKeysTopK;
}

// ORs a device int of flags into the status word.
__global__ void or_flags_kernel(const int* flags, uint32_t* status) {
  if (*flags) atomicOr(status, static_cast<uint32_t>(*flags));
}

// The flags of a row's top k float64 race keys (decreasing): a zero weight's key (or
// below) first is a zero-sum row, last too few nonzero weights.
void flag_top_keys(const Request& r, const DrawCall& call, const at::Tensor& top) {
  const double zero_key = r.logits ? -1.7976931348623157e308 : 0.0;
  const at::Tensor few = (top.select(-1, 0) <= zero_key).any().to(at::kInt) * static_cast<int>(kRowZeroSum) +
                         (top.select(-1, r.k - 1) <= zero_key).any().to(at::kInt) * static_cast<int>(kTooFewNonzero);
  or_flags_kernel<<<1, 1, 0, call.stream>>>(few.const_data_ptr<int>(), call.status);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// Beyond kMaxTopK draws without replacement: torch.topk over every item's race key. With
// float_first, over float keys (half the bytes; race_keys): the first kTieSlack more than
// k, or the whole row sorted, whose near-ties rank_candidates orders by float64 key into
// `out`; else over the float64 keys. (Under capture the float64 keys, since a run past
// the candidates would need the host to rank again.)
at::Tensor rank_keys(const Request& r, const DrawCall& call, at::Tensor out, bool float_first) {
  if (float_first) {
    at::Tensor g = at::empty({r.rows, r.n}, r.x.options().dtype(at::kFloat));
    const int64_t cands = std::min(r.k + kTieSlack, r.n);
    // approx_key needs the input, and 1 / T, in float's range.
    const bool approx = cands <= kMaxApproxCandidates && r.x.scalar_type() != at::kDouble &&
                        (!r.logits || r.inv_temperature <= 1e30);
    race_keys(call, g.mutable_data_ptr<float>(), approx);
    auto [cand_g, cand_index] = cands == r.n                  ? g.sort(-1, /*descending=*/true)
                                : threshold_serves(r.n, cands) ? threshold_candidates(call, g, cands)
                                                               : g.topk(cands, -1, /*largest=*/true, /*sorted=*/true);
    at::Tensor cand_key = at::empty_like(cand_g, cand_g.options().dtype(at::kDouble));
    rank_candidates(call, cands, approx, cand_g.const_data_ptr<float>(), cand_index.mutable_data_ptr<int64_t>(),
                    cand_key.mutable_data_ptr<double>());
    return out;
  }
  at::Tensor keys = at::empty({r.rows, r.n}, r.x.options().dtype(at::kDouble));
  race_keys(call, keys.mutable_data_ptr<double>());
  auto [top, index] = keys.topk(r.k, -1, /*largest=*/true, /*sorted=*/true);
  flag_top_keys(r, call, top);
  return index.view(r.out_shape);
}

// The same draws from the k chunks with the largest maxima (chunk_max_serves).
void rank_chunk_keys(const Request& r, const DrawCall& call) {
  const int64_t chunk = chunk_max_items(r.n, r.k);
  const auto opts = r.x.options().dtype(at::kDouble);
  at::Tensor chunk_max = at::empty({r.rows, (r.n + chunk - 1) / chunk}, opts);
  chunk_max_keys(call, chunk, chunk_max.mutable_data_ptr<double>());
  const at::Tensor pick = std::get<1>(chunk_max.topk(r.k, -1, /*largest=*/true, /*sorted=*/false));
  at::Tensor keys = at::empty({r.rows, r.k * chunk}, opts);
  picked_chunk_keys(call, chunk, pick.const_data_ptr<int64_t>(), keys.mutable_data_ptr<double>());
  auto [top, pos] = keys.topk(r.k, -1, /*largest=*/true, /*sorted=*/true);
  picked_items(call, chunk, pick.const_data_ptr<int64_t>(), pos.const_data_ptr<int64_t>());
  flag_top_keys(r, call, top);
}

// With replacement, many draws: alias tables. For probabilities the build's value flags
// are the call's, so they go straight into the call's status word; logits are flagged
// first, then become float64 softmax weights.
at::Tensor draw_alias_tables(const Request& r, const DrawCall& call, std::optional<at::Generator> generator) {
  if (r.logits) {
    flag_rows(call);
    return sample_alias_tables(r, std::move(generator));
  }
  const at::Tensor table = at::empty({r.rows, r.n}, r.x.options().dtype(at::kLong));
  alias::build_tables_cuda(r.x.view({r.rows, r.n}), table, call.status);
  return sample_tables(table, r.k, std::move(generator)).view(r.out_shape);
}

at::Tensor sample_cuda(const Request& r, std::optional<at::Generator> generator) {
  at::Tensor out = at::empty(r.out_shape, r.x.options().dtype(at::kLong));
  if (r.rows == 0) return out;
  const c10::cuda::CUDAGuard guard(r.x.device());
  const auto stream = at::cuda::getCurrentCUDAStream();
  StatusWord status(r.x.options(), stream);
  const bool capturing = status.capturing();
  const Method method = choose(r, capturing);
  // Race keys take two Philox blocks (8 draws) per subsequence, the others one.
  const bool race = method == Method::kRace || method == Method::kThreadTopK || method == Method::kTwoPassTopK || method == Method::kFloorTopK ||
                    method == Method::kTopK || method == Method::kChunkMaxTopK || method == Method::kKeysTopK;
  DrawCall call{r.x,
                r.rows,
                r.n,
                r.k,
                r.logits,
                r.inv_temperature,
                cuda_philox_state(generator, r.x.device().index(), race ? 8 : 4),
                out.mutable_data_ptr<int64_t>(),
                status.bits(),
                stream};
  switch (method) {
    case Method::kWarpRows:
      draw_warp_rows(call);
      break;
    case Method::kRace:
      draw_race(call);
      break;
    case Method::kInverseCdf:
      draw_inverse_cdf(call, inverse_cdf_chunks(r.rows, r.n));
      break;
    case Method::kCdfSearch:
      draw_cdf_search(call);
      break;
    case Method::kAliasTables:
      out = draw_alias_tables(r, call, generator);
      break;
    case Method::kThreadTopK:
      draw_thread_topk(call);
      break;
    case Method::kTwoPassTopK:
      draw_two_pass_topk(call);
      break;
    case Method::kFloorTopK:
      draw_floor_topk(call);
      break;
    case Method::kTopK:
      draw_topk(call);
      break;
    case Method::kChunkMaxTopK:
      rank_chunk_keys(r, call);
      break;
    case Method::kKeysTopK:
      out = rank_keys(r, call, out, /*float_first=*/!capturing);
      break;
  }
  if (capturing) return out;
  uint32_t flags = status.read();
  if (flags & kFloatKeyTies) {  // float keys tied past the candidates (rare): float64 keys decide
    status.clear();
    out = rank_keys(r, call, out, /*float_first=*/false);
    flags = status.read();
  }
  raise_value_flags(r, flags);
  return out;
}

at::Tensor multinomial_cuda(const at::Tensor& input, int64_t num_samples, bool replacement,
                            std::optional<at::Generator> generator) {
  return sample_cuda(multinomial_request(input, num_samples, replacement), generator);
}

at::Tensor sample_logits_cuda(const at::Tensor& logits, int64_t num_samples, double temperature, bool replacement,
                              std::optional<at::Generator> generator) {
  return sample_cuda(logits_request(logits, num_samples, temperature, replacement), generator);
}

}  // namespace

TORCH_LIBRARY_IMPL(wrs, CUDA, m) {
  m.impl("multinomial", &multinomial_cuda);
  m.impl("sample_logits", &sample_logits_cuda);
}

}  // namespace wrs::multinomial
