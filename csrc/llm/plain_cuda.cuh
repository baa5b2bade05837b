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

#include <ATen/cuda/PhiloxCudaState.h>

namespace wrs::llm {

// Whether a call takes the plain kernel: the scalar controls above, or per-row control
// tensors (its rows decided on the device), and rows short enough for its segment sums
// (262,144 items a CTA, up to 8 CTAs a row).
bool plain_serves(const Call& call);

// Whether some rows of a call the plain kernel serves may be deferred to the sample kernel:
// with per-row tensors, greedy rows, top-p alone where rejection does not fit (several
// samples, processed log-probabilities), and top-k above 1,024.
bool plain_defers(const Call& call);

// Launches it on the current stream: tokens [rows, samples], logprobs or nullptr; where
// plain_defers, deferred [rows] marks the rows it left (then the sample kernel's).
void launch_plain(const Call& call, at::PhiloxCudaState philox, int64_t* tokens, float* logprobs, uint8_t* deferred);

}  // namespace wrs::llm
