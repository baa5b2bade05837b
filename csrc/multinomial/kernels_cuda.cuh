#pragma once
// The CUDA kernels of the multinomial family, as launchers that multinomial_cuda.cu calls
// by the method table (dispatch_cuda.cpp). Each dispatches over the input dtype and the
// weight law.
#include "multinomial/dispatch_cuda.h"
#include "multinomial/laws.h"

#include <ATen/core/Tensor.h>
#include <ATen/cuda/PhiloxCudaState.h>
#include <cuda_runtime.h>

#include <tuple>

namespace wrs::multinomial {

constexpr unsigned kFullMask = 0xffffffffu;

// One call: rows of `n` inputs (contiguous [rows, n]), `k` draws per row into out
// [rows, k]; problems OR-ed into *status (common/checks.h flags, kTooFewNonzero).
struct DrawCall {
  at::Tensor x;
  int64_t rows;
  int64_t n;
  int64_t k;
  bool logits;             // x are logits (softmax(x / T)), else probabilities
  double inv_temperature;  // 1 / T, logits only
  at::PhiloxCudaState philox;
  int64_t* out;
  uint32_t* status;
  cudaStream_t stream;
};

// The device's multiprocessors (the first device's, as every call's chunks are sized by).
int64_t device_sms();

// With replacement (the alias tables' quantized law, laws.h).
// Short rows, a row per 8-32 lanes of a warp (warp_rows_serve).
void draw_warp_rows(const DrawCall& call);
// Any row length: `chunks` chunks of a row per block (inverse_cdf_chunks), up to
// kMaxChunkSamples draws per row; a block per row (chunks == 1) up to kMaxRowSamples,
// since its block holds and sorts them all.
void draw_inverse_cdf(const DrawCall& call, int64_t chunks);
// The same draws, any number per row: the rows' cumulative units stored ([rows, n]
// uint64 scratch) and a binary search per draw.
void draw_cdf_search(const DrawCall& call);
// The value flags of every row (summary_flags), without drawing; k and out unused.
void flag_rows(const DrawCall& call);

// One draw per row (either way; race keys, laws.h): the race's winner, one read of the
// row and one launch, the first draw without replacement of the same seed.
void draw_race(const DrawCall& call);

// Without replacement (race keys, laws.h), up to kMaxTopK draws: warps keep the top k of
// their stretch; a block serves several short rows, or a chunk of a long row whose
// chunks are then merged (topk_warp_cuda.cu).
void draw_topk(const DrawCall& call);
// The same draws in two passes over long rows (two_pass_serves): each chunk's largest key
// first; then only the k chunks with the largest, which hold the top k.
void draw_two_pass_topk(const DrawCall& call);
// The same draws, a block per row of up to kMaxFloorRow items (floor_topk_serves): a
// floor below the k-th key from bounds on every key, then the float64 keys of the few
// items that could reach it. No lists and one read of the row.
void draw_floor_topk(const DrawCall& call);
// Few draws (thread_rows_serve): a thread per row, the same keys and draws as draw_topk.
void draw_thread_topk(const DrawCall& call);
// Beyond kMaxTopK, torch.topk ranks every item's race key ([rows, n]; value flags only):
// float64 keys, or first float keys (half the bytes to rank), taking kTieSlack more than
// k (or the whole row), whose runs of keys not surely ordered rank_candidates then orders
// by float64 key. The float keys are the float64 ones rounded or, with `approx` (inputs
// exact in float, up to kMaxApproxCandidates), computed in float without a float64 log,
// within a stated error: for the largest keys, about 1 / k apart relatively around the
// k-th, an error of 2^-20 leaves runs of a few. It flags kFloatKeyTies where a run could
// reach past the candidates or is longer than kTieSlack (then the float64 keys decide),
// and zero-sum rows and rows with too few nonzero weights.
constexpr int64_t kTieSlack = 64;
constexpr int64_t kMaxApproxCandidates = int64_t{1} << 14;
constexpr uint32_t kFloatKeyTies = 1u << 9;
template <typename key_t>
void race_keys(const DrawCall& call, key_t* keys, bool approx = false);
void rank_candidates(const DrawCall& call, int64_t cands, bool approx, const float* cand_g, int64_t* cand_index,
                     double* cand_key);
// Where the candidates are at most 1 / kThresholdItemsPerCandidate of the row
// (threshold_serves): threshold_candidates (threshold_cuda.cu) finds them, [rows, cands]
// by float key and item, ranking only the keys above a threshold sampled from the row's.
// A row it misses is flagged kFloatKeyTies.
std::tuple<at::Tensor, at::Tensor> threshold_candidates(const DrawCall& call, const at::Tensor& keys, int64_t cands);
// The same draws over long rows (chunk_max_serves), ranking far fewer keys: each chunk's
// largest float64 key ([rows, ceil(n / chunk)]), then, once torch.topk has picked the k
// chunks with the largest ([rows, k]), the keys of their items ([rows, k * chunk], for
// torch.topk again), whose positions picked_items maps back to items. Chunks of
// chunk_max_items(n, k) items, about sqrt(n / k), balance the two.
int64_t chunk_max_items(int64_t n, int64_t k);
void chunk_max_keys(const DrawCall& call, int64_t chunk, double* chunk_max);
void picked_chunk_keys(const DrawCall& call, int64_t chunk, const int64_t* pick, double* keys);
void picked_items(const DrawCall& call, int64_t chunk, const int64_t* pick, const int64_t* pos);

}  // namespace wrs::multinomial
