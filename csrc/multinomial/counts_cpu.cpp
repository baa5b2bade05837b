// multinomial_counts on the CPU: rows in parallel, each a chain of binomials (counts.h).
#include "common/parallel.h"
#include "common/philox.h"
#include "multinomial/counts.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <atomic>

namespace wrs::multinomial {
namespace {

at::Tensor multinomial_counts_cpu(const at::Tensor& weights, int64_t total,
                                  std::optional<at::Generator> generator) {
  check_floating(weights, "multinomial_counts", "weights");
  check_has_last_dim(weights, "multinomial_counts", "weights");
  TORCH_CHECK(total >= 0, "multinomial_counts: total_count must be non-negative, got ", total);
  const at::Tensor w = weights.contiguous();
  at::Tensor out = at::empty(weights.sizes(), weights.options().dtype(at::kLong));
  const int64_t m = w.size(-1), rows = w.numel() / m;
  const PhiloxStreams streams{cpu_philox_seed(generator)};
  std::atomic<uint32_t> flags{0};
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, w.scalar_type(), "multinomial_counts_cpu", [&] {
    const scalar_t* wp = w.const_data_ptr<scalar_t>();
    int64_t* op = out.mutable_data_ptr<int64_t>();
    wrs::parallel_for(0, rows, std::max<int64_t>(1, 4096 / m), [&](int64_t begin, int64_t end) {
      uint32_t f = 0;
      for (int64_t r = begin; r < end; ++r) f |= count_row(wp + r * m, m, total, r, streams, op + r * m);
      flags.fetch_or(f);
    });
  });
  raise_count_flags(flags.load());
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(wrs, CPU, m) { m.impl("multinomial_counts", &multinomial_counts_cpu); }

}  // namespace wrs::multinomial
