#pragma once
// Philox blocks of one subsequence (a seed's, or a walk's), from `first` on: block(b) is
// block first + b after the call's offset. The CPU reads at::philox_engine, CUDA cuRAND's
// Philox; both lay the counter out the same way (common/philox.h).
#include "common/philox.h"
#include "graph/graph.h"
#if defined(__CUDACC__)
#include "common/philox_cuda.cuh"
#endif

namespace wrs::graph {

struct CpuBlocks {
  const PhiloxSeed* seed;
  uint64_t subsequence, first;
  Words operator()(int64_t b) const {
    at::philox_engine e(seed->seed, subsequence, seed->offset / 4 + first + static_cast<uint64_t>(b));
    const uint32_t x = e(), y = e(), z = e(), w = e();
    return Words{x, y, z, w};
  }
};

#if defined(__CUDACC__)
struct CudaBlocks {
  PhiloxSeed seed;
  uint64_t subsequence, first;
  __device__ Words operator()(int64_t b) const {
    const uint4 r = philox_block_at(seed.seed, seed.offset / 4 + first + static_cast<uint64_t>(b), subsequence);
    return Words{r.x, r.y, r.z, r.w};
  }
};
#endif

}  // namespace wrs::graph
