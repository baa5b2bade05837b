#pragma once
// penalize_logits: the pass engines run before sampling, in vLLM's order, a row at a time
// (docs/llm.md, "The pass before sampling"). For row b of logits x [B, V]:
//   1. out = float32(x) where allowed_bitmask lets the token through (bit t % 32 of word
//      t / 32 set; xgrammar's layout), -inf elsewhere; a whole row of NaN where the row's
//      repetition penalty is not > 0 (an invalid row, as the samplers mark it);
//   2. out[id] = -inf for each id of masked_ids[b] (banned ids, EOS of rows under min_tokens);
//   3. out[id] += value for each (id, value) of the bias (duplicate ids add up);
//   4. for each distinct id of output_ids[b] and prompt_ids[b], with c its count in
//      output_ids[b]: penalized(out[id], c) below.
// Ids outside [0, V) (-1 pads the lists) are left out. CPU and CUDA apply the same float32
// arithmetic.
#include <c10/macros/Macros.h>

#include <cmath>
#include <cstdint>

namespace wrs::llm {

struct PenaltyRow {
  float repetition;  // <= 0 (and NaN): the row is invalid; 1 with no repetition penalty
  float frequency;   // 0 where absent
  float presence;
};

// A seen token's logit: divided by the repetition penalty where positive, multiplied where
// not (Hugging Face's and vLLM's rule), then less frequency x count and presence x (count > 0).
// One fused multiply-add on both devices, so that the CPU and CUDA results agree bit for bit.
C10_HOST_DEVICE inline float penalized(float v, int32_t count, const PenaltyRow& p) {
  v = v > 0.0f ? v / p.repetition : v * p.repetition;
  return fmaf(-p.frequency, static_cast<float>(count), v) - (count > 0 ? p.presence : 0.0f);
}

C10_HOST_DEVICE inline bool allowed(const int32_t* bitmask_row, int64_t t) {
  return bitmask_row == nullptr || ((static_cast<uint32_t>(bitmask_row[t >> 5]) >> (t & 31)) & 1u);
}

}  // namespace wrs::llm
