#pragma once
// Sharded sampling in i.i.d. order (torch_wrs.distributed.ShardedAliasTable, ordered=True):
// each output position's part (the rank or table piece its draw comes from), and then the
// draws, grouped by part, placed back at their part's positions in order. Shared by the
// CPU and CUDA kernels so both follow the same law.
//
// Position t draws u = open_uniform of words 2 (t % 2), 2 (t % 2) + 1 of Philox block t / 2,
// and takes the first part p with cdf[p] > u (the last part where none: cdf's rounding), as
// torch.searchsorted(cdf, u, right=True) would: P(p) = cdf[p] - cdf[p - 1], to float64
// rounding. Positions come in blocks of kPlaceBlock; each block counts its labels per part.
//
// _ordered_fill places, as _ordered_place, the received draws of every part but `own`
// (plus each part's offset), and gives each position labelled `own` a draw of its own
// from `own`'s alias table: position t takes half t % 2 of Philox block t / 2 of the
// call's stream, as alias_sample's baseline draw t would, so the own draws are i.i.d. in
// order and independent of the labels (which come from another call's stream).
#include "common/uniform.h"

#include <c10/macros/Macros.h>

#include <cstdint>

namespace wrs::place {

constexpr int64_t kPlaceBlock = 4096;  // positions a block labels and places
constexpr int64_t kMaxParts = 256;     // labels are uint8

// The first p in [0, parts) with cdf[p] > u, or parts - 1.
C10_HOST_DEVICE inline int label_of(double u, const double* cdf, int parts) {
  int lo = 0, hi = parts - 1;  // the answer is in [lo, hi]
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (cdf[mid] > u) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

// Position t's uniform from its Philox block (t / 2): words 0 and 1, or 2 and 3.
template <typename Words>
C10_HOST_DEVICE inline double position_uniform(const Words& w, int64_t t) {
  return t % 2 == 0 ? open_uniform(w[0], w[1]) : open_uniform(w[2], w[3]);
}

}  // namespace wrs::place
