#pragma once
// Host-side pieces of the replay ops shared by the CPU and CUDA kernels: the checks of the
// state and of a batch of updates, and the errors a call's flags raise.
#include "common/checks.h"
#include "replay/tree.h"

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <optional>

namespace wrs::replay {

// The state tensors of a sampler (tree.h gives the layout), checked against each other.
inline Levels check_state(const char* op, const at::Tensor& leaves, const at::Tensor& nodes, int64_t capacity) {
  TORCH_CHECK(capacity >= 1 && capacity < (int64_t{1} << 31), op, ": capacity must be in [1, 2^31), got ", capacity);
  TORCH_CHECK(leaves.dim() == 3 && leaves.size(0) == 2 && leaves.scalar_type() == at::kDouble &&
                  leaves.is_contiguous(),
              op, ": leaves must be a contiguous float64 tensor [2, B, W0], got ", leaves.sizes(), " ",
              leaves.scalar_type());
  const Levels s = make_levels(leaves.size(1), capacity);
  TORCH_CHECK(leaves.size(2) == s.width[0], op, ": leaves holds ", leaves.size(2), " slots a buffer but capacity ",
              capacity, " needs ", s.width[0]);
  TORCH_CHECK(nodes.dim() == 2 && nodes.size(0) == 3 && nodes.size(1) == s.inner &&
                  nodes.scalar_type() == at::kDouble && nodes.is_contiguous() && nodes.device() == leaves.device(),
              op, ": nodes must be a contiguous float64 tensor [3, ", s.inner, "] on leaves' device, got ",
              nodes.sizes(), " ", nodes.scalar_type(), " on ", nodes.device());
  return s;
}

inline void check_marks(const char* op, const at::Tensor& marks, const Levels& s, const at::Tensor& leaves) {
  TORCH_CHECK(marks.dim() == 1 && marks.numel() == s.buffers * s.width[0] + s.inner &&
                  marks.scalar_type() == at::kInt && marks.is_contiguous() && marks.device() == leaves.device(),
              op, ": marks must be a contiguous int32 tensor [", s.buffers * s.width[0] + s.inner,
              "] on leaves' device");
}

// A batch of updates: index [B, k] (int64 or int32), priority broadcast to it (any float
// dtype) or none (insert at the buffer's largest priority).
struct Batch {
  at::Tensor index;     // int64 [B, k], contiguous
  at::Tensor priority;  // [B, k] view (strides may be 0), or undefined
  int64_t k = 0;
};

inline Batch check_batch(const char* op, const Levels& s, const at::Tensor& leaves, const at::Tensor& index,
                         const std::optional<at::Tensor>& priority) {
  TORCH_CHECK(index.scalar_type() == at::kLong || index.scalar_type() == at::kInt, op,
              ": index must be int64 or int32, got ", index.scalar_type());
  TORCH_CHECK(index.device() == leaves.device(), op, ": index is on ", index.device(), " but the sampler is on ",
              leaves.device());
  const at::Tensor rows = index.dim() == 1 && s.buffers == 1 ? index.view({1, -1}) : index;
  TORCH_CHECK(rows.dim() == 2 && rows.size(0) == s.buffers, op, ": index must be [", s.buffers,
              ", k] (one row a buffer; [k] for one buffer), got ", index.sizes());
  TORCH_CHECK(s.buffers * rows.size(1) < (int64_t{1} << 31), op, ": at most 2^31 - 1 updates a call");
  Batch batch;
  batch.k = rows.size(1);
  batch.index = rows.to(at::kLong).contiguous();
  if (priority.has_value()) {
    TORCH_CHECK(priority->device() == leaves.device() || priority->dim() == 0, op, ": priority is on ",
                priority->device(), " but the sampler is on ", leaves.device());
    check_floating(*priority, op, "priority");
    at::Tensor p = priority->device() == leaves.device() ? *priority : priority->to(leaves.device());
    TORCH_CHECK(p.dim() <= 2, op, ": priority must broadcast to index's shape ", index.sizes(), ", got ", p.sizes());
    batch.priority = p.expand(rows.sizes());
  }
  return batch;
}

// The CUDA update's method table. One block runs every phase (one launch) while the batch
// is small; past that, a launch a phase; a rebuild of every node where the batch touches
// most of the tree anyway. The CPU always recomputes the touched paths.
enum class UpdateMethod { kOneBlock, kLevels, kRebuild };

constexpr int64_t kOneBlockEntries = 1024;

inline UpdateMethod choose_update_cuda(int64_t buffers, int64_t capacity, int64_t entries) {
  if (entries <= kOneBlockEntries) return UpdateMethod::kOneBlock;
  if (entries * 8 >= buffers * capacity) return UpdateMethod::kRebuild;
  return UpdateMethod::kLevels;
}

// The CUDA draws' method table: a warp a draw while the draws are few (one coalesced load a
// level: latency is the limit), a thread a draw past that (its sixteen 16-byte loads a level
// keep more in flight: 16 against 63 us for 65,536 draws from 10M slots on an H200).
enum class SampleMethod { kWarp, kThread };

constexpr int64_t kWarpDraws = 8192;

inline SampleMethod choose_sample_cuda(int64_t draws) {
  return draws <= kWarpDraws ? SampleMethod::kWarp : SampleMethod::kThread;
}

inline const char* method_name(UpdateMethod m) {
  switch (m) {
    case UpdateMethod::kOneBlock: return "one_block";
    case UpdateMethod::kLevels: return "levels";
    default: return "rebuild";
  }
}

// prob [B, n] (float32 / float64, on the state's device) for priority_weights.
inline at::Tensor check_prob(const char* op, const Levels& s, const at::Tensor& leaves, const at::Tensor& prob) {
  TORCH_CHECK(prob.scalar_type() == at::kDouble || prob.scalar_type() == at::kFloat, op,
              ": prob must be float64 or float32, got ", prob.scalar_type());
  TORCH_CHECK(prob.device() == leaves.device(), op, ": prob is on ", prob.device(), " but the sampler is on ",
              leaves.device());
  const at::Tensor rows = prob.dim() == 1 && s.buffers == 1 ? prob.view({1, -1}) : prob;
  TORCH_CHECK(rows.dim() == 2 && rows.size(0) == s.buffers, op, ": prob must be [", s.buffers, ", n], got ",
              prob.sizes());
  return rows.contiguous();
}

// (N P_i)^-beta over the largest any drawable slot gets: (t_i / t_min)^-beta = (P_i total / t_min)^-beta.
C10_HOST_DEVICE inline double importance_weight(double prob, double total, double min_raw, double alpha, double eps,
                                                double beta) {
  return ::pow(prob * (total / transform(min_raw, alpha, eps)), -beta);
}

inline void raise_replay_flags(uint32_t flags, const char* op) {
  TORCH_CHECK(!(flags & kIndexOutOfRange), op, ": index holds an entry outside [0, capacity) (other than -1, which is skipped)");
  TORCH_CHECK(!(flags & kBadPriority), op, ": priority must be finite and non-negative");
  TORCH_CHECK(!(flags & kEmpty), op, ": every priority is 0, so there is nothing to draw");
  TORCH_CHECK(!(flags & kTotalOverflow), op,
              ": the transformed priorities sum past float64's range; scale the priorities down");
}

}  // namespace wrs::replay
