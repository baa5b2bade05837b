#pragma once
// The CUDA kernels of the multinomial family, as launchers the method table in
// multinomial_cuda.cu calls. Each dispatches over the input dtype and the weight law.
#include "multinomial/laws.h"

#include <ATen/core/Tensor.h>
#include <ATen/cuda/PhiloxCudaState.h>
#include <cuda_runtime.h>

namespace wrs::multinomial {

constexpr int kWarp = 32;
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

// Calls f(weights) with the call's weight law (laws.h).
template <typename F>
void with_weights(const DrawCall& call, F&& f) {
  if (call.logits) {
    f(LogitWeights{call.inv_temperature});
  } else {
    f(ProbWeights{1.0});
  }
}

// With replacement (the alias tables' quantized law, laws.h).
// Short rows, a row per 8-32 lanes of a warp: n <= kMaxWarpRow and warp_rows_serve.
constexpr int64_t kMaxWarpRow = 1024;
constexpr int64_t kWarpRowSlice = 64;  // samples of a row one warp draws, at least
bool warp_rows_serve(int64_t rows, int64_t n, int64_t k, bool float64);
void draw_warp_rows(const DrawCall& call);
// Any row length: chunks of a row per block, up to kMaxChunkSamples draws per row; a block
// per row (chunks == 1) up to kMaxRowSamples, since its block holds and sorts them all.
constexpr int64_t kMaxRowSamples = 128;
constexpr int64_t kMaxChunkSamples = 1024;
int64_t inverse_cdf_chunks(int64_t rows, int64_t n);
void draw_inverse_cdf(const DrawCall& call, int64_t chunks);
// The value flags of every row (summary_flags), without drawing; k and out unused.
void flag_rows(const DrawCall& call);

// Without replacement (race keys, laws.h), up to kMaxTopK draws: warps keep the top k of
// their stretch; a block serves several short rows, or a chunk of a long row whose
// chunks are then merged.
constexpr int64_t kMaxTopK = 64;
void draw_topk(const DrawCall& call);
// The same draws in two passes over long rows: each chunk's largest key first; then only
// the k chunks with the largest, which hold the top k. For 32 < k <= kMaxTopK (two-slot
// lists, whose admissions cost one pass the most), n >= kTwoPassItemsPerDraw k (at least k
// chunks), and rows <= kTwoPassShortRowsUpTo or n >= kTwoPassLongRowsFrom k (4,096 x
// 32,000, k = 64: the second pass reads half of each row, and one pass is faster).
constexpr int64_t kTwoPassItemsPerDraw = 256;
constexpr int64_t kTwoPassShortRowsUpTo = 256;
constexpr int64_t kTwoPassLongRowsFrom = 2048;
bool two_pass_serves(int64_t rows, int64_t n, int64_t k);
void draw_two_pass_topk(const DrawCall& call);
// Short rows, few draws: a thread per row, the same keys and draws as draw_topk.
constexpr int64_t kMaxThreadRow = 32;
constexpr int kMaxThreadRowSamples = 8;
bool thread_rows_serve(int64_t n, int64_t k);
void draw_thread_topk(const DrawCall& call);
// Beyond kMaxTopK, torch.topk ranks every item's race key ([rows, n]; value flags only):
// float64 keys, or first their float roundings (half the bytes to rank), taking
// kTieSlack more than k, whose float64 keys rank_candidates then orders. It flags
// kFloatKeyTies where ties of float keys could reach past the candidates (then the float64
// keys decide), and zero-sum rows and rows with too few nonzero weights.
constexpr int64_t kTieSlack = 64;
constexpr uint32_t kFloatKeyTies = 1u << 9;
template <typename key_t>
void race_keys(const DrawCall& call, key_t* keys);
void rank_candidates(const DrawCall& call, int64_t cands, const float* cand_g, int64_t* cand_index,
                     double* cand_key);

}  // namespace wrs::multinomial
