// The one place where every torch.ops.wrs schema is defined. Kernels register
// themselves per device next to their code (csrc/<family>/*_cpu.cpp, *_cuda.cu).
#include <torch/library.h>

TORCH_LIBRARY(wrs, m) {
  // Alias tables: weights [..., N] -> int64 table [..., N] (threshold | alias << 32).
  // validate=True checks the weight values; on CUDA that costs one host sync, so pass
  // validate=False inside CUDA graphs or wherever a sync is unwelcome.
  m.def("alias_table(Tensor weights, *, bool validate=True) -> Tensor");
  // Samples: [..., num_samples] indices, int64 (default) or int32 (half the write traffic).
  m.def("alias_sample(Tensor table, SymInt num_samples, *, ScalarType? dtype=None, "
        "Generator? generator=None) -> Tensor",
        {at::Tag::nondeterministic_seeded});

  // torch.multinomial's contract (1-D or 2-D input, int64 [..., num_samples]) without its
  // 2^24-category limit; float64 sums.
  m.def("multinomial(Tensor input, SymInt num_samples, bool replacement=False, *, "
        "Generator? generator=None) -> Tensor",
        {at::Tag::nondeterministic_seeded});
}
