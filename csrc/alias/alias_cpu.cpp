// Alias tables on the CPU: parallel PSA (split + pack on the merge path) with
// at::parallel_for, and the baseline sampler. Work is cut into fixed-size chunks, not
// per thread, so the result is the same for any thread count.
#include "alias/alias_ops.h"
#include "common/philox.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <vector>

namespace wrs::alias {
namespace {

constexpr int64_t kChunk = int64_t(1) << 16;    // items per partition chunk
constexpr int64_t kSection = int64_t(1) << 14;  // merge steps per pack task

// Uninitialized scratch of `count` T's (no serial zero-fill, which would not scale).
template <typename T>
struct Scratch {
  at::Tensor storage;
  T* ptr;
  explicit Scratch(int64_t count)
      : storage(at::empty({count * static_cast<int64_t>(sizeof(T))}, at::TensorOptions(at::kByte))),
        ptr(reinterpret_cast<T*>(storage.data_ptr())) {}
  T& operator[](int64_t k) { return ptr[k]; }
};

template <typename scalar_t>
void build_rows(const scalar_t* w, int64_t rows, int64_t n, int64_t* table) {
  const int64_t chunks_per_row = (n + kChunk - 1) / kChunk;
  const int64_t chunks = rows * chunks_per_row;
  auto chunk_range = [&](int64_t c, int64_t& begin, int64_t& end) {
    const int64_t b = c / chunks_per_row;
    begin = b * n + (c % chunks_per_row) * kChunk;
    end = std::min(begin + kChunk, (b + 1) * n);
  };

  // 1. Row sums in float64, in a fixed order, and the value checks.
  std::vector<double> chunk_sum(chunks);
  std::vector<uint32_t> chunk_flags(chunks);
  at::parallel_for(0, chunks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      int64_t begin, end;
      chunk_range(c, begin, end);
      double sum = 0;
      uint32_t flags = 0;
      for (int64_t k = begin; k < end; ++k) {
        const double x = static_cast<double>(w[k]);
        flags |= weight_flags(x);
        sum += x;
      }
      chunk_sum[c] = sum;
      chunk_flags[c] = flags;
    }
  });
  std::vector<RowScale> scale(rows);
  uint32_t flags = 0;
  for (int64_t b = 0; b < rows; ++b) {
    double sum = 0;
    for (int64_t c = b * chunks_per_row; c < (b + 1) * chunks_per_row; ++c) {
      sum += chunk_sum[c];
      flags |= chunk_flags[c];
    }
    if (sum == 0) flags |= kRowZeroSum;
    if (!std::isfinite(sum)) flags |= kRowSumOverflow;
    scale[b] = row_scale(sum, n);
  }
  raise_weight_flags(flags, "alias_table", "weights");  // before anything is written

  // 2. Per-chunk class totals, then an exclusive scan over each row's chunks.
  std::vector<ClassPrefix> chunk_prefix(chunks);
  at::parallel_for(0, chunks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      int64_t begin, end;
      chunk_range(c, begin, end);
      const RowScale rs = scale[c / chunks_per_row];
      ClassPrefix total{0, 0, 0};
      for (int64_t k = begin; k < end; ++k) {
        total = total + class_of(quantize(static_cast<double>(w[k]), rs, n));
      }
      chunk_prefix[c] = total;
    }
  });
  std::vector<int64_t> row_lights(rows);
  std::vector<uint64_t> row_deficit(rows);
  for (int64_t b = 0; b < rows; ++b) {
    ClassPrefix running{0, 0, 0};
    for (int64_t c = b * chunks_per_row; c < (b + 1) * chunks_per_row; ++c) {
      const ClassPrefix here = chunk_prefix[c];
      chunk_prefix[c] = running;
      running = running + here;
    }
    row_lights[b] = running.lights;
    row_deficit[b] = running.deficit;
  }

  // 3. Stable partition into light and heavy arrays carrying their keys.
  Scratch<LightItem> light(rows * n);
  Scratch<uint64_t> deficit_before(rows * n);
  Scratch<uint32_t> heavy(rows * n);
  Scratch<uint64_t> excess_through(rows * n);
  at::parallel_for(0, chunks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      int64_t begin, end;
      chunk_range(c, begin, end);
      const int64_t b = c / chunks_per_row;
      const RowScale rs = scale[b];
      ClassPrefix p = chunk_prefix[c];
      for (int64_t k = begin; k < end; ++k) {
        const uint64_t q = quantize(static_cast<double>(w[k]), rs, n);
        const ClassPrefix cls = class_of(q);
        const uint32_t index = static_cast<uint32_t>(k - b * n);
        if (cls.lights) {
          light[b * n + p.lights] = LightItem{index, static_cast<uint32_t>(q)};
          deficit_before[b * n + p.lights] = p.deficit;
        } else {
          const int64_t h = (k - b * n) - p.lights;
          heavy[b * n + h] = index;
          excess_through[b * n + h] = p.excess + cls.excess;
        }
        p = p + cls;
      }
    }
  });

  // 4. Split and pack: each task finds its start on the merge path and packs.
  const int64_t sections_per_row = (n + kSection - 1) / kSection;
  at::parallel_for(0, rows * sections_per_row, 1, [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s) {
      const int64_t b = s / sections_per_row;
      const int64_t begin = (s % sections_per_row) * kSection;
      const MergeSlice row = whole_row(light.ptr + b * n, deficit_before.ptr + b * n, heavy.ptr + b * n,
                                       excess_through.ptr + b * n, row_lights[b], n - row_lights[b],
                                       row_deficit[b]);
      pack_merge_steps(row, begin, std::min(begin + kSection, n), table + b * n);
    }
  });
}

at::Tensor alias_table_cpu(const at::Tensor& weights, bool validate) {
  (void)validate;  // value checks cost nothing extra on the CPU: always on
  check_weights(weights);
  const at::Tensor w = weights.contiguous();
  at::Tensor table = at::empty(w.sizes(), w.options().dtype(at::kLong));
  const int64_t n = w.size(-1);
  const int64_t rows = w.numel() / n;
  if (rows == 0) return table;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, w.scalar_type(), "alias_table_cpu", [&] {
    build_rows(w.const_data_ptr<scalar_t>(), rows, n, table.mutable_data_ptr<int64_t>());
  });
  return table;
}

at::Tensor alias_sample_cpu(const at::Tensor& table_in, int64_t num_samples,
                            std::optional<at::Generator> generator) {
  check_table(table_in);
  check_num_samples(num_samples);
  const at::Tensor table = table_in.contiguous();
  at::Tensor out = at::empty(sample_shape(table, num_samples), table.options());
  const int64_t total = out.numel();
  if (total == 0) return out;
  const PhiloxSeed seed = cpu_philox_seed(generator);
  const int64_t n = table.size(-1);
  const int64_t* t = table.const_data_ptr<int64_t>();
  int64_t* o = out.mutable_data_ptr<int64_t>();
  // One Philox block (128 bits) serves two samples.
  at::parallel_for(0, (total + 1) / 2, 4096, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const auto r = philox_block(seed, static_cast<uint64_t>(p));
      for (int64_t k = 0; k < 2 && 2 * p + k < total; ++k) {
        const int64_t e = 2 * p + k;
        o[e] = sample_bucket(t + (e / num_samples) * n, n, r[2 * k], r[2 * k + 1]);
      }
    }
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(wrs, CPU, m) {
  m.impl("alias_table", &alias_table_cpu);
  m.impl("alias_sample", &alias_sample_cpu);
}

}  // namespace wrs::alias
