#pragma once
// The CUDA kernels of the multinomial family, as launchers the method table in
// multinomial_cuda.cu calls. Each dispatches over the input dtype and the weight law.
#include "multinomial/laws.h"

#include <ATen/core/Tensor.h>
#include <ATen/cuda/PhiloxCudaState.h>
#include <cuda_runtime.h>

#include <tuple>

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
// chunks are then merged.
constexpr int64_t kMaxTopK = 64;
void draw_topk(const DrawCall& call);
// The same draws in two passes over long rows: each chunk's largest key first; then only
// the k chunks with the largest, which hold the top k. Where it serves, measured against
// one pass on an H100 (us, one pass -> two passes; docs/benchmarks.md):
//
// | rows        | input         | draws         | items per row      | why                              |
// | ----------- | ------------- | ------------- | ------------------ | -------------------------------- |
// | <= 256      | probabilities | 2 <= k < 8    | >= 256 k, and rows | few draws admit few keys into    |
// |             |               |               | x n >= 2^24        | one pass's lists, so only large  |
// |             |               |               |                    | calls pay for five launches:     |
// |             |               |               |                    | bfloat16 256 x 2^20, k = 2:      |
// |             |               |               |                    | 1,554 -> 1,086; 64 x 128,256:    |
// |             |               |               |                    | 90 -> 92; 1 x 32,000: 54 -> 62   |
// | <= 256      | probabilities | 8 <= k <= 64  | >= 256 k           | one pass admits about            |
// |             |               |               |                    | k (1 + ln(m / k)) keys per warp's|
// |             |               |               |                    | m items: bfloat16 64 x 4,096,    |
// |             |               |               |                    | k = 8: 75 -> 58                  |
// | <= 256      | logits        | 16 <= k <= 64 | >= 256 k           | a logit's bound costs more:      |
// |             |               |               |                    | float32 256 x 152,064, k = 8:    |
// |             |               |               |                    | 311 -> 318; k = 16: 376 -> 339   |
// | 257 - 1,024 | either        | 33 <= k <= 64 | >= 256 k           | bfloat16 1,024 x 32,000, k = 33: |
// |             |               |               |                    | 615 -> 362 (torch 589)           |
// | > 1,024     | either        | 33 <= k <= 64 | >= 384 k           | where k chunks are most of a row |
// |             |               |               |                    | the second pass reads it again:  |
// |             |               |               |                    | 4,096 x 16,384, k = 64: 1,190 -> |
// |             |               |               |                    | 1,259; x 32,000: 1,775 -> 1,548  |
// | > 256       | probabilities | 2 <= k <= 32  | >= 8,192 k         | with many rows one pass fills    |
// |             |               |               |                    | the GPU; long rows still pay:    |
// |             |               |               |                    | 4,096 x 32,000, k = 8: 933 ->    |
// |             |               |               |                    | 1,007; 1,024 x 65,536: 527 -> 417|
//
// Rows that the floor top-k below serves (up to 32,768 items) take it first.
// Never fewer than kTwoPassItemsPerDraw items per draw: k chunks of at least a warp's trip.
constexpr int64_t kTwoPassItemsPerDraw = 256;
bool two_pass_serves(int64_t rows, int64_t n, int64_t k, bool logits);
void draw_two_pass_topk(const DrawCall& call);
// The same draws, a block per row of up to kMaxFloorRow items (its quads' bounds fit in
// shared memory): a floor below the k-th key from bounds on every key, then the float64
// keys of the few items that could reach it (floor_topk_cuda.cu). No lists: 56 registers
// and one read of the row, where one pass keeps 64-key lists in 128 registers and two
// passes read most of a row twice when k chunks are most of it. Where it serves, against
// what served before it (H100, bfloat16, us, before -> floor; docs/benchmarks.md;
// torch.multinomial in brackets):
//
// | items per row   | rows   | why                                                      |
// | --------------- | ------ | -------------------------------------------------------- |
// | 1,000 - 8,192   | any    | 4,096 x 8,448, k = 64: 840 -> 388 (637); 1 x 4,096,      |
// |                 |        | k = 64: 83 -> 38; 65,536 x 1,000, k = 64: 1,889 -> 1,479 |
// |                 |        | (2,066)                                                  |
// | 8,193 - 16,384  | >= 32  | 4,096 x 16,384, k = 64: 1,274 -> 549 (1,060); with fewer |
// |                 |        | rows a block per row idles most SMs: 8 x 16,384, k = 64: |
// |                 |        | 58 -> 62                                                 |
// | 16,385 - 32,768 | >= 128 | 4,096 x 32,000, k = 8: 919 -> 429; 128 x 32,000, k = 64: |
// |                 |        | 90 -> 82, but 64 x 32,000: 69 -> 81                      |
//
// Shorter rows idle most of a block's threads (16,384 x 512, k = 8: 207 -> 815; 1,024 x
// 768, k = 64: 55 -> 111).
constexpr int64_t kMaxFloorRow = int64_t{1} << 15;
bool floor_topk_serves(int64_t rows, int64_t n, int64_t k);
void draw_floor_topk(const DrawCall& call);
// Few draws: a thread per row, the same keys and draws as draw_topk. Rows of up to
// kMaxThreadRow items; or, from kThreadRowsFrom rows on (a thread per row then fills the
// GPU), of up to kMaxThreadLongRow items, which a thread streams at less cost than a warp
// per row merging lists (H100, 65,536 x 1,000, k = 8: 0.81 against 1.23 ms; 1,048,576 x
// 100, k = 2: 1.20 against 3.93 ms). With fewer rows too few threads run: 16,384 x
// 1,000, k = 8: 0.57 against 0.33 ms.
constexpr int64_t kMaxThreadRow = 32;
constexpr int64_t kThreadRowsFrom = int64_t{1} << 16;
constexpr int64_t kMaxThreadLongRow = 4096;
constexpr int kMaxThreadRowSamples = 8;
bool thread_rows_serve(int64_t rows, int64_t n, int64_t k);
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
// Where the candidates are at most 1 / kThresholdItemsPerCandidate of the row:
// threshold_candidates (threshold_cuda.cu) finds them, [rows, cands] by float key and
// item, ranking only the keys above a threshold sampled from the row's. A row it misses
// is flagged kFloatKeyTies.
constexpr int64_t kThresholdItemsPerCandidate = 8;
bool threshold_serves(int64_t n, int64_t cands);
std::tuple<at::Tensor, at::Tensor> threshold_candidates(const DrawCall& call, const at::Tensor& keys, int64_t cands);
// The same draws over rows of at least kChunkMaxItemsPerDraw k items, ranking far fewer
// keys: each chunk's largest float64 key ([rows, ceil(n / chunk)]), then, once torch.topk
// has picked the k chunks with the largest ([rows, k]), the keys of their items
// ([rows, k * chunk], for torch.topk again), whose positions picked_items maps back to
// items. Chunks of chunk_max_items(n, k) items, about sqrt(n / k), balance the two. The
// chunk pass costs more per item than float keys do (float64 bounds, and a warp takes a
// float64 log wherever one lane needs it), and two torch.topk calls over small rows cost
// more than one over every key, so it serves rows of kChunkMaxRowFrom items or more,
// kChunkMaxFromItems in all (measured, every key against chunk maxima: 8 x 2^24, k =
// 1,024: 2.7 against 2.0 ms; 1 x 2^20: 0.21 against 0.52; 4,096 x 32,000, k = 256: 2.7
// against 3.6). Eager calls now take the sampled threshold, which ranks fewer keys still;
// chunk maxima serve calls being captured, where no host read can follow up a row the
// threshold missed.
constexpr int64_t kChunkMaxItemsPerDraw = 64;
constexpr int64_t kChunkMaxRowFrom = int64_t{1} << 20;
constexpr int64_t kChunkMaxFromItems = int64_t{1} << 26;
bool chunk_max_serves(int64_t rows, int64_t n, int64_t k);
int64_t chunk_max_items(int64_t n, int64_t k);
void chunk_max_keys(const DrawCall& call, int64_t chunk, double* chunk_max);
void picked_chunk_keys(const DrawCall& call, int64_t chunk, const int64_t* pick, double* keys);
void picked_items(const DrawCall& call, int64_t chunk, const int64_t* pick, const int64_t* pos);

}  // namespace wrs::multinomial
