#pragma once
// The CUDA method table of the LLM samplers: how many CTAs (a cluster) share a row.
// A row is one cluster's work; a call with fewer rows than the GPU has SMs splits each row
// over up to 8 CTAs, keeping at least kItemsPerCta items in each so the cluster's
// combining steps stay small beside the reads (docs/llm.md, "Cluster size").
#include <ATen/cuda/CUDAContext.h>

#include <cstdint>

namespace wrs::llm {

constexpr int64_t kItemsPerCta = 16384;
constexpr int kMaxCluster = 8;

inline int cluster_size(int64_t rows, int64_t v) {
  static const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  int c = 1;
  while (c < kMaxCluster && rows * c * 2 <= sms && v >= kItemsPerCta * c * 2) c *= 2;
  return c;
}

}  // namespace wrs::llm
