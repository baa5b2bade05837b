// Loads a TorchScript sampler that pytest exported (an alias-table one from
// tests/test_alias_integration.py, a radix-forest one from
// tests/test_radix_forest_integration.py: forward(weights, num_samples), with buffers
// `weights` and `expected`), runs it through the torch_wrs library built by CMake, and
// checks it reproduces the samples Python drew with the same seed, bit for bit.
#include <torch/script.h>
#include <torch/torch.h>

#include <iostream>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: test_torchscript <module.pt written by pytest>\n";
    return 2;
  }
  torch::jit::Module module;
  try {
    module = torch::jit::load(argv[1]);
  } catch (const c10::Error& e) {
    std::cerr << "cannot load " << argv[1] << " (run pytest first): " << e.what() << "\n";
    return 1;
  }
  const torch::Tensor weights = module.attr("weights").toTensor();
  const torch::Tensor expected = module.attr("expected").toTensor();

  torch::manual_seed(1234);
  const torch::Tensor samples = module.forward({weights, expected.size(0)}).toTensor();
  int failures = 0;
  auto check = [&](bool ok, const char* what) {
    std::cout << (ok ? "ok   " : "FAIL ") << what << "\n";
    failures += !ok;
  };
  check(samples.dtype() == torch::kInt64 && samples.sizes() == expected.sizes(), "shape and dtype");
  check(torch::equal(samples, expected), "same samples as Python with the same seed");
  const torch::Tensor counts = torch::bincount(samples, {}, weights.size(0)).to(torch::kDouble);
  check((counts.index({weights == 0}) == 0).all().item<bool>(), "zero weights never drawn");
  const torch::Tensor freq = counts / counts.sum();
  const torch::Tensor prob = weights.to(torch::kDouble) / weights.sum();
  check(((freq - prob).abs() < 0.01).all().item<bool>(), "frequencies match the weights");

  torch::manual_seed(99);
  const torch::Tensor other = module.forward({weights, expected.size(0)}).toTensor();
  check(!torch::equal(other, expected), "another seed draws other samples");

  std::cout << (failures == 0 ? 5 : 5 - failures) << " passed, " << failures << " failed\n";
  return failures == 0 ? 0 : 1;
}
