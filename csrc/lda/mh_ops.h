#pragma once
// _lda_mh: the argument checks and views both devices share (mh.cpp).
#include "lda/mh.h"

#include <ATen/core/Tensor.h>

#include <vector>

namespace wrs::lda {

// What a kernel reads (plain pointers, passed by value).
struct MhView {
  Counts now;
  Proposals proposals;
  Model model;
  const int64_t *d, *w, *s0;
  int64_t D, n;  // documents, tokens of the phase
};

struct MhArgs {
  std::vector<at::Tensor> keep;  // the contiguous tensors the view points into
  MhView view;
};

MhArgs mh_args(const at::Tensor& d, const at::Tensor& w, const at::Tensor& s0, const at::Tensor& n_dk,
               const at::Tensor& n_wk, const at::Tensor& n_k, const at::Tensor& start_n_dk,
               const at::Tensor& start_n_wk, const at::Tensor& start_n_k, const at::Tensor& q_word,
               const at::Tensor& word_table, const at::Tensor& z, const at::Tensor& doc_start,
               const at::Tensor& doc_length, int64_t phase, int64_t phases, int64_t cycles, double alpha,
               double beta);

// Token i's document, word and topic, clamped into the tables (in range whatever they hold).
C10_HOST_DEVICE inline void token_of(const MhView& a, int64_t i, int64_t& d, int64_t& w, int64_t& s0) {
  auto clamp = [](int64_t x, int64_t n) { return x < 0 ? 0 : x < n ? x : n - 1; };
  d = clamp(a.d[i], a.D);
  w = clamp(a.w[i], a.model.V);
  s0 = clamp(a.s0[i], a.model.K);
}

}  // namespace wrs::lda
