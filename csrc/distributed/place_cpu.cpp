// _ordered_labels, _ordered_place and _ordered_fill on the CPU (place.h states the law): a task per block
// of positions, so the labels do not depend on the thread count.
#include "alias/alias.h"
#include "common/parallel.h"
#include "common/philox.h"
#include "distributed/place.h"
#include "distributed/place_checks.h"

#include <ATen/ATen.h>
#include <torch/library.h>

#include <vector>

namespace wrs::place {
namespace {

std::tuple<at::Tensor, at::Tensor> ordered_labels_cpu(const at::Tensor& cdf, int64_t count,
                                                      std::optional<at::Generator> generator) {
  check_labels_args(cdf, count);
  const at::Tensor c = cdf.contiguous();
  const int parts = static_cast<int>(c.numel());
  const int64_t blocks = (count + kPlaceBlock - 1) / kPlaceBlock;
  at::Tensor labels = at::empty({count}, c.options().dtype(at::kByte));
  at::Tensor block_counts = at::zeros({blocks, parts}, c.options().dtype(at::kLong));
  const PhiloxSeed seed = cpu_philox_seed(generator);
  const double* cd = c.const_data_ptr<double>();
  uint8_t* lab = labels.mutable_data_ptr<uint8_t>();
  int64_t* counts = block_counts.mutable_data_ptr<int64_t>();
  wrs::parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t first = b * kPlaceBlock, end = std::min(count, first + kPlaceBlock);
      PhiloxBlocks words(seed, static_cast<uint64_t>(first / 2), static_cast<uint64_t>((end + 1) / 2));
      at::detail::UINT4 w{};
      for (int64_t t = first; t < end; ++t) {
        if (t % 2 == 0) w = words();
        const int p = label_of(position_uniform(w, t), cd, parts);
        lab[t] = static_cast<uint8_t>(p);
        ++counts[b * parts + p];
      }
    }
  });
  return {labels, block_counts};
}

at::Tensor ordered_place_cpu(const at::Tensor& grouped, const at::Tensor& labels, const at::Tensor& start) {
  check_place_args(grouped, labels, start);
  const at::Tensor g = grouped.contiguous(), lab = labels.contiguous(), st = start.contiguous();
  const int64_t n = g.numel(), parts = st.size(1);
  at::Tensor out = at::empty_like(g);
  AT_DISPATCH_INTEGRAL_TYPES(g.scalar_type(), "_ordered_place_cpu", [&] {
    const scalar_t* src = g.const_data_ptr<scalar_t>();
    scalar_t* dst = out.mutable_data_ptr<scalar_t>();
    const uint8_t* l = lab.const_data_ptr<uint8_t>();
    const int64_t* s = st.const_data_ptr<int64_t>();
    wrs::parallel_for(0, st.size(0), 1, [&](int64_t b0, int64_t b1) {
      std::vector<int64_t> next(parts);
      for (int64_t b = b0; b < b1; ++b) {
        std::copy(s + b * parts, s + (b + 1) * parts, next.begin());
        for (int64_t t = b * kPlaceBlock, end = std::min(n, t + kPlaceBlock); t < end; ++t) {
          const int64_t p = l[t];
          TORCH_CHECK(p < parts && next[p] >= 0 && next[p] < n, "_ordered_place: labels and start do not match grouped");
          dst[t] = src[next[p]++];
        }
      }
    });
  });
  return out;
}

at::Tensor ordered_fill_cpu(const at::Tensor& received, const at::Tensor& labels, const at::Tensor& start,
                            const at::Tensor& offsets, const at::Tensor& table, int64_t own,
                            std::optional<at::Generator> generator) {
  check_fill_args(received, labels, start, offsets, table, own);
  const at::Tensor g = received.contiguous(), lab = labels.contiguous(), st = start.contiguous();
  const at::Tensor off = offsets.contiguous(), tab = table.contiguous();
  const int64_t n = lab.numel(), m = g.numel(), parts = st.size(1);
  at::Tensor out = at::empty({n}, lab.options().dtype(at::kLong));
  const PhiloxSeed seed = own >= 0 ? cpu_philox_seed(generator) : PhiloxSeed{0, 0};
  const uint64_t buckets = own >= 0 ? static_cast<uint64_t>(tab.numel()) : 0;
  const int64_t* tp = own >= 0 ? tab.const_data_ptr<int64_t>() : nullptr;
  AT_DISPATCH_INDEX_TYPES(g.scalar_type(), "_ordered_fill_cpu", [&] {
    const index_t* src = g.const_data_ptr<index_t>();
    const uint8_t* l = lab.const_data_ptr<uint8_t>();
    const int64_t *s = st.const_data_ptr<int64_t>(), *o = off.const_data_ptr<int64_t>();
    int64_t* dst = out.mutable_data_ptr<int64_t>();
    wrs::parallel_for(0, st.size(0), 1, [&](int64_t b0, int64_t b1) {
      std::vector<int64_t> next(parts);
      for (int64_t b = b0; b < b1; ++b) {
        std::copy(s + b * parts, s + (b + 1) * parts, next.begin());
        for (int64_t t = b * kPlaceBlock, end = std::min(n, t + kPlaceBlock); t < end; ++t) {
          const int64_t p = l[t];
          TORCH_CHECK(p < parts, "_ordered_fill: label ", p, " at position ", t, " is not a part");
          if (p == own) {
            const at::detail::UINT4 w = philox_block(seed, static_cast<uint64_t>(t / 2));
            const alias::BucketDraw d = alias::draw_bucket(buckets, w[2 * (t % 2)], w[2 * (t % 2) + 1]);
            dst[t] = o[p] + alias::pick(d, tp[d.bucket], buckets);
          } else {
            TORCH_CHECK(next[p] >= 0 && next[p] < m, "_ordered_fill: labels and start do not match received");
            dst[t] = o[p] + static_cast<int64_t>(src[next[p]++]);
          }
        }
      }
    });
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(wrs, CPU, m) {
  m.impl("_ordered_labels", &ordered_labels_cpu);
  m.impl("_ordered_place", &ordered_place_cpu);
  m.impl("_ordered_fill", &ordered_fill_cpu);
}

}  // namespace wrs::place
