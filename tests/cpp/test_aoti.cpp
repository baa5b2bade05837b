// Loads the AOTInductor package that pytest compiled (tests/test_export_aoti.py: a model
// calling torch.ops.wrs.multinomial, standard_gamma, dirichlet and sample_llm), runs it
// through the torch_wrs library built by CMake, without Python, and checks it reproduces
// the draws Python made with the same seed, and draws afresh on each call.
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/serialize.h>
#include <torch/torch.h>
#if __has_include(<torch/headeronly/version.h>)
#include <torch/headeronly/version.h>
#else
#include <torch/version.h>
#endif

#include <fstream>
#include <iostream>
#include <iterator>
#include <string>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: test_aoti <sampler_cpu.pt2> <sampler_cpu_expected.pt> (written by pytest)\n";
    return 2;
  }
  if (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR < 13) {
    // As tests/test_export_aoti.py: aoti_load_package crashes on torch < 2.13, whose
    // pytest run exports no package. 77 is ctest's skip (SKIP_RETURN_CODE).
    std::cout << "skipped: AOTInductor packages load from torch 2.13 on\n";
    return 77;
  }
  std::ifstream file(argv[2], std::ios::binary);
  if (!file) {
    std::cerr << "cannot read " << argv[2] << " (run pytest first)\n";
    return 1;
  }
  const std::vector<char> bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  const c10::Dict<c10::IValue, c10::IValue> saved = torch::pickle_load(bytes).toGenericDict();
  auto get = [&](const char* name) { return saved.at(name).toTensor(); };
  const std::vector<torch::Tensor> inputs = {get("weights"), get("alpha"), get("logits")};
  const std::vector<std::string> names = {"idx", "gamma", "theta", "token", "logprob"};

  torch::inductor::AOTIModelPackageLoader loader(argv[1]);
  int failures = 0, checks = 0;
  auto check = [&](bool ok, const std::string& what) {
    std::cout << (ok ? "ok   " : "FAIL ") << what << "\n";
    failures += !ok;
    ++checks;
  };
  torch::manual_seed(1234);
  const std::vector<torch::Tensor> out = loader.run(inputs);
  check(out.size() == names.size(), "five outputs");
  for (size_t i = 0; i < names.size() && i < out.size(); ++i) {
    check(torch::equal(out[i], get(names[i].c_str())), names[i] + ": the draws Python made with seed 1234");
  }
  const std::vector<torch::Tensor> again = loader.run(inputs);
  check(!torch::equal(again[1], out[1]), "the next call draws afresh");
  std::cout << checks - failures << " passed, " << failures << " failed\n";
  return failures == 0 ? 0 : 1;
}
