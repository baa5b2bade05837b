// A small torch binding of FlashInfer's header-only sampling kernels, for the `llm` benchmark
// and tests/test_flashinfer_against_flashinfer.py only (torch_wrs/benchmark_llm.py builds it
// with torch.utils.cpp_extension.load against FlashInfer's headers, not part of this repository).
#include <flashinfer/sampling.cuh>

#include <ATen/cuda/CUDAContext.h>
#include <torch/extension.h>

namespace {

namespace fs = flashinfer::sampling;

cudaStream_t stream() { return at::cuda::getCurrentCUDAStream(); }

void check(cudaError_t e) { TORCH_CHECK(e == cudaSuccess, "flashinfer: ", cudaGetErrorString(e)); }

struct Out {
  at::Tensor tokens, valid;
  explicit Out(const at::Tensor& x)
      : tokens(at::empty({x.size(0)}, x.options().dtype(at::kInt))),
        valid(at::empty({x.size(0)}, x.options().dtype(at::kBool))) {}
};

at::Tensor from_probs(at::Tensor p, int64_t seed, int64_t offset) {
  Out o(p);
  check(fs::SamplingFromProb<float, int>(p.data_ptr<float>(), o.tokens.data_ptr<int>(), o.valid.data_ptr<bool>(),
                                         nullptr, p.size(0), p.size(1), false, nullptr, seed, nullptr, offset,
                                         stream()));
  return o.tokens;
}

at::Tensor from_logits(at::Tensor x, int64_t seed, int64_t offset) {
  Out o(x);
  check(fs::SamplingFromLogits<float, int>(x.data_ptr<float>(), o.tokens.data_ptr<int>(), nullptr, x.size(0),
                                           x.size(1), false, nullptr, seed, nullptr, offset, stream()));
  return o.tokens;
}

at::Tensor top_k(at::Tensor p, int64_t k, int64_t seed, int64_t offset) {
  Out o(p);
  check(fs::TopKSamplingFromProb<float, int>(p.data_ptr<float>(), o.tokens.data_ptr<int>(), o.valid.data_ptr<bool>(),
                                             nullptr, nullptr, p.size(0), k, p.size(1), false, nullptr, seed, nullptr,
                                             offset, stream()));
  return o.tokens;
}

at::Tensor top_p(at::Tensor p, double top_p, int64_t seed, int64_t offset) {
  Out o(p);
  check(fs::TopPSamplingFromProb<float, int>(p.data_ptr<float>(), o.tokens.data_ptr<int>(), o.valid.data_ptr<bool>(),
                                             nullptr, nullptr, p.size(0), static_cast<float>(top_p), p.size(1), false,
                                             nullptr, seed, nullptr, offset, stream()));
  return o.tokens;
}

at::Tensor min_p(at::Tensor p, double min_p, int64_t seed, int64_t offset) {
  Out o(p);
  check(fs::MinPSamplingFromProb<float, int>(p.data_ptr<float>(), nullptr, o.tokens.data_ptr<int>(),
                                             o.valid.data_ptr<bool>(), nullptr, p.size(0), static_cast<float>(min_p),
                                             p.size(1), false, nullptr, seed, nullptr, offset, stream()));
  return o.tokens;
}

// Per-row arrays when given (int32 top_k [B], float top_p [B]), else the scalars.
at::Tensor top_k_top_p(at::Tensor p, int64_t k, double top_p, std::optional<at::Tensor> k_arr,
                       std::optional<at::Tensor> p_arr, int64_t seed, int64_t offset) {
  Out o(p);
  check(fs::TopKTopPSamplingFromProb<float, int>(
      p.data_ptr<float>(), k_arr ? k_arr->data_ptr<int>() : nullptr, p_arr ? p_arr->data_ptr<float>() : nullptr,
      o.tokens.data_ptr<int>(), o.valid.data_ptr<bool>(), nullptr, p.size(0), static_cast<int>(k),
      static_cast<float>(top_p), p.size(1), false, nullptr, seed, nullptr, offset, stream()));
  return o.tokens;
}

at::Tensor top_p_renorm(at::Tensor p, double top_p) {
  at::Tensor out = at::empty_like(p);
  check(fs::TopPRenormProb<float>(p.data_ptr<float>(), out.data_ptr<float>(), nullptr, p.size(0),
                                  static_cast<float>(top_p), p.size(1), stream()));
  return out;
}

std::vector<at::Tensor> chain_speculative(at::Tensor draft, at::Tensor draft_ids, at::Tensor target, int64_t seed,
                                          int64_t offset) {
  const int64_t b = draft.size(0), s = draft.size(1), v = draft.size(2);
  at::Tensor out = at::empty({b, s + 1}, draft.options().dtype(at::kInt));
  at::Tensor accepted = at::zeros({b}, draft.options().dtype(at::kInt));
  at::Tensor emitted = at::zeros({b}, draft.options().dtype(at::kInt));
  check(fs::ChainSpeculativeSampling<float, int>(draft.data_ptr<float>(), draft_ids.data_ptr<int>(),
                                                 target.data_ptr<float>(), out.data_ptr<int>(), accepted.data_ptr<int>(),
                                                 emitted.data_ptr<int>(), b, s, v, false, nullptr, seed, nullptr,
                                                 offset, stream()));
  return {out, accepted, emitted};
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("from_probs", &from_probs);
  m.def("from_logits", &from_logits);
  m.def("top_k", &top_k);
  m.def("top_p", &top_p);
  m.def("min_p", &min_p);
  m.def("top_k_top_p", &top_k_top_p);
  m.def("top_p_renorm", &top_p_renorm);
  m.def("chain_speculative", &chain_speculative);
}
