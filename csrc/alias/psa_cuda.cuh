#pragma once
// The CUDA pieces of PSA+ that the builds over tiles of dense rows (alias_cuda.cu) and of
// CSR rows (graph/build_cuda.cu) share: the look-back that places each tile's leftovers,
// and the pack of one section of a row's leftover merge.
//
// Leftover totals of a tile are scanned over tiles with restarts where a row starts (the
// segmented-scan operator, associative), through CUB's decoupled look-back (the engine of
// its single-pass scans), so one look-back serves every row at once.
#include "alias/alias.h"

#include <cub/agent/single_pass_scan_operators.cuh>

namespace wrs::alias {

struct RowPrefix {
  ClassPrefix sum;
  int64_t starts_row;
};

struct AddWithinRow {
  __host__ __device__ RowPrefix operator()(const RowPrefix& a, const RowPrefix& b) const {
    return b.starts_row ? b : RowPrefix{a.sum + b.sum, a.starts_row};
  }
};

using TileState = cub::ScanTileState<RowPrefix>;
using TileLookback = cub::TilePrefixCallbackOp<RowPrefix, AddWithinRow, TileState>;

// A template, so that the kernel may sit in a header included by several files.
template <typename State>
__global__ void init_tile_state_kernel(State state, int tiles) {
  state.InitializeStatus(tiles);
}

// Merge steps [n0, n1) of a row's leftover merge `whole`, whose lights before n0 and n1 are
// i0 and i1 (the splits), packed into the row's `table` by a block of THREADS threads, ITEMS
// steps each: the section's lights and heavies are staged in shared memory (key, light,
// heavy: n1 - n0 entries each) with coalesced loads, then merged.
template <int THREADS, int ITEMS>
__device__ void pack_section(const MergeSlice& whole, int64_t n0, int64_t n1, int64_t i0, int64_t i1, uint64_t* key,
                             LightItem* light, uint32_t* heavy, int64_t* table) {
  const int64_t j0 = n0 - i0, lights = i1 - i0, heavies = (n1 - i1) - j0;
  for (int64_t r = threadIdx.x; r < lights; r += THREADS) {
    light[r] = whole.light[i0 + r];
    key[r] = whole.deficit_before[i0 + r];
  }
  for (int64_t r = threadIdx.x; r < heavies; r += THREADS) {
    heavy[r] = whole.heavy[j0 + r];
    key[lights + r] = whole.excess_through[j0 + r];
  }
  __syncthreads();
  const int64_t j1 = j0 + heavies;
  const MergeSlice slice{light, key, heavy, key + lights, lights, heavies,
                         i1 < whole.lights ? whole.deficit_before[i1] : whole.deficit_after,
                         j1 < whole.heavies ? whole.heavy[j1] : whole.heavy_after};
  const int64_t begin = threadIdx.x * ITEMS;
  if (begin < n1 - n0) pack_merge_steps(slice, begin, begin + ITEMS < n1 - n0 ? begin + ITEMS : n1 - n0, table);
}

}  // namespace wrs::alias
