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
#include <cstring>
#include <limits>

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

// A penalty plan: penalize_logits' rule as overrides of the raw row, so that a sampler applies
// it in its own read of the row (penalty_plan builds it; sample_llm(overrides=) reads it).
// int32 [B, 2W + W2 + 4C], W = ceil(V / 32), W2 = W rounded up to even, C a power of two
// >= 2 (at least twice the listed ids); row b holds
//   [0, 2W)              word k of the allowed bitmask, then word k of the override bits, in
//                        turns (one 8-byte load gives both for 32 items);
//   [2W, 2W + W)         prefix[k]: the overridden items in words before k;
//   [2W + W2, + C)       the overridden items' float32 values (bits), in id order, so that
//                        item t's is at prefix[t / 32] + the override bits below t in its word
//                        (a CTA stages its share's prefixes and values in shared memory);
//   [2W + W2 + C, + 3C)  the builder's scratch: a hash table of the listed ids (linear
//                        probing, ordered as Amble and Knuth's: along a run a larger id never
//                        follows a smaller one, so its layout depends on the set of ids alone,
//                        and CPU and CUDA plans are bit for bit alike), their values and flags.
// Item t reads its override value where its override bit is set, else x_t where allowed, else
// -inf. An invalid row allows nothing and overrides item 0 with NaN.
C10_HOST_DEVICE inline int64_t plan_words(int64_t v) { return (v + 31) / 32; }
C10_HOST_DEVICE inline int64_t plan_values_at(int64_t v) { return 3 * plan_words(v) + (plan_words(v) & 1); }
C10_HOST_DEVICE inline int64_t plan_stride(int64_t v, int64_t cap) { return plan_values_at(v) + 4 * cap; }

C10_HOST_DEVICE inline uint32_t plan_slot(int64_t id, int64_t cap) {
  return static_cast<uint32_t>((static_cast<uint64_t>(id) * 0x9E3779B97F4A7C15ull) >> 32) &
         static_cast<uint32_t>(cap - 1);
}

// The slot of id t in the builder's table that holds it.
C10_HOST_DEVICE inline uint32_t plan_find(const int32_t* keys, int64_t cap, int64_t t) {
  uint32_t h = plan_slot(t, cap);
  for (int64_t probe = 0; probe < cap && keys[h] != t; ++probe) h = (h + 1) & static_cast<uint32_t>(cap - 1);
  return h;
}

C10_HOST_DEVICE inline int popcount32(uint32_t w) {
#if defined(__CUDA_ARCH__)
  return __popc(w);
#else
  return __builtin_popcount(w);
#endif
}

C10_HOST_DEVICE inline float float_of_bits(int32_t b) {
#if defined(__CUDA_ARCH__)
  return __int_as_float(b);
#else
  float f;
  std::memcpy(&f, &b, sizeof(f));
  return f;
#endif
}

// Where item t's override value lies among the row's values (its override bit is set).
C10_HOST_DEVICE inline int64_t plan_rank(int32_t prefix, uint32_t over_word, int64_t t) {
  return prefix + popcount32(over_word & ((1u << (t & 31)) - 1u));
}

// Item t's value from its raw value x: the plan's rule above (cap C bounds the index, so a
// tensor that penalty_plan did not build reads no memory outside its row).
C10_HOST_DEVICE inline float plan_item(const int32_t* row, int64_t v, int64_t cap, int64_t t, float x) {
  const uint32_t allowed_word = static_cast<uint32_t>(row[2 * (t >> 5)]);
  const uint32_t over_word = static_cast<uint32_t>(row[2 * (t >> 5) + 1]);
  if ((over_word >> (t & 31)) & 1u) {
    const int64_t i = plan_rank(row[2 * plan_words(v) + (t >> 5)], over_word, t);
    return i >= 0 && i < cap ? float_of_bits(row[plan_values_at(v) + i]) : std::numeric_limits<float>::quiet_NaN();
  }
  return ((allowed_word >> (t & 31)) & 1u) ? x : -std::numeric_limits<float>::infinity();
}

}  // namespace wrs::llm
