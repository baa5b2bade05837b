// Alias tables on the CPU: parallel PSA+ with wrs::parallel_for (each chunk packs
// greedily what it can, then PSA splits and packs the leftovers on their merge path),
// and the baseline and sectioned samplers. Work is cut into fixed-size chunks, not
// per thread, so the result is the same for any thread count.
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

// Draws e in [e_begin, e_end) of the output from the run of `len` buckets starting at
// bucket `first` of a row of `row_buckets` (`run` points at it). Draw e uses half e % 2 of Philox block
// e / 2, whichever sampler produces it, so the stream depends only on the seed.
template <typename out_t>
void draw_run(const int64_t* run, int64_t len, int64_t first, int64_t row_buckets, int64_t e_begin, int64_t e_end,
              const PhiloxSeed& seed, out_t* out) {
  for (int64_t e = e_begin; e < e_end;) {
    const auto r = philox_block(seed, static_cast<uint64_t>(e / 2));
    for (int64_t half = e % 2; half < 2 && e < e_end; ++half, ++e) {
      const BucketDraw d = draw_bucket(static_cast<uint64_t>(len), r[2 * half], r[2 * half + 1]);
      out[e] = static_cast<out_t>(pick(d, run[d.bucket], static_cast<uint64_t>(row_buckets), first));
    }
  }
}

template <typename out_t>
void sample_baseline(const int64_t* table, int64_t n, int64_t num_samples, int64_t total,
                     const PhiloxSeed& seed, out_t* out) {
  wrs::parallel_for(0, total, 8192, [&](int64_t e0, int64_t e1) {
    while (e0 < e1) {  // split the chunk at row ends
      const int64_t row = e0 / num_samples;
      const int64_t row_end = std::min(e1, (row + 1) * num_samples);
      draw_run(table + row * n, n, 0, n, e0, row_end, seed, out);
      e0 = row_end;
    }
  });
}

// Sectioned sampling (sections.h). The CPU has no shared memory to stage into, so
// "cached" and "shared" differ only in their section size, as on the GPU.
template <typename out_t>
void sample_sectioned(const int64_t* table, int64_t rows, const SectionGrid& g, const PhiloxSeed& seed,
                      out_t* out) {
  const int64_t parts = parts_per_section(g);
  const PhiloxStreams streams{seed};
  wrs::parallel_for(0, rows * g.sections * parts, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t task = t0; task < t1; ++task) {
      const int64_t part = task % parts;
      const int64_t section = task / parts % g.sections;
      const int64_t row = task / parts / g.sections;
      const SectionSpan span = section_span(g, row, section, streams);
      const int64_t first = section * g.section_buckets;
      const int64_t e0 = row * g.num_samples + span.offset;
      draw_run(table + row * g.buckets + first, std::min(g.section_buckets, g.buckets - first), first, g.buckets,
               e0 + part_begin(span.count, part, parts), e0 + part_begin(span.count, part + 1, parts), seed,
               out);
    }
  });
}

at::Tensor alias_sample_cpu(const at::Tensor& table_in, int64_t num_samples, bool ordered, c10::string_view method,
                            std::optional<at::ScalarType> dtype, std::optional<at::Generator> generator) {
  check_table(table_in);
  check_num_samples(num_samples);
  const at::ScalarType out_type = sample_dtype(dtype);
  const at::Tensor table = table_in.contiguous();
  const int64_t n = table.size(-1);
  const int64_t rows = table.numel() / n;
  const SampleMethod how = sample_method(ordered, method, n, num_samples, rows);
  at::Tensor out = at::empty(sample_shape(table, num_samples), table.options().dtype(out_type));
  const int64_t total = out.numel();
  if (total == 0) return out;
  const PhiloxSeed seed = cpu_philox_seed(generator);
  const int64_t* t = table.const_data_ptr<int64_t>();
  auto run = [&](auto* o) {
    if (how == SampleMethod::kBaseline) {
      sample_baseline(t, n, num_samples, total, seed, o);
    } else {
      sample_sectioned(t, rows, section_grid(how, n, num_samples), seed, o);
    }
  };
  if (out_type == at::kLong) {
    run(out.mutable_data_ptr<int64_t>());
  } else {
    run(out.mutable_data_ptr<int32_t>());
  }
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(wrs, CPU, m) {
  m.impl("alias_table", &alias_table_cpu);
  m.impl("alias_sample", &alias_sample_cpu);
}

}  // namespace wrs::alias
