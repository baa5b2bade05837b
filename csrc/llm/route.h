#pragma once
// The CUDA method table of the LLM samplers, in one place and host-only, so that any build
// answers _llm_route (tests assert the routes on machines without a GPU):
//   - kernel: the plain streaming kernel (plain_cuda.cu), its thresholds variant (top-k up
//     to 1,024, top-p over it, top-p alone by rejection), or the general sample kernel
//     (sample_cuda.cu) for every other call: greedy, top-k above 1,024, top-p alone with
//     several samples or processed log-probabilities, rows past a cluster's plain share.
//     With per-row control tensors the plain kernel decides each row on the device and
//     defers the rows it cannot serve to a second launch of the sample kernel.
//   - top-p alone with scalar controls (one sample, no min-p, no processed log-probabilities)
//     on rows that one CTA reads about as fast as a cluster would: a CTA a row of its own
//     kernel (top_p_cuda.cu), 1,024 threads where rows are fewer than half the SMs, else 512.
//   - top-n log-probs (sample_llm_top_logprobs): where the thresholds kernel draws logits with a
//     top-k of at least n (n <= kPlainMaxTopN, and no plan), it ranks the top n and the draws
//     from its top-k lists; rows it cannot serve so (lists too long, per-row controls that
//     leave them) are flagged for top_logprobs' kernels. Every other call draws, then runs them.
//   - cluster: how many CTAs share a row. Resident rows stay in the cluster's shared memory
//     (kResident items a CTA, up to 8 CTAs: 262,144 items); a call with fewer rows than the
//     GPU has SMs splits each row further, up to 8 CTAs, keeping at least kItemsPerCta items
//     in each so the cluster's combining steps stay small beside the reads (docs/llm.md,
//     "Cluster size").
#include "llm/llm_ops.h"

#include <c10/macros/Macros.h>

#include <cstdint>

namespace wrs::llm {

constexpr int kResident = 32768;  // items of a row one CTA keeps in shared memory between passes
constexpr int64_t kItemsPerCta = 4096;
constexpr int kMaxCluster = 8;
constexpr int64_t kPlainMaxTopK = 1024;
constexpr int64_t kPlainMaxTopN = 64;  // top-n log-probs from the thresholds kernel's lists (top_logprobs' kFusedMaxN)      // larger k: longer lists; the sample kernel takes them
constexpr int64_t kPlainMaxItems = 262'144;  // a plain CTA's share: its segment sums in shared memory
constexpr int64_t kTopPMaxItems = 262'144;   // the top-p kernel's rows (a warp walks a thread's quads at once)
constexpr int64_t kTopPShortRow = 65'536;    // rows this short take it whatever the call's rows

// Quads of each CTA's share when a row of v items is split over c CTAs: whole segments of
// kSegment items, so the segments (and the draw) do not depend on the split.
constexpr int64_t kSegment = 128;
C10_HOST_DEVICE inline int64_t share_quads(int64_t v, int64_t c) {
  const int64_t segments = (v + kSegment - 1) / kSegment;
  return (segments + c - 1) / c * (kSegment / 4);
}
inline int64_t share_items(int64_t v, int c) { return 4 * share_quads(v, c); }

inline bool fits_resident(int64_t v) { return share_items(v, kMaxCluster) <= kResident; }

// CTAs a row on a GPU of `sms` multiprocessors.
inline int cluster_size(int64_t rows, int64_t v, bool resident, int64_t sms) {
  int c = 1;
  while (resident && share_items(v, c) > kResident) c *= 2;
  while (c < kMaxCluster && rows * c * 2 <= sms && v >= kItemsPerCta * c * 2) c *= 2;
  return c;
}

enum class Kernel { kPlain, kPlainThresholds, kSample, kTopP };

struct Route {
  Kernel kernel;
  int cluster;
  bool resident;  // the sample kernel's rows stay in shared memory
  bool defers;    // per-row tensors: the plain kernel may leave rows to the sample kernel
  int threads = 0;  // kTopP: threads a CTA
};

// The route of a call (Call's tensors are not read: per-row controls count by presence).
Route route(const Call& call, int64_t sms);

// Whether the call's top n log-probs come from the thresholds kernel's lists (above).
inline bool fuses_top_n(const Call& call, const Route& r, int64_t n) {
  return r.kernel == Kernel::kPlainThresholds && call.logits && !call.plan && n > 0 && n <= kPlainMaxTopN &&
         (call.controls.top_k != nullptr || call.controls.top_k_value >= n);
}

// The sample kernel's part of the route: for calls (and deferred rows) it serves.
inline Route sample_route(const Call& call, int64_t sms) {
  const bool resident = fits_resident(call.v);
  return {Kernel::kSample, cluster_size(call.rows, call.v, resident, sms), resident, false};
}

}  // namespace wrs::llm
