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

// Where positions labelled `part` draw from in _ordered_fill (part -1: none), as on CUDA.
struct OwnTable {
  const int64_t* table;
  uint64_t buckets;
  int64_t part;
  PhiloxSeed seed;
};

// out[t] = shift[p] + the next of `src` for part p = labels[t], or for p == own.part the
// own table's draw t; blocks of kPlaceBlock positions, each from its row of `start`.
template <typename src_t, typename out_t>
void place_blocks(const src_t* src, int64_t m, const uint8_t* labels, int64_t n, const int64_t* start,
                  int64_t parts, const int64_t* shift, const OwnTable& own, const char* src_name, out_t* out) {
  wrs::parallel_for(0, (n + kPlaceBlock - 1) / kPlaceBlock, 1, [&](int64_t b0, int64_t b1) {
    std::vector<int64_t> next(parts);
    for (int64_t b = b0; b < b1; ++b) {
      std::copy(start + b * parts, start + (b + 1) * parts, next.begin());
      for (int64_t t = b * kPlaceBlock, end = std::min(n, t + kPlaceBlock); t < end; ++t) {
        const int64_t p = labels[t];
        TORCH_CHECK(p < parts, "label ", p, " at position ", t, " is not a part");
        const int64_t add = shift != nullptr ? shift[p] : 0;
        if (p == own.part) {
          const at::detail::UINT4 w = philox_block(own.seed, static_cast<uint64_t>(t / 2));
          const alias::BucketDraw d = alias::draw_bucket(own.buckets, w[2 * (t % 2)], w[2 * (t % 2) + 1]);
          out[t] = static_cast<out_t>(add + alias::pick(d, own.table[d.bucket], own.buckets));
        } else {
          TORCH_CHECK(next[p] >= 0 && next[p] < m, "labels and start do not match ", src_name);
          out[t] = static_cast<out_t>(add + static_cast<int64_t>(src[next[p]++]));
        }
      }
    }
  });
}

at::Tensor ordered_place_cpu(const at::Tensor& grouped, const at::Tensor& labels, const at::Tensor& start) {
  check_place_args(grouped, labels, start);
  const at::Tensor g = grouped.contiguous(), lab = labels.contiguous(), st = start.contiguous();
  at::Tensor out = at::empty_like(g);
  AT_DISPATCH_INTEGRAL_TYPES(g.scalar_type(), "_ordered_place_cpu", [&] {
    place_blocks(g.const_data_ptr<scalar_t>(), g.numel(), lab.const_data_ptr<uint8_t>(), lab.numel(),
                 st.const_data_ptr<int64_t>(), st.size(1), nullptr, OwnTable{nullptr, 0, -1, {0, 0}},
                 "_ordered_place's grouped", out.mutable_data_ptr<scalar_t>());
  });
  return out;
}

at::Tensor ordered_fill_cpu(const at::Tensor& received, const at::Tensor& labels, const at::Tensor& start,
                            const at::Tensor& offsets, const at::Tensor& table, int64_t own,
                            std::optional<at::Generator> generator) {
  check_fill_args(received, labels, start, offsets, table, own);
  const at::Tensor g = received.contiguous(), lab = labels.contiguous(), st = start.contiguous();
  const at::Tensor off = offsets.contiguous(), tab = table.contiguous();
  at::Tensor out = at::empty({lab.numel()}, lab.options().dtype(at::kLong));
  const OwnTable mine = own >= 0 ? OwnTable{tab.const_data_ptr<int64_t>(), static_cast<uint64_t>(tab.numel()), own,
                                            cpu_philox_seed(generator)}
                                 : OwnTable{nullptr, 0, -1, {0, 0}};
  AT_DISPATCH_INDEX_TYPES(g.scalar_type(), "_ordered_fill_cpu", [&] {
    place_blocks(g.const_data_ptr<index_t>(), g.numel(), lab.const_data_ptr<uint8_t>(), lab.numel(),
                 st.const_data_ptr<int64_t>(), st.size(1), off.const_data_ptr<int64_t>(), mine,
                 "_ordered_fill's received", out.mutable_data_ptr<int64_t>());
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
