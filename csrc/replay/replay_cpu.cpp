// Prioritized replay on the CPU: batched updates (last write wins, touched paths only),
// stratified or i.i.d. draws, and a full rebuild. tree.h states the layout and the law.
#include "common/parallel.h"
#include "common/philox.h"
#include "common/uniform.h"
#include "replay/replay_ops.h"

#include <ATen/Dispatch.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

#include <string>
#include <vector>

namespace wrs::replay {
namespace {

// The batch's priority of entry (b, j) as float64, or the insert value: the buffer's
// largest priority, 1.0 where that is 0 (as TorchRL's samplers do).
template <typename F>
void with_priorities(const Batch& batch, const Levels& s, const double* nodes, const F& f) {
  if (!batch.priority.defined()) {
    const double* top = nodes + s.inner + s.base[s.top];
    f([top](int64_t b, int64_t) { return top[b] > 0 ? top[b] : 1.0; });
    return;
  }
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, batch.priority.scalar_type(), "priority_update", [&] {
    const scalar_t* p = batch.priority.const_data_ptr<scalar_t>();
    const int64_t sb = batch.priority.stride(0), sj = batch.priority.stride(1);
    f([=](int64_t b, int64_t j) { return static_cast<double>(p[b * sb + j * sj]); });
  });
}

// Recomputes the distinct nodes at level l above the given leaves, using marks to find them.
void recompute_level(const Levels& s, double* leaves, double* nodes, int32_t* marks, int l,
                     const std::vector<int64_t>& touched) {
  int32_t* level_marks = marks + s.buffers * s.width[0];
  std::vector<int64_t> work;
  for (const int64_t key : touched) {  // key = b * N + leaf
    const int64_t b = key / s.capacity, v = (key - b * s.capacity) >> (kFanBits * l);
    int32_t& m = level_marks[s.node(l, b, v)];
    if (m == -1) {
      m = 0;
      work.push_back(b * s.count[l] + v);
    }
  }
  const int64_t n = static_cast<int64_t>(work.size());
  if (l == 1) {  // the children are mostly cold: ask for all their lines before the first sum waits on one
    for (const int64_t w : work) {
      const int64_t b = w / s.count[1];
      const double* raw = leaves + s.leaf(b, (w - b * s.count[1]) * kFan);
      for (int line = 0; line < kFan; line += 8) {
        __builtin_prefetch(raw + line);
        __builtin_prefetch(raw + s.buffers * s.width[0] + line);
      }
    }
  }
  parallel_for(0, n, 512, [&](int64_t a, int64_t e) {
    for (int64_t i = a; i < e; ++i) {
      const int64_t b = work[i] / s.count[l];
      recompute(s, leaves, nodes, l, b, work[i] - b * s.count[l]);
    }
  });
  for (const int64_t w : work) {
    const int64_t b = w / s.count[l];
    level_marks[s.node(l, b, w - b * s.count[l])] = -1;
  }
}

void priority_update_cpu(const at::Tensor& leaves, const at::Tensor& nodes, const at::Tensor& marks, const at::Tensor& index,
                         const std::optional<at::Tensor>& priority, int64_t capacity, double alpha, double eps,
                         bool validate) {
  constexpr const char* op = "PrioritySampler.update_";
  const Levels s = check_state(op, leaves, nodes, capacity);
  check_marks(op, marks, s, leaves);
  const Batch batch = check_batch(op, s, leaves, index, priority);
  if (batch.k == 0) return;
  const int64_t* idx = batch.index.const_data_ptr<int64_t>();
  double* lv = leaves.mutable_data_ptr<double>();
  double* nd = nodes.mutable_data_ptr<double>();
  double* t = lv + s.buffers * s.width[0];
  const int64_t entries = s.buffers * batch.k;
  std::vector<int64_t> touched;
  touched.reserve(entries);
  with_priorities(batch, s, nd, [&](auto value) {
    if (validate) {  // all or nothing: raise before anything is written
      uint32_t flags = 0;
      for (int64_t e = 0; e < entries; ++e) {
        const int64_t i = idx[e];
        if (i != -1 && (i < 0 || i >= capacity)) flags |= kIndexOutOfRange;
        if (bad_priority(value(e / batch.k, e % batch.k))) flags |= kBadPriority;
      }
      raise_replay_flags(flags, op);
    }
    for (int64_t e = 0; e < entries; ++e) {  // in order, so the last write of a slot wins
      const int64_t b = e / batch.k, i = idx[e];
      const double p = value(b, e - b * batch.k);
      if (i < 0 || i >= capacity || bad_priority(p)) continue;  // -1, or bad input when not validating
      lv[s.leaf(b, i)] = p + 0.0;  // -0.0 stored as 0.0
      t[s.leaf(b, i)] = transform(p, alpha, eps);
      touched.push_back(b * capacity + i);
    }
  });
  for (int l = 1; l <= s.top; ++l) recompute_level(s, lv, nd, marks.mutable_data_ptr<int32_t>(), l, touched);
}

void priority_rebuild_cpu(const at::Tensor& leaves, const at::Tensor& nodes, int64_t capacity, double alpha, double eps) {
  constexpr const char* op = "PrioritySampler.rebuild_";
  const Levels s = check_state(op, leaves, nodes, capacity);
  double* lv = leaves.mutable_data_ptr<double>();
  double* nd = nodes.mutable_data_ptr<double>();
  const int64_t slots = s.buffers * s.width[0];
  parallel_for(0, slots, 1 << 14, [&](int64_t a, int64_t e) {
    for (int64_t i = a; i < e; ++i) lv[slots + i] = transform(lv[i], alpha, eps);
  });
  for (int l = 1; l <= s.top; ++l) {
    parallel_for(0, s.buffers * s.count[l], 1024, [&](int64_t a, int64_t e) {
      for (int64_t i = a; i < e; ++i) recompute(s, lv, nd, l, i / s.count[l], i % s.count[l]);
    });
  }
}

std::tuple<at::Tensor, at::Tensor> priority_sample_cpu(const at::Tensor& leaves, const at::Tensor& nodes,
                                                       int64_t capacity, int64_t n, bool stratified, bool validate,
                                                       std::optional<at::Generator> generator) {
  constexpr const char* op = "PrioritySampler.sample";
  const Levels s = check_state(op, leaves, nodes, capacity);
  TORCH_CHECK(n >= 0, op, ": n must be non-negative, got ", n);
  at::Tensor index = at::empty({s.buffers, n}, leaves.options().dtype(at::kLong));
  at::Tensor prob = at::empty({s.buffers, n}, leaves.options());
  if (n == 0) return {index, prob};
  const PhiloxSeed seed = cpu_philox_seed(generator);
  const double* lv = leaves.const_data_ptr<double>();
  const double* nd = nodes.const_data_ptr<double>();
  const double* t = lv + s.buffers * s.width[0];
  int64_t* out = index.mutable_data_ptr<int64_t>();
  double* pr = prob.mutable_data_ptr<double>();
  std::atomic<uint32_t> flags{0};
  parallel_for(0, s.buffers * n, 64, [&](int64_t a, int64_t e) {
    PhiloxBlocks blocks(seed, static_cast<uint64_t>(a), static_cast<uint64_t>(e));
    for (int64_t d = a; d < e; ++d) {
      const at::detail::UINT4& w = blocks();
      const int64_t b = d / n;
      const double total = nd[s.root(b)];
      const int64_t leaf = total > 0 && total <= std::numeric_limits<double>::max()
                               ? descend(s, lv, nd, b, draw_mass(total, d - b * n, n, stratified, open_uniform(w[0], w[1])),
                                         [](const double* c) { return c; })
                               : -1;
      if (leaf < 0) {  // documented result where the call does not raise
        flags |= total > 0 ? kTotalOverflow : kEmpty;
        out[d] = 0;
        pr[d] = std::numeric_limits<double>::quiet_NaN();
      } else {
        out[d] = leaf;
        pr[d] = t[s.leaf(b, leaf)] / total;
      }
    }
  });
  if (validate) raise_replay_flags(flags.load(), op);
  return {index, prob};
}

at::Tensor priority_weights_cpu(const at::Tensor& leaves, const at::Tensor& nodes, int64_t capacity,
                                const at::Tensor& prob, double alpha, double eps, double beta) {
  constexpr const char* op = "PrioritySampler.weights";
  const Levels s = check_state(op, leaves, nodes, capacity);
  const at::Tensor rows = check_prob(op, s, leaves, prob);
  at::Tensor out = at::empty_like(rows);
  const int64_t n = rows.size(1);
  const double* nd = nodes.const_data_ptr<double>();
  AT_DISPATCH_FLOATING_TYPES(rows.scalar_type(), "priority_weights", [&] {
    const scalar_t* p = rows.const_data_ptr<scalar_t>();
    scalar_t* w = out.mutable_data_ptr<scalar_t>();
    for (int64_t i = 0; i < s.buffers * n; ++i) {
      const int64_t b = i / n;
      w[i] = static_cast<scalar_t>(importance_weight(p[i], nd[s.root(b)], nd[2 * s.inner + s.root(b)], alpha, eps, beta));
    }
  });
  return out.view(prob.sizes());
}

std::string priority_route(const std::string& device, int64_t buffers, int64_t capacity, int64_t entries,
                           bool sample) {
  TORCH_CHECK(buffers >= 1 && capacity >= 1 && entries >= 1,
              "_priority_route: buffers, capacity and entries must be positive");
  if (device == "cpu") return sample ? "thread" : "paths";
  TORCH_CHECK(device == "cuda", "_priority_route: device must be \"cpu\" or \"cuda\", got \"", device, "\"");
  if (sample) return choose_sample_cuda(entries) == SampleMethod::kWarp ? "warp" : "thread";
  return method_name(choose_update_cuda(buffers, capacity, entries));
}

}  // namespace

TORCH_LIBRARY_IMPL(wrs, CompositeImplicitAutograd, m) { m.impl("_priority_route", &priority_route); }

TORCH_LIBRARY_IMPL(wrs, CPU, m) {
  m.impl("priority_update", &priority_update_cpu);
  m.impl("priority_rebuild", &priority_rebuild_cpu);
  m.impl("priority_sample", &priority_sample_cpu);
  m.impl("priority_weights", &priority_weights_cpu);
}

}  // namespace wrs::replay
