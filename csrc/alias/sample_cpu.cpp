// Alias-table sampling on the CPU (alias_sample): the baseline and sectioned samplers.
// Work is cut into fixed-size tasks, not per thread, so the draws are the same for any
// thread count.
#include "alias/alias_ops.h"
#include "common/parallel.h"
#include "common/philox.h"

#include <ATen/ops/empty.h>
#include <torch/library.h>

namespace wrs::alias {
namespace {

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

// Segments (alias_ops.h): a task per (section, part) draws every segment's share of its
// section, each segment's spans from its own tree (row a), as on the GPU.
template <typename out_t>
void sample_segments(const int64_t* table, int64_t n, const SegmentPlan& plan, const PhiloxSeed& seed, out_t* out) {
  const SectionGrid grid = section_grid(SampleMethod::kShared, plan.end - plan.begin, plan.total);
  const int64_t parts = parts_per_section(grid);
  const PhiloxStreams streams{seed};
  wrs::parallel_for(0, grid.sections * parts, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t task = t0; task < t1; ++task) {
      const int64_t part = task % parts;
      const int64_t section = task / parts;
      const int64_t first = plan.begin + section * grid.section_buckets;
      const int64_t len = std::min(grid.section_buckets, plan.end - first);
      for (int a = 0; a < plan.segments; ++a) {
        SectionGrid mine = grid;
        mine.num_samples = plan.starts.at[a + 1] - plan.starts.at[a];
        const SectionSpan span = section_span(mine, a, section, streams);
        const int64_t e0 = plan.starts.at[a] + span.offset;
        draw_run(table + first, len, first, n, e0 + part_begin(span.count, part, parts),
                 e0 + part_begin(span.count, part + 1, parts), seed, out);
      }
    }
  });
}

at::Tensor alias_sample_segments_cpu(const at::Tensor& table_in, at::IntArrayRef counts, int64_t begin, int64_t end,
                                     std::optional<at::ScalarType> dtype, std::optional<at::Generator> generator) {
  const SegmentPlan plan = segment_plan(table_in, counts, begin, end);
  const at::ScalarType out_type = sample_dtype(dtype);
  const at::Tensor table = table_in.contiguous();
  at::Tensor out = at::empty({plan.total}, table.options().dtype(out_type));
  if (plan.total == 0) return out;
  const PhiloxSeed seed = cpu_philox_seed(generator);
  if (out_type == at::kLong) {
    sample_segments(table.const_data_ptr<int64_t>(), table.numel(), plan, seed, out.mutable_data_ptr<int64_t>());
  } else {
    sample_segments(table.const_data_ptr<int64_t>(), table.numel(), plan, seed, out.mutable_data_ptr<int32_t>());
  }
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(wrs, CPU, m) {
  m.impl("alias_sample", &alias_sample_cpu);
  m.impl("_alias_sample_segments", &alias_sample_segments_cpu);
}

}  // namespace wrs::alias
