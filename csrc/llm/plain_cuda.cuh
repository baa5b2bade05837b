#pragma once
// Plain LLM sampling on CUDA: sample_llm with controls, as numbers or per row, of a positive
// temperature, a min-p or none, a top-k up to 1,024 or none, top-p with top-k or (one sample
// a row, no processed log-probabilities) alone; seeds or not. A streaming kernel reads each
// row once (then the few segments that hold kept items again). The law and the draw are the
// resident path's (sample_cuda.cu): inverse CDF at the same 53-bit uniform point over the
// row's 128-item segments in row order, float64 sums. Logit weights are exp(y - m_j) for the
// segment's own maximum m_j, rescaled by exp(m_j - M) in float64 once the row's maximum M is
// known, so one read serves both (the resident path knows M first; the two agree but where
// float rounding differs).
#include "llm/llm_ops.h"
#include "llm/route.h"

#include <ATen/cuda/PhiloxCudaState.h>

namespace wrs::llm {

// Top-n log-probs from the thresholds kernel (route.h's fuses_top_n): top_tokens and top_lp
// [rows, n], ranks [rows, samples], and redo [rows], 1 where the row is left to top_logprobs'
// kernels (they then rewrite its log-probs too).
struct TopNArg {
  int64_t n = 0;
  int64_t* top_tokens = nullptr;
  float* top_lp = nullptr;
  int64_t* ranks = nullptr;
  uint8_t* redo = nullptr;
};

// Launches the plain kernel (route.kernel: kPlain or kPlainThresholds) on the current
// stream: tokens [rows, samples], logprobs or nullptr; where route.defers, deferred [rows]
// marks the rows it left to the sample kernel (greedy rows, top-p alone where rejection does
// not fit: several samples or processed log-probabilities, top-k above 1,024). top: the
// kTopN variant (logits, thresholds, raw log-probs, no plan).
void launch_plain(const Call& call, const Route& route, at::PhiloxCudaState philox, int64_t* tokens, float* logprobs,
                  uint8_t* deferred, const TopNArg* top = nullptr);

// sample_llm's draw on CUDA (sample_cuda.cu) into tokens and logprobs (or nullptr): the
// route's kernels, then the sample kernel for rows the plain kernel deferred. top: as
// launch_plain's, where fuses_top_n holds.
void draw_llm(const Call& call, at::PhiloxCudaState philox, int64_t* tokens, float* logprobs,
              const TopNArg* top = nullptr);

// Launches the top-p kernel (route.kernel: kTopP, top_p_cuda.cu) on the current stream:
// tokens [rows], logprobs [rows] (raw) or nullptr.
void launch_top_p(const Call& call, const Route& route, at::PhiloxCudaState philox, int64_t* tokens, float* logprobs);

}  // namespace wrs::llm
