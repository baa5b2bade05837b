#pragma once
// The block-level pieces of the LLM sampler's threshold search (sample_cuda.cu): a row's
// keys are searched by radix levels of 11, 11 and 10 bits; a level's histogram holds the
// count and the exact integer mass of the items in each bin; the boundary bin is where a
// predicate (count >= k, or mass >= ceil(p M)) first holds, counting from the top.
#include <cub/block/block_scan.cuh>

#include <cstdint>

namespace wrs::llm {

constexpr int kThreads = 512;
constexpr int kBins = 2048;
constexpr int kBinsPerThread = kBins / kThreads;

// Level l's shift and width: bins of level 1 are key >> 21, of level 2 (key >> 10) & 2047,
// of level 3 key & 1023 (single keys).
__host__ __device__ constexpr int level_shift(int level) { return level == 1 ? 21 : level == 2 ? 10 : 0; }
__host__ __device__ constexpr int level_bits(int level) { return level == 3 ? 10 : 11; }

// Whether a key lies in the range a level's histogram covers (prefix: the bits above).
__device__ inline bool in_prefix(uint32_t key, int level, uint32_t prefix) {
  const int above = level_shift(level) + level_bits(level);
  return above >= 32 || (key >> above) == prefix;
}
__device__ inline int bin_of(uint32_t key, int level) {
  return static_cast<int>((key >> level_shift(level)) & ((1u << level_bits(level)) - 1u));
}

struct CountMass {
  uint64_t count;
  uint64_t mass;
};
struct AddCountMass {
  __device__ CountMass operator()(const CountMass& a, const CountMass& b) const {
    return CountMass{a.count + b.count, a.mass + b.mass};
  }
};
using CountMassScan = cub::BlockScan<CountMass, kThreads>;

// The boundary of a histogram: the highest bin b at which `above` plus the items of bins
// >= b reach `target` (in counts, or in masses), and what the bins above b hold. Every
// thread returns the same; bin -1 when the target is out of reach.
struct Boundary {
  int bin;
  CountMass above;  // items in bins above the boundary, `above` of the caller included
  CountMass in_bin;
};

__device__ inline Boundary find_boundary(const uint32_t* count, const uint64_t* mass, CountMass above,
                                         uint64_t target, bool by_mass, typename CountMassScan::TempStorage& tmp,
                                         Boundary* out) {
  // Thread t holds bins 2047 - 4t, ..., 2044 - 4t: a scan from the top.
  CountMass mine[kBinsPerThread];
  const int top = kBins - 1 - kBinsPerThread * static_cast<int>(threadIdx.x);
#pragma unroll
  for (int j = 0; j < kBinsPerThread; ++j) mine[j] = CountMass{count[top - j], mass[top - j]};
  CountMass incl[kBinsPerThread];
  CountMassScan(tmp).InclusiveScan(mine, incl, AddCountMass());
  if (threadIdx.x == 0) out->bin = -1;
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kBinsPerThread; ++j) {
    const CountMass ge{above.count + incl[j].count, above.mass + incl[j].mass};
    const CountMass gt{ge.count - mine[j].count, ge.mass - mine[j].mass};
    const bool reaches = by_mass ? ge.mass >= target : ge.count >= target;
    const bool before = by_mass ? gt.mass >= target : gt.count >= target;
    if (reaches && !before) *out = Boundary{top - j, gt, mine[j]};
  }
  __syncthreads();
  return *out;
}

// A CTA's own histogram. Masses are added as three 14-bit parts with 32-bit atomics (q <
// 2^41; a resident share of at most 2^15 items keeps each part's sum below 2^32); a
// streaming share may hold more items and adds whole 64-bit masses instead.
struct LocalHistogram {
  uint32_t count[kBins];
  uint32_t part[3][kBins];  // or, streaming, uint64_t mass[kBins] in the same bytes
  __device__ uint64_t* wide() { return reinterpret_cast<uint64_t*>(&part[0][0]); }
  __device__ uint64_t mass(int b, bool wide_mass) const {
    if (wide_mass) return reinterpret_cast<const uint64_t*>(&part[0][0])[b];
    return part[0][b] + (static_cast<uint64_t>(part[1][b]) << 14) + (static_cast<uint64_t>(part[2][b]) << 28);
  }
};

// Adds one item (bin, q) with plain shared-memory atomics: aggregating a warp's lanes by
// bin (ballots, shuffles, reductions) cost more issue slots than the atomics' conflicts
// (docs/llm.md, "Where the time goes").
__device__ inline void histogram_add(LocalHistogram& h, int bin, uint64_t q, bool with_mass, bool wide_mass) {
  atomicAdd(&h.count[bin], 1u);
  if (!with_mass) return;
  if (wide_mass) {
    atomicAdd(reinterpret_cast<unsigned long long*>(h.wide() + bin), static_cast<unsigned long long>(q));
    return;
  }
  atomicAdd(&h.part[0][bin], static_cast<uint32_t>(q & 0x3fffu));
  atomicAdd(&h.part[1][bin], static_cast<uint32_t>((q >> 14) & 0x3fffu));
  atomicAdd(&h.part[2][bin], static_cast<uint32_t>(q >> 28));
}

// One CTA's select over the items its caller supplies (plain_cuda.cu, where every CTA of a
// cluster runs the same select over all the cluster's lists): no cluster merge, and plain
// 64-bit mass atomics, as the lists are short.
struct CtaSelect {
  uint32_t count[kBins];
  uint64_t mass[kBins];
  Boundary boundary;
  typename CountMassScan::TempStorage scan;
};

// The largest key t >= floor such that the items with key >= t reach `target` (in count, or
// in mass), and their count and mass (ge); 0, keeping everything, where out of reach.
// `each(f)` calls f(key, q) for each of the CTA's items (q its integer mass, or 0). As the
// cluster's select in sample_cuda.cu, level by level, stopping where the boundary bin is
// kept whole.
template <typename Each>
__device__ uint32_t cta_select(CtaSelect& s, Each&& each, bool by_mass, uint64_t target, uint32_t floor,
                               CountMass& ge) {
  uint32_t prefix = 0;
  CountMass above{0, 0};
  for (int level = 1;; ++level) {
    for (int b = threadIdx.x; b < kBins; b += kThreads) s.count[b] = 0, s.mass[b] = 0;
    __syncthreads();
    each([&](uint32_t key, uint64_t q) {
      if (key < floor || !in_prefix(key, level, prefix)) return;
      const int bin = bin_of(key, level);
      atomicAdd(&s.count[bin], 1u);
      if (q) atomicAdd(reinterpret_cast<unsigned long long*>(&s.mass[bin]), static_cast<unsigned long long>(q));
    });
    __syncthreads();
    const Boundary b = find_boundary(s.count, s.mass, above, target, by_mass, s.scan, &s.boundary);
    if (b.bin < 0) {
      ge = CountMass{0, 0};
      return 0;
    }
    prefix = (level == 1 ? 0u : prefix << level_bits(level)) | static_cast<uint32_t>(b.bin);
    ge = AddCountMass()(b.above, b.in_bin);
    // The bin's lowest key may lie under the floor, whose items were not counted.
    if (level == 3 || b.in_bin.count == 1 || (!by_mass && ge.count == target)) return max(prefix << level_shift(level), floor);
    above = b.above;
  }
}

}  // namespace wrs::llm
