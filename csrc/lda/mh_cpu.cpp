// _lda_mh on the CPU (lda/mh.h states the chain): tokens in fixed tasks of 4,096, so the
// draws do not depend on the thread count.
#include "common/parallel.h"
#include "common/philox.h"
#include "lda/mh_ops.h"

#include <ATen/ATen.h>
#include <torch/library.h>

namespace wrs::lda {
namespace {

struct CpuBlock {  // Philox block b of subsequence `token`
  PhiloxSeed seed;
  uint64_t token;
  void operator()(uint64_t b, uint32_t* words) const {
    at::philox_engine engine(seed.seed, token, seed.offset / 4 + b);
    for (int k = 0; k < 4; ++k) words[k] = engine();
  }
};

at::Tensor lda_mh_cpu(const at::Tensor& d, const at::Tensor& w, const at::Tensor& s0, const at::Tensor& n_dk,
                      const at::Tensor& n_wk, const at::Tensor& n_k, const at::Tensor& start_n_dk,
                      const at::Tensor& start_n_wk, const at::Tensor& start_n_k, const at::Tensor& q_word,
                      const at::Tensor& word_table, const at::Tensor& z, const at::Tensor& doc_start,
                      const at::Tensor& doc_length, int64_t phase, int64_t phases, int64_t cycles, double alpha,
                      double beta, std::optional<at::Generator> generator) {
  const MhArgs args = mh_args(d, w, s0, n_dk, n_wk, n_k, start_n_dk, start_n_wk, start_n_k, q_word, word_table, z,
                              doc_start, doc_length, phase, phases, cycles, alpha, beta);
  const MhView& a = args.view;
  at::Tensor out = at::empty({a.n}, d.options());
  if (a.n == 0) return out;
  const PhiloxSeed seed = cpu_philox_seed(generator);
  int64_t* o = out.mutable_data_ptr<int64_t>();
  wrs::parallel_for(0, a.n, 4096, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      int64_t doc, word, topic;
      token_of(a, i, doc, word, topic);
      TokenBits<CpuBlock> bits{CpuBlock{seed, static_cast<uint64_t>(i)}};
      o[i] = mh_token(a.now, a.proposals, a.model, i, doc, word, topic, bits);
    }
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(wrs, CPU, m) { m.impl("_lda_mh", &lda_mh_cpu); }

}  // namespace wrs::lda
