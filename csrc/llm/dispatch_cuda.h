#pragma once
// The CUDA method table of the LLM samplers: how many CTAs (a cluster) share a row, and
// whether the row stays in their shared memory between passes.
//   - resident: each row stays in the cluster's shared memory (kResident items a CTA), read
//     from device memory once, where a cluster of up to 8 holds it (up to 262,144 items), and
//     is drawn from by inverse CDF over its segments; longer rows read device memory on
//     every pass and race (sample_cuda.cu).
//   - split: a call with fewer rows than the GPU has SMs splits each row further, up to 8
//     CTAs, keeping at least kItemsPerCta items in each so the cluster's combining steps
//     stay small beside the reads (docs/llm.md, "Cluster size").
#include "llm/select_cuda.cuh"

#include <ATen/cuda/CUDAContext.h>

#include <cstdint>

namespace wrs::llm {

constexpr int64_t kItemsPerCta = 4096;
constexpr int kMaxCluster = 8;

// Quads of each CTA's share when a row of v items is split over c CTAs: whole segments of
// kSegment items, so the segments (and the draw) do not depend on the split.
constexpr int64_t kSegment = 128;
C10_HOST_DEVICE inline int64_t share_quads(int64_t v, int64_t c) {
  const int64_t segments = (v + kSegment - 1) / kSegment;
  return (segments + c - 1) / c * (kSegment / 4);
}
inline int64_t share_items(int64_t v, int c) { return 4 * share_quads(v, c); }

inline bool fits_resident(int64_t v) { return share_items(v, kMaxCluster) <= kResident; }

inline int cluster_size(int64_t rows, int64_t v, bool resident) {
  static const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  int c = 1;
  while (resident && share_items(v, c) > kResident) c *= 2;
  while (c < kMaxCluster && rows * c * 2 <= sms && v >= kItemsPerCta * c * 2) c *= 2;
  return c;
}

}  // namespace wrs::llm
