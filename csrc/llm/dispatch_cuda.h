#pragma once
// The CUDA method table of the LLM samplers: how many CTAs (a cluster) share a row, and
// whether the row stays in their shared memory between passes.
//   - resident: a call with any control keeps each row in the cluster's shared memory
//     (kResident items a CTA), read from device memory once, where a cluster of up to 8 holds
//     it (up to 262,144 items); longer rows read device memory on every pass.
//   - split: a call with fewer rows than the GPU has SMs splits each row further, up to 8
//     CTAs, keeping at least kItemsPerCta items in each so the cluster's combining steps
//     stay small beside the reads (docs/llm.md, "Cluster size").
#include "llm/select_cuda.cuh"

#include <ATen/cuda/CUDAContext.h>

#include <cstdint>

namespace wrs::llm {

constexpr int64_t kItemsPerCta = 4096;
constexpr int kMaxCluster = 8;

// Items of each CTA's share when a row of v items is split over c CTAs (whole quads).
inline int64_t share_items(int64_t v, int c) { return 4 * ((((v + 3) / 4) + c - 1) / c); }

inline bool fits_resident(int64_t v) { return share_items(v, kMaxCluster) <= kResident; }

inline int cluster_size(int64_t rows, int64_t v, bool resident) {
  static const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  int c = 1;
  while (resident && share_items(v, c) > kResident) c *= 2;
  while (c < kMaxCluster && rows * c * 2 <= sms && v >= kItemsPerCta * c * 2) c *= 2;
  return c;
}

}  // namespace wrs::llm
