// Radix forests on the CPU: the build in passes over fixed-size chunks with
// wrs::parallel_for (float64 row sums, exact integer prefix sums, then Algorithm 1 over all
// items with an atomic exchange per merge), and the lookups. Results do not depend on the
// thread count: every value is an exact integer function of the weights.
#include "common/parallel.h"
#include "radix_forest/radix_forest_ops.h"
#include "common/quantize.h"  // the shared weight quantization
#include "common/philox.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <vector>

namespace wrs::radix {
namespace {

constexpr int64_t kChunk = int64_t(1) << 16;  // items per task of the prefix passes
constexpr int64_t kGrain = int64_t(1) << 12;  // items per task of the per-item passes

template <typename scalar_t>
void build_cpu(const scalar_t* w, int64_t rows, int64_t n, int bits, bool validate, int64_t* cdf, int32_t* guide,
               int64_t* nodes) {
  const int64_t per_row = (n + kChunk - 1) / kChunk;
  const int64_t chunks = rows * per_row;
  auto chunk_begin = [&](int64_t c) { return (c / per_row) * n + (c % per_row) * kChunk; };
  auto chunk_end = [&](int64_t c) { return std::min(chunk_begin(c) + kChunk, (c / per_row + 1) * n); };

  // 1. Row sums in float64 (fixed order) and the value checks.
  std::vector<double> chunk_sum(chunks);
  std::vector<uint32_t> chunk_flags(chunks);
  wrs::parallel_for(0, chunks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      double s = 0;
      uint32_t f = 0;
      for (int64_t k = chunk_begin(c); k < chunk_end(c); ++k) {
        const double x = static_cast<double>(w[k]);
        s += x;
        f |= weight_flags(x);
      }
      chunk_sum[c] = s;
      chunk_flags[c] = f;
    }
  });
  std::vector<wrs::RowScale> scale(rows);
  uint32_t flags = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double s = 0;
    uint32_t f = 0;
    for (int64_t c = r * per_row; c < (r + 1) * per_row; ++c) s += chunk_sum[c], f |= chunk_flags[c];
    flags |= row_flags(s, f);
    scale[r] = wrs::row_scale(s, kQuantizeN);
  }
  if (validate) raise_weight_flags(flags, "radix_forest", "weights");
  auto quantized = [&](int64_t k) { return wrs::quantize(static_cast<double>(w[k]), scale[k / n], kQuantizeN); };

  // 2. Exact integer prefix sums: chunk totals, then chunk offsets per row.
  std::vector<uint64_t> offset(chunks), total(rows);
  wrs::parallel_for(0, chunks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      uint64_t s = 0;
      for (int64_t k = chunk_begin(c); k < chunk_end(c); ++k) s += quantized(k);
      offset[c] = s;
    }
  });
  for (int64_t r = 0; r < rows; ++r) {
    uint64_t s = 0;
    for (int64_t c = r * per_row; c < (r + 1) * per_row; ++c) std::swap(s, offset[c]), s += offset[c];
    total[r] = s;
  }
  wrs::parallel_for(0, chunks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t r = c / per_row;
      const double sc = cdf_scale(total[r]);
      uint64_t prefix = offset[c];
      for (int64_t k = chunk_begin(c); k < chunk_end(c); ++k) {
        cdf[k] = cdf_value(prefix, total[r], sc);
        prefix += quantized(k);
      }
    }
  });

  // 3. Algorithm 1 over every item of every row at once.
  const int shift = kFractionBits - bits;
  std::vector<uint64_t> waiting(rows * n);
  wrs::parallel_for(0, rows * n, kGrain, [&](int64_t k0, int64_t k1) {
    std::fill(waiting.begin() + k0, waiting.begin() + k1, kNoSibling);
  });
  auto exchange = [](uint64_t* p, uint64_t v) { return __atomic_exchange_n(p, v, __ATOMIC_ACQ_REL); };
  wrs::parallel_for(0, rows * n, kGrain, [&](int64_t k0, int64_t k1) {
    for (int64_t k = k0; k < k1; ++k) {
      const int64_t r = k / n;
      const int64_t* row_cdf = cdf + r * n;
      merge_up(k - r * n, n, [&](int64_t a) { return gap_code(row_cdf[a], row_cdf[a + 1], a, shift); }, row_cdf,
               nodes + 2 * r * n, waiting.data() + r * n, exchange);
    }
  });

  // 4. Guide: a cell with keys points at its first item's node; the cells after it up to
  // the next key lie inside its interval. (Sequential within an item: the CUDA build
  // uses a scan instead, balanced however many cells one interval spans.)
  const int64_t m = int64_t(1) << bits;
  wrs::parallel_for(0, rows * n, kGrain, [&](int64_t k0, int64_t k1) {
    for (int64_t k = k0; k < k1; ++k) {
      const int64_t r = k / n, i = k - r * n;
      const int64_t cell = cdf[k] >> shift;
      const int64_t next = i + 1 < n ? cdf[k + 1] >> shift : m;
      int32_t* g = guide + r * m;
      if (i == 0 || (cdf[k - 1] >> shift) != cell) g[cell] = static_cast<int32_t>(i);
      for (int64_t c = cell + 1; c < next; ++c) g[c] = ~static_cast<int32_t>(i);
    }
  });
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> radix_forest_cpu(const at::Tensor& weights,
                                                                std::optional<int64_t> cells, bool validate) {
  check_weights(weights);
  const int bits = cell_bits(weights.size(-1), cells);
  const at::Tensor w = weights.contiguous();
  at::Tensor cdf = at::empty(w.sizes(), w.options().dtype(at::kLong));
  at::Tensor guide = at::empty(guide_shape(w, bits), w.options().dtype(at::kInt));
  at::Tensor nodes = at::empty(nodes_shape(w), w.options().dtype(at::kLong));
  const int64_t n = w.size(-1);
  const int64_t rows = w.numel() / n;
  if (rows == 0) return {cdf, guide, nodes};
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, w.scalar_type(), "radix_forest_cpu", [&] {
    build_cpu(w.const_data_ptr<scalar_t>(), rows, n, bits, validate, cdf.mutable_data_ptr<int64_t>(),
              guide.mutable_data_ptr<int32_t>(), nodes.mutable_data_ptr<int64_t>());
  });
  return {cdf, guide, nodes};
}

// Calls lookup(k, key) for k in [0, count) in parallel and stores the indices.
template <typename KeyOf>
void lookup_all(const at::Tensor& cdf, const at::Tensor& guide, const at::Tensor& nodes, int64_t count,
                const KeyOf& key_and_row, int64_t* out) {
  const ForestShape f = forest_shape(cdf, guide);
  const int32_t* g = guide.const_data_ptr<int32_t>();
  const int64_t* nd = nodes.const_data_ptr<int64_t>();
  const int shift = kFractionBits - f.cell_bits;
  const int64_t m = int64_t(1) << f.cell_bits;
  wrs::parallel_for(0, count, kGrain, [&](int64_t k0, int64_t k1) {
    for (int64_t k = k0; k < k1; ++k) {
      int64_t row = 0;
      const int64_t x[1] = {key_and_row(k, row)};
      const int32_t* const gp[1] = {g + row * m};
      const int64_t* const np[1] = {nd + 2 * row * f.n};
      int64_t i[1];
      lookup<1>(x, gp, np, f.n, shift, i);
      out[k] = i[0];
    }
  });
}

at::Tensor inverse_cdf_cpu(const at::Tensor& cdf_in, const at::Tensor& guide_in, const at::Tensor& nodes_in,
                           const at::Tensor& u_in, const std::optional<at::Tensor>& row_in, bool validate) {
  check_forest(cdf_in, guide_in, nodes_in, "inverse_cdf");
  check_lookup(cdf_in, u_in, row_in, validate);
  const at::Tensor cdf = cdf_in.contiguous(), guide = guide_in.contiguous(), nodes = nodes_in.contiguous();
  const at::Tensor u = u_in.contiguous();
  at::Tensor out = at::empty(u.sizes(), u.options().dtype(at::kLong));
  if (u.numel() == 0) return out;
  const int64_t rows = cdf.numel() / cdf.size(-1);
  const at::Tensor row = row_in.has_value() ? row_in->contiguous().to(at::kLong) : at::Tensor();
  const int64_t* rp = row.defined() ? row.const_data_ptr<int64_t>() : nullptr;
  const int64_t per_row = cdf.dim() > 1 && !rp ? u.size(-1) : u.numel();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, u.scalar_type(), "inverse_cdf_cpu", [&] {
    const scalar_t* up = u.const_data_ptr<scalar_t>();
    lookup_all(cdf, guide, nodes, u.numel(), [&](int64_t k, int64_t& r) {
      r = rp ? std::min(std::max<int64_t>(rp[k], 0), rows - 1) : k / per_row;
      return key_of(static_cast<double>(up[k]));
    }, out.mutable_data_ptr<int64_t>());
  });
  return out;
}

at::Tensor radix_forest_sample_cpu(const at::Tensor& cdf_in, const at::Tensor& guide_in, const at::Tensor& nodes_in,
                                   int64_t num_samples, std::optional<at::Generator> generator) {
  check_forest(cdf_in, guide_in, nodes_in, "radix_forest_sample");
  check_num_samples(num_samples);
  const at::Tensor cdf = cdf_in.contiguous(), guide = guide_in.contiguous(), nodes = nodes_in.contiguous();
  at::Tensor out = at::empty(sample_shape(cdf, num_samples), cdf.options());
  if (out.numel() == 0) return out;
  const PhiloxSeed seed = cpu_philox_seed(generator);
  // Sample e uses half of Philox block e / 2 (as the alias sampler does).
  lookup_all(cdf, guide, nodes, out.numel(), [&](int64_t e, int64_t& r) {
    r = e / num_samples;
    const auto b = philox_block(seed, static_cast<uint64_t>(e / 2));
    return e % 2 == 0 ? key_of_bits(b[0], b[1]) : key_of_bits(b[2], b[3]);
  }, out.mutable_data_ptr<int64_t>());
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(wrs, CPU, m) {
  m.impl("radix_forest", &radix_forest_cpu);
  m.impl("inverse_cdf", &inverse_cdf_cpu);
  m.impl("radix_forest_sample", &radix_forest_sample_cpu);
}

}  // namespace wrs::radix
