// Alias tables on the CPU: parallel PSA+ with wrs::parallel_for (each chunk packs
// greedily what it can, then PSA splits and packs the leftovers on their merge path).
// Work is cut into fixed-size chunks, not per thread, so the result is the same for any
// thread count.
#include "common/parallel.h"
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

// One chunk partitioned on its own (keys counted from zero), in a task's buffer.
struct ChunkPartition {
  std::vector<LightItem> light;
  std::vector<uint64_t> deficit_before;
  std::vector<uint32_t> heavy;
  std::vector<uint64_t> excess_through;
  ClassPrefix sums;
  GreedyStop stop;

  ChunkPartition() : light(kChunk), deficit_before(kChunk), heavy(kChunk), excess_through(kChunk) {}

  template <typename scalar_t>
  void build(const scalar_t* w, int64_t begin, int64_t end, int64_t row_first, const RowScale& rs, int64_t n) {
    sums = ClassPrefix{0, 0, 0, 0};
    for (int64_t k = begin; k < end; ++k) {
      const uint64_t q = quantize(static_cast<double>(w[k]), rs, n);
      const ClassPrefix cls = class_of(q);
      const uint32_t index = static_cast<uint32_t>(k - row_first);
      if (cls.lights) {
        light[sums.lights] = LightItem{index, static_cast<uint32_t>(q)};
        deficit_before[sums.lights] = sums.deficit;
      } else {
        heavy[sums.heavies] = index;
        excess_through[sums.heavies] = sums.excess + cls.excess;
      }
      sums = sums + cls;
    }
    stop = greedy_stop(deficit_before.data(), sums.lights, sums.deficit, excess_through.data(), sums.heavies);
  }

  ClassPrefix leftovers() const {
    return leftover_totals(stop, sums.lights, sums.deficit, excess_through.data(), sums.heavies);
  }
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
  wrs::parallel_for(0, chunks, 1, [&](int64_t c0, int64_t c1) {
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
    flags = row_flags(sum, flags);
    scale[b] = row_scale(sum, n);
  }
  raise_weight_flags(flags, "alias_table", "weights");  // before anything is written

  // 2. PSA+: each chunk partitions itself and counts what greedy packing leaves over;
  //    the counts are scanned within each row.
  std::vector<ClassPrefix> chunk_before(chunks);
  wrs::parallel_for(0, chunks, 1, [&](int64_t c0, int64_t c1) {
    ChunkPartition part;
    for (int64_t c = c0; c < c1; ++c) {
      int64_t begin, end;
      chunk_range(c, begin, end);
      const int64_t b = c / chunks_per_row;
      part.build(w, begin, end, b * n, scale[b], n);
      chunk_before[c] = part.leftovers();
    }
  });
  std::vector<ClassPrefix> row_left(rows);
  for (int64_t b = 0; b < rows; ++b) {
    ClassPrefix running{0, 0, 0, 0};
    for (int64_t c = b * chunks_per_row; c < (b + 1) * chunks_per_row; ++c) {
      const ClassPrefix here = chunk_before[c];
      chunk_before[c] = running;
      running = running + here;
    }
    row_left[b] = running;
  }

  // 3. Each chunk packs its finished buckets and places its leftovers, with their keys.
  Scratch<LightItem> light(rows * n);
  Scratch<uint64_t> deficit_before(rows * n);
  Scratch<uint32_t> heavy(rows * n);
  Scratch<uint64_t> excess_through(rows * n);
  wrs::parallel_for(0, chunks, 1, [&](int64_t c0, int64_t c1) {
    ChunkPartition part;
    for (int64_t c = c0; c < c1; ++c) {
      int64_t begin, end;
      chunk_range(c, begin, end);
      const int64_t b = c / chunks_per_row;
      part.build(w, begin, end, b * n, scale[b], n);
      if (part.sums.heavies > 0) {
        const MergeSlice local = greedy_slice(part.light.data(), part.deficit_before.data(), part.heavy.data(),
                                              part.excess_through.data(), part.stop);
        pack_merge_steps(local, 0, part.stop.lights + part.stop.heavies, table + b * n);
      }
      const ClassPrefix left = part.leftovers();
      const ClassPrefix before = chunk_before[c];
      for (int64_t r = 0; r < left.lights; ++r) {
        const Leftover l = leftover_light(r, part.stop, part.sums, part.light.data(), part.deficit_before.data(),
                                          part.heavy.data(), before);
        light[b * n + before.lights + r] = LightItem{l.index, l.mass};
        deficit_before[b * n + before.lights + r] = l.key;
      }
      for (int64_t r = 0; r < left.heavies; ++r) {
        const Leftover h = leftover_heavy(r, part.stop, part.sums, part.heavy.data(), part.excess_through.data(),
                                          before);
        heavy[b * n + before.heavies + r] = h.index;
        excess_through[b * n + before.heavies + r] = h.key;
      }
    }
  });

  // 4. PSA on the leftovers: split and pack sections of each row's leftover merge.
  const int64_t sections_per_row = (n + kSection - 1) / kSection;
  wrs::parallel_for(0, rows * sections_per_row, 1, [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s) {
      const int64_t b = s / sections_per_row;
      const int64_t steps = row_left[b].lights + row_left[b].heavies;
      const int64_t begin = (s % sections_per_row) * kSection;
      if (begin >= steps) continue;
      const MergeSlice row = whole_row(light.ptr + b * n, deficit_before.ptr + b * n, heavy.ptr + b * n,
                                       excess_through.ptr + b * n, row_left[b].lights, row_left[b].heavies,
                                       row_left[b].deficit);
      pack_merge_steps(row, begin, std::min(begin + kSection, steps), table + b * n);
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

}  // namespace

TORCH_LIBRARY_IMPL(wrs, CPU, m) { m.impl("alias_table", &alias_table_cpu); }

}  // namespace wrs::alias
