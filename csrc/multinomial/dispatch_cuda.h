#pragma once
// The CUDA multinomial's method table: which kernel serves a call, from its shape alone
// (dispatch_cuda.cpp), and the limits and tuning the kernels share, kept apart from them
// as CUB keeps its tuning policies. Plain C++, built on every machine, so that the route
// is tested without a GPU (torch.ops.wrs._multinomial_route). The measurements behind
// each rule: docs/methods.md, "multinomial on CUDA".
#include "multinomial/shape.h"

#include <cstdint>

namespace wrs::multinomial {

enum class CudaMethod {
  kThreadTopK,    // a thread per row streams its race keys (topk_thread_cuda.cu)
  kWarpRows,      // with replacement: 8-32 lanes of a warp per short row (warp_rows_cuda.cu)
  kRace,          // one draw: the race's winner, one read (race_cuda.cu)
  kInverseCdf,    // with replacement: an integer inverse CDF over chunks (inverse_cdf_cuda.cu)
  kCdfSearch,     // with replacement, many draws: a stored CDF and a search a draw (cdf_search_cuda.cu)
  kAliasTables,   // with replacement, most draws: alias tables (alias family)
  kFloorTopK,     // without: a block per row, a floor below the k-th key (floor_topk_cuda.cu)
  kTwoPassTopK,   // without: each chunk's largest key, then the k best chunks (topk_two_pass_cuda.cu)
  kTopK,          // without: warps keep the top k of their stretch (topk_warp_cuda.cu)
  kChunkMaxTopK,  // without, k > 64, under capture: chunk maxima, then torch.topk (topk_keys_cuda.cu)
  kKeysTopK,      // without, k > 64: every item's key, torch.topk (topk_keys_cuda.cu)
};

// `sms`: the GPU's multiprocessors, which set how many chunks fill it.
CudaMethod choose_cuda(const Shape& s, bool capturing, int64_t sms);
const char* method_name(CudaMethod m);

constexpr int kWarp = 32;

// Warp rows: rows of up to kMaxWarpRow items (float64: half), up to kWarpRowSlice draws a
// row a warp; rows of up to 32 items take more, up to kMaxShortRow* samples.
constexpr int64_t kMaxWarpRow = 1024;
constexpr int64_t kWarpRowSlice = 64;
constexpr int64_t kMaxShortRowSamples = 1024;
constexpr int64_t kMaxShortRowDraws = int64_t{1} << 18;
bool warp_rows_serve(int64_t rows, int64_t n, int64_t k, bool float64);

// The inverse CDF: chunks of whole tiles, at most kMaxInverseCdfChunks a row, enough to
// give the GPU 16 blocks an SM; a block per row (one chunk) holds up to kMaxRowSamples
// draws, chunks of a row up to kMaxChunkSamples.
constexpr int64_t kInverseCdfTile = 1024;
constexpr int64_t kMaxInverseCdfChunks = 1024;
constexpr int64_t kMaxRowSamples = 128;
constexpr int64_t kMaxChunkSamples = 1024;
int64_t inverse_cdf_chunks(int64_t rows, int64_t n, int64_t sms);

// One draw by the race (race_serves: by the call's items and whether a row is one chunk).
bool race_serves(const Shape& s, int64_t sms);

// Without replacement: warp lists hold up to kMaxTopK keys.
constexpr int64_t kMaxTopK = 64;
// Two passes: never fewer than kTwoPassItemsPerDraw items per draw (k chunks of at least a
// warp's trip); the classes are dispatch_cuda.cpp's kTwoPassClasses.
constexpr int64_t kTwoPassItemsPerDraw = 256;
bool two_pass_serves(int64_t rows, int64_t n, int64_t k, bool logits);
// The floor top-k: rows of up to kMaxFloorRow items (their quads' bounds fit in shared
// memory), by dispatch_cuda.cpp's kFloorClasses.
constexpr int64_t kMaxFloorRow = int64_t{1} << 15;
bool floor_topk_serves(int64_t rows, int64_t n, int64_t k);
// A thread per row: up to kMaxThreadRowSamples draws from rows of up to kMaxThreadRow
// items, or of up to kMaxThreadLongRow items from kThreadRowsFrom rows on.
constexpr int64_t kMaxThreadRow = 32;
constexpr int64_t kThreadRowsFrom = int64_t{1} << 16;
constexpr int64_t kMaxThreadLongRow = 4096;
constexpr int kMaxThreadRowSamples = 8;
bool thread_rows_serve(int64_t rows, int64_t n, int64_t k);
// Beyond kMaxTopK: a sampled threshold finds the candidates where they are at most
// 1 / kThresholdItemsPerCandidate of the row (eager calls), chunk maxima serve long rows
// under capture.
constexpr int64_t kThresholdItemsPerCandidate = 8;
bool threshold_serves(int64_t n, int64_t cands);
constexpr int64_t kChunkMaxItemsPerDraw = 64;
constexpr int64_t kChunkMaxRowFrom = int64_t{1} << 20;
constexpr int64_t kChunkMaxFromItems = int64_t{1} << 26;
bool chunk_max_serves(int64_t rows, int64_t n, int64_t k);

}  // namespace wrs::multinomial
