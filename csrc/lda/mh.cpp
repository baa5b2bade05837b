// _lda_mh: the checks both devices share (lda/mh.h states the chain).
#include "lda/mh_ops.h"

#include <ATen/ATen.h>

namespace wrs::lda {

MhArgs mh_args(const at::Tensor& d, const at::Tensor& w, const at::Tensor& s0, const at::Tensor& n_dk,
               const at::Tensor& n_wk, const at::Tensor& n_k, const at::Tensor& start_n_dk,
               const at::Tensor& start_n_wk, const at::Tensor& start_n_k, const at::Tensor& q_word,
               const at::Tensor& word_table, const at::Tensor& z, const at::Tensor& doc_start,
               const at::Tensor& doc_length, int64_t phase, int64_t phases, int64_t cycles, double alpha,
               double beta) {
  constexpr const char* op = "_lda_mh";
  auto check = [&](const at::Tensor& t, const char* name, at::ScalarType type, int64_t dim) {
    TORCH_CHECK(t.scalar_type() == type && t.dim() == dim, op, ": ", name, " must be a ", dim, "-D ", type,
                " tensor, got ", t.sizes(), " ", t.scalar_type());
    TORCH_CHECK(t.device() == d.device(), op, ": ", name, " is on ", t.device(), ", d on ", d.device());
  };
  check(d, "d", at::kLong, 1);
  check(w, "w", at::kLong, 1);
  check(s0, "s0", at::kLong, 1);
  TORCH_CHECK(w.numel() == d.numel() && s0.numel() == d.numel(), op, ": d, w and s0 must have one length, got ",
              d.numel(), ", ", w.numel(), " and ", s0.numel());
  check(n_dk, "n_dk", at::kInt, 2);
  check(n_wk, "n_wk", at::kInt, 2);
  check(n_k, "n_k", at::kLong, 1);
  const int64_t D = n_dk.size(0), V = n_wk.size(0), K = n_wk.size(1);
  TORCH_CHECK(K >= 1 && D >= 1 && V >= 1 && n_dk.size(1) == K && n_k.numel() == K, op,
              ": n_dk [D, K], n_wk [V, K] and n_k [K] must agree, got ", n_dk.sizes(), ", ", n_wk.sizes(), " and ",
              n_k.sizes());
  check(start_n_dk, "start_n_dk", at::kInt, 2);
  check(start_n_wk, "start_n_wk", at::kInt, 2);
  check(start_n_k, "start_n_k", at::kLong, 1);
  TORCH_CHECK(start_n_dk.sizes() == n_dk.sizes() && start_n_wk.sizes() == n_wk.sizes() &&
                  start_n_k.sizes() == n_k.sizes(),
              op, ": the start counts must have the shapes of the counts");
  check(q_word, "q_word", at::kFloat, 2);
  check(word_table, "word_table", at::kLong, 2);
  TORCH_CHECK(q_word.sizes() == n_wk.sizes() && word_table.sizes() == n_wk.sizes(), op,
              ": q_word and word_table must be [V, K], got ", q_word.sizes(), " and ", word_table.sizes());
  check(z, "z", at::kLong, 1);
  TORCH_CHECK(z.numel() >= 1, op, ": z must not be empty");
  check(doc_start, "doc_start", at::kLong, 1);
  check(doc_length, "doc_length", at::kLong, 1);
  TORCH_CHECK(doc_start.numel() == D && doc_length.numel() == D, op, ": doc_start and doc_length must be [D]");
  TORCH_CHECK(phases >= 1 && phase >= 0 && phase < phases, op, ": phase must be in [0, phases), got ", phase,
              " of ", phases);
  TORCH_CHECK(cycles >= 0 && cycles <= (int64_t{1} << 20), op, ": cycles must be in [0, 2^20], got ", cycles);
  TORCH_CHECK(alpha > 0 && beta > 0, op, ": alpha and beta must be positive, got ", alpha, " and ", beta);
  MhArgs args;
  MhView& a = args.view;
  auto ptr = [&](const at::Tensor& t) {
    args.keep.push_back(t.contiguous());
    return args.keep.back().const_data_ptr();
  };
  a.d = static_cast<const int64_t*>(ptr(d));
  a.w = static_cast<const int64_t*>(ptr(w));
  a.s0 = static_cast<const int64_t*>(ptr(s0));
  a.now = Counts{static_cast<const int32_t*>(ptr(n_dk)), static_cast<const int32_t*>(ptr(n_wk)),
                 static_cast<const int64_t*>(ptr(n_k))};
  a.proposals = Proposals{Counts{static_cast<const int32_t*>(ptr(start_n_dk)),
                                 static_cast<const int32_t*>(ptr(start_n_wk)),
                                 static_cast<const int64_t*>(ptr(start_n_k))},
                          static_cast<const float*>(ptr(q_word)),
                          static_cast<const int64_t*>(ptr(word_table)),
                          static_cast<const int64_t*>(ptr(z)),
                          static_cast<const int64_t*>(ptr(doc_start)),
                          static_cast<const int64_t*>(ptr(doc_length)),
                          z.numel()};
  a.model = Model{K, V, static_cast<float>(alpha), static_cast<float>(beta), phase, phases, static_cast<int>(cycles)};
  a.D = D;
  a.n = d.numel();
  return args;
}

}  // namespace wrs::lda
