#pragma once
// One phase of the Metropolis-Hastings sweep of the LDA example (examples/lda_gibbs.py:
// mh_start, then `cycles` times mh_cycle), a token at a time, shared by the CPU and CUDA
// kernels. Token i of the phase (corpus position t = phase + phases i, document d, word w,
// topic s0 at the sweep's start) runs its whole chain in registers:
//
//   word step:     k from word w's alias table over q_word (the sweep's counts); a draw of
//                  s0 is kept with probability keep_own = q_word_others(s0) / q_word(s0),
//                  else drawn again, at most twice, so that the proposal is q_word_others,
//                  which leaves the token itself out, but for a third rejection (below
//                  table(s0)^3), which proposes s0 anyway, as the example's torch chain does;
//   document step: the sweep-start topic of another token of d at random, or a uniform
//                  topic, in proportion (others : K alpha), i.e. q_doc_others;
//   each step:     accept k with probability min(1, pi(k) q(s) / (pi(s) q(k))), pi the
//                  full conditional under the counts now.
//
// Arithmetic is float32, as in the example. Randomness: token i's cycle c takes Philox
// blocks 4c .. 4c + 3 of subsequence i (16 words; a cycle uses at most 13), so a call
// reserves 16 x cycles words a subsequence.
#include "alias/alias.h"

#include <c10/macros/Macros.h>

#include <cstdint>

namespace wrs::lda {

constexpr int kWordsPerCycle = 16;

struct Counts {  // int32 [D, K], int32 [V, K], int64 [K]
  const int32_t* n_dk;
  const int32_t* n_wk;
  const int64_t* n_k;
};

struct Proposals {  // the sweep's start: its counts, q_word and its alias tables, z
  Counts counts;
  const float* q_word;        // [V, K]
  const int64_t* word_table;  // [V, K], alias_table(q_word)
  const int64_t* z;           // [tokens]
  const int64_t* doc_start;   // [D]
  const int64_t* doc_length;  // [D]
  int64_t tokens;
};

struct Model {
  int64_t K, V;
  float alpha, beta;
  int64_t phase, phases;
  int cycles;
};

// The full conditional of topic k (unnormalised) for a token of (d, w) whose topic in `c`
// is s0.
C10_HOST_DEVICE inline float conditional(const Counts& c, const Model& m, int64_t d, int64_t w, int64_t s0,
                                         int64_t k) {
  const float own = k == s0 ? 1.0f : 0.0f;
  return (static_cast<float>(c.n_dk[d * m.K + k]) - own + m.alpha) *
         (static_cast<float>(c.n_wk[w * m.K + k]) - own + m.beta) /
         (static_cast<float>(c.n_k[k]) - own + static_cast<float>(m.V) * m.beta);
}

// Words of one token's stream, in order: block(b) gives Philox block b of its subsequence.
template <typename Block>
struct TokenBits {
  Block block;
  uint64_t next = 0;
  uint32_t words[4] = {0, 0, 0, 0};
  int used = 4;
  C10_HOST_DEVICE uint32_t operator()() {
    if (used == 4) {
      block(next++, words);
      used = 0;
    }
    return words[used++];
  }
  C10_HOST_DEVICE float uniform() { return static_cast<float>((*this)() >> 8) * 0x1.0p-24f; }  // [0, 1), as torch.rand
  C10_HOST_DEVICE void start_cycle(int c) {
    next = static_cast<uint64_t>(c) * (kWordsPerCycle / 4);
    used = 4;
  }
};

template <typename Block>
C10_HOST_DEVICE inline int64_t mh_token(const Counts& now, const Proposals& p, const Model& m, int64_t i, int64_t d,
                                        int64_t w, int64_t s0, TokenBits<Block>& bits) {
  const Counts& start = p.counts;
  const float vb = static_cast<float>(m.V) * m.beta;
  auto q_word_others = [&](int64_t x) {
    const float own = x == s0 ? 1.0f : 0.0f;
    return (static_cast<float>(start.n_wk[w * m.K + x]) - own + m.beta) /
           (static_cast<float>(start.n_k[x]) - own + vb);
  };
  auto q_doc_others = [&](int64_t x) {
    return static_cast<float>(start.n_dk[d * m.K + x]) - (x == s0 ? 1.0f : 0.0f) + m.alpha;
  };
  const float keep_own = q_word_others(s0) / p.q_word[w * m.K + s0];
  const int64_t t = m.phase + m.phases * i;
  const int64_t others = p.doc_length[d] - 1;
  int64_t s = s0;
  float pi_s = conditional(now, m, d, w, s0, s0);
  for (int c = 0; c < m.cycles; ++c) {
    bits.start_cycle(c);
    auto table_draw = [&]() {
      const uint32_t lo = bits(), hi = bits();
      const alias::BucketDraw b = alias::draw_bucket(static_cast<uint64_t>(m.K), lo, hi);
      return alias::pick(b, p.word_table[w * m.K + static_cast<int64_t>(b.bucket)], static_cast<uint64_t>(m.K));
    };
    int64_t k = table_draw();
    for (int again = 0; again < 2; ++again) {
      if (k == s0 && bits.uniform() >= keep_own) k = table_draw();
    }
    float pi_k = conditional(now, m, d, w, s0, k);
    if (bits.uniform() * pi_s * q_word_others(k) < pi_k * q_word_others(s)) {
      s = k;
      pi_s = pi_k;
    }
    // Document step.
    int64_t j = static_cast<int64_t>(bits.uniform() * static_cast<float>(others));
    j = j < others - 1 ? j : others - 1;
    int64_t pick = p.doc_start[d] + (j > 0 ? j : 0);
    pick += pick >= t ? 1 : 0;  // skip the token itself
    const bool from_doc = bits.uniform() * (static_cast<float>(others) + static_cast<float>(m.K) * m.alpha) <
                          static_cast<float>(others);
    int64_t uniform_topic = static_cast<int64_t>(bits.uniform() * static_cast<float>(m.K));
    uniform_topic = uniform_topic < m.K - 1 ? uniform_topic : m.K - 1;
    pick = pick < p.tokens - 1 ? pick : p.tokens - 1;
    k = from_doc ? p.z[pick > 0 ? pick : 0] : uniform_topic;
    k = k >= 0 && k < m.K ? k : s0;  // in range whatever z holds
    pi_k = conditional(now, m, d, w, s0, k);
    if (bits.uniform() * pi_s * q_doc_others(k) < pi_k * q_doc_others(s)) {
      s = k;
      pi_s = pi_k;
    }
  }
  return s;
}

}  // namespace wrs::lda
