#pragma once
// One seed's neighbours on the CPU, in the order of the Philox words the GPU's kernels use
// too (sample_cuda.cu: a thread per two draws with replacement, a warp per seed's trials
// without), so both draw the same edges from the same table and words. `block(b)` returns
// Philox block b of the seed's subsequence (graph.h's layouts).
#include "graph/graph.h"

namespace wrs::graph {

// Where a seed's k draws go: edge ids and neighbours, k slots each.
template <typename col_t>
struct SeedOut {
  const col_t* col;
  int64_t* eid;
  int64_t* nbr;
  C10_HOST_DEVICE void put(int64_t j, int64_t e) const {
    eid[j] = e;
    nbr[j] = static_cast<int64_t>(col[e]);
  }
  C10_HOST_DEVICE bool taken(int64_t j, int64_t e) const {
    for (int64_t a = 0; a < j; ++a) {
      if (eid[a] == e) return true;
    }
    return false;
  }
};

// k i.i.d. draws from the row's table (uniform when rt is null); none from a dead row.
// Returns the count.
template <typename col_t, typename Blocks>
C10_HOST_DEVICE inline int64_t draws_with_replacement(const Row& row, const int64_t* rt, int64_t k,
                                                      const SeedOut<col_t>& out, Blocks& block) {
  if (row.degree == 0) return 0;
  const uint64_t n = static_cast<uint64_t>(row.degree);
  for (int64_t j = 0; j < k; j += 2) {
    const Words r = block(j / 2);
    const int64_t o0 = draw_offset(rt, n, r.x, r.y);
    if (o0 < 0) return 0;  // a dead row: every bucket says so
    out.put(j, row.start + o0);
    if (j + 1 < k) out.put(j + 1, row.start + draw_offset(rt, n, r.z, r.w));
  }
  return k;
}

template <typename w_t>
C10_HOST_DEVICE inline double edge_mass(const w_t* weight, int64_t e) {
  return weight == nullptr ? 1.0 : static_cast<double>(weight[e]);
}

// Successive sampling: the first k distinct edges of i.i.d. trials from the row's table,
// in trial order (trial t: half t % 2 of block t / 2), which is the law of drawing each
// next edge from the weights of those not yet drawn. A row of at most k edges gives every
// edge of positive mass, in CSR order. Returns the count so far; `done` is false when the
// trial budget ran out first (the drawn edges hold most of the row's mass), and the rest
// is then drawn by inversion (invert_rest, or its block-wide form on CUDA).
template <typename col_t, typename w_t, typename Blocks>
C10_HOST_DEVICE inline int64_t trials_without_replacement(const Row& row, const int64_t* rt, const w_t* weight,
                                                          int64_t k, const SeedOut<col_t>& out, Blocks& block,
                                                          bool& done) {
  int64_t j = 0;
  done = true;
  if (row.degree <= k) {
    for (int64_t e = row.start; e < row.start + row.degree; ++e) {
      if (edge_mass(weight, e) > 0) out.put(j++, e);
    }
    return j;
  }
  const uint64_t n = static_cast<uint64_t>(row.degree);
  const int64_t budget = trial_budget(k);
  for (int64_t t = 0; t < budget && j < k; t += 2) {
    const Words r = block(t / 2);
    const int64_t o0 = draw_offset(rt, n, r.x, r.y);
    const int64_t o1 = draw_offset(rt, n, r.z, r.w);  // both loads in flight together
    if (o0 < 0) return 0;  // a dead row: every bucket says so
    if (!out.taken(j, row.start + o0)) out.put(j++, row.start + o0);
    if (j < k && !out.taken(j, row.start + o1)) out.put(j++, row.start + o1);
  }
  done = j == k;
  return j;
}

// The m-th draw after the trials (Philox block trial_budget(k) / 2 + m): the untaken edge
// where the running sum of untaken masses, in CSR order, passes u * total.
template <typename col_t, typename w_t, typename Blocks>
C10_HOST_DEVICE inline int64_t invert_rest(const Row& row, const w_t* weight, int64_t k, int64_t j,
                                           const SeedOut<col_t>& out, Blocks& block) {
  const int64_t budget = trial_budget(k);
  for (int64_t m = 0; j < k; ++m) {
    double total = 0;
    for (int64_t e = row.start; e < row.start + row.degree; ++e) total += out.taken(j, e) ? 0.0 : edge_mass(weight, e);
    if (!(total > 0)) break;
    const Words r = block(budget / 2 + m);
    const double u = open_uniform(r.x, r.y) * total;
    double acc = 0;
    int64_t pick = -1;
    for (int64_t e = row.start; e < row.start + row.degree; ++e) {
      const double x = out.taken(j, e) ? 0.0 : edge_mass(weight, e);
      if (x > 0) pick = e;
      acc += x;
      if (x > 0 && acc > u) break;
    }
    out.put(j++, pick);
  }
  return j;
}

}  // namespace wrs::graph
