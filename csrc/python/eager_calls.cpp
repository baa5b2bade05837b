// torch_wrs._C as a Python module: direct bindings of the drop-ins, of the LLM samplers and
// of the replay sampler for eager calls.
//
// A call through torch.ops parses its arguments against the schema, boxed: about 0.6 us
// per call on the CI machine's CPU, which is most of a small call (torch.multinomial of 4
// items takes 1.2 us in all). These bindings take the arguments typed (pybind11) and call
// the same operator through the dispatcher, unboxed, so autograd, tracing, fake tensors and
// every device's kernel are the operator's own. Python's __torch_function__ overrides and
// torch.compile's tracing are not seen here: torch_wrs/_library.py sends those calls
// through torch.ops. The setup.py build only (the CMake library has no Python).
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/utils/pybind.h>

#include <optional>

namespace {

namespace py = pybind11;

using MultinomialFn = at::Tensor(const at::Tensor&, int64_t, bool, std::optional<at::Generator>);
using SampleLogitsFn = at::Tensor(const at::Tensor&, int64_t, double, bool, std::optional<at::Generator>);
using StandardGammaFn = at::Tensor(const at::Tensor&, c10::string_view, bool, bool, std::optional<at::Generator>);
using DirichletFn = at::Tensor(const at::Tensor&, bool, std::optional<at::Generator>);
using BetaFn = at::Tensor(const at::Tensor&, const at::Tensor&, bool, std::optional<at::Generator>);
using OptTensor = std::optional<at::Tensor>;
using SampleLlmFn = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, int64_t, bool, const OptTensor&, double,
                                                       const OptTensor&, int64_t, const OptTensor&, double,
                                                       const OptTensor&, double, const OptTensor&, int64_t,
                                                       std::optional<at::Generator>, const OptTensor&);
using SpeculativeFn = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                                         std::optional<at::Generator>);

at::Tensor multinomial(const at::Tensor& input, int64_t num_samples, bool replacement,
                       std::optional<at::Generator> generator) {
  static const auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("wrs::multinomial", "").typed<MultinomialFn>();
  const py::gil_scoped_release no_gil;  // as torch's own bindings: other Python threads run meanwhile
  return op.call(input, num_samples, replacement, std::move(generator));
}

at::Tensor sample_logits(const at::Tensor& logits, int64_t num_samples, double temperature, bool replacement,
                         std::optional<at::Generator> generator) {
  static const auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("wrs::sample_logits", "").typed<SampleLogitsFn>();
  const py::gil_scoped_release no_gil;
  return op.call(logits, num_samples, temperature, replacement, std::move(generator));
}

at::Tensor standard_gamma(const at::Tensor& alpha, const std::string& method, bool log, bool validate,
                          std::optional<at::Generator> generator) {
  static const auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("wrs::standard_gamma", "").typed<StandardGammaFn>();
  const py::gil_scoped_release no_gil;
  return op.call(alpha, method, log, validate, std::move(generator));
}

at::Tensor dirichlet(const at::Tensor& concentration, bool validate, std::optional<at::Generator> generator) {
  static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("wrs::dirichlet", "").typed<DirichletFn>();
  const py::gil_scoped_release no_gil;
  return op.call(concentration, validate, std::move(generator));
}

at::Tensor beta(const at::Tensor& a, const at::Tensor& b, bool validate, std::optional<at::Generator> generator) {
  static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("wrs::beta", "").typed<BetaFn>();
  const py::gil_scoped_release no_gil;
  return op.call(a, b, validate, std::move(generator));
}

std::tuple<at::Tensor, at::Tensor> sample_llm(const at::Tensor& input, int64_t num_samples, bool logits,
                                              const OptTensor& temperature, double temperature_value,
                                              const OptTensor& top_k, int64_t top_k_value, const OptTensor& top_p,
                                              double top_p_value, const OptTensor& min_p, double min_p_value,
                                              const OptTensor& seeds, int64_t logprobs,
                                              std::optional<at::Generator> generator, const OptTensor& overrides) {
  static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("wrs::sample_llm", "").typed<SampleLlmFn>();
  const py::gil_scoped_release no_gil;
  return op.call(input, num_samples, logits, temperature, temperature_value, top_k, top_k_value, top_p, top_p_value,
                 min_p, min_p_value, seeds, logprobs, std::move(generator), overrides);
}

std::tuple<at::Tensor, at::Tensor> speculative_accept(const at::Tensor& draft_probs, const at::Tensor& draft_tokens,
                                                      const at::Tensor& target_probs,
                                                      std::optional<at::Generator> generator) {
  static const auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("wrs::speculative_accept", "").typed<SpeculativeFn>();
  const py::gil_scoped_release no_gil;
  return op.call(draft_probs, draft_tokens, target_probs, std::move(generator));
}

using PriorityUpdateFn = void(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                              const OptTensor&, int64_t, double, double, bool);
using PrioritySampleFn = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&, int64_t, int64_t,
                                                            bool, bool, std::optional<at::Generator>);
using PriorityWeightsFn = at::Tensor(const at::Tensor&, const at::Tensor&, int64_t, const at::Tensor&, double, double,
                                     double);

void priority_update(const at::Tensor& leaves, const at::Tensor& nodes, const at::Tensor& marks,
                     const at::Tensor& index, const OptTensor& priority, int64_t capacity, double alpha, double eps,
                     bool validate) {
  static const auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("wrs::priority_update", "").typed<PriorityUpdateFn>();
  const py::gil_scoped_release no_gil;
  op.call(leaves, nodes, marks, index, priority, capacity, alpha, eps, validate);
}

std::tuple<at::Tensor, at::Tensor> priority_sample(const at::Tensor& leaves, const at::Tensor& nodes, int64_t capacity,
                                                   int64_t n, bool stratified, bool validate,
                                                   std::optional<at::Generator> generator) {
  static const auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("wrs::priority_sample", "").typed<PrioritySampleFn>();
  const py::gil_scoped_release no_gil;
  return op.call(leaves, nodes, capacity, n, stratified, validate, std::move(generator));
}

at::Tensor priority_weights(const at::Tensor& leaves, const at::Tensor& nodes, int64_t capacity,
                            const at::Tensor& prob, double alpha, double eps, double beta) {
  static const auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("wrs::priority_weights", "").typed<PriorityWeightsFn>();
  const py::gil_scoped_release no_gil;
  return op.call(leaves, nodes, capacity, prob, alpha, eps, beta);
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "torch_wrs: the compiled operators (torch.ops.wrs) and direct bindings for eager calls";
  // Positional only: the Python wrappers in torch_wrs/ own the signatures and defaults.
  m.def("multinomial", &multinomial);
  m.def("sample_logits", &sample_logits);
  m.def("standard_gamma", &standard_gamma);
  m.def("dirichlet", &dirichlet);
  m.def("beta", &beta);
  m.def("sample_llm", &sample_llm);
  m.def("speculative_accept", &speculative_accept);
  m.def("priority_update", &priority_update);
  m.def("priority_sample", &priority_sample);
  m.def("priority_weights", &priority_weights);
}
