#pragma once
// One step of a random walk, the same code on the CPU and the GPU. `block(b)` returns
// Philox block b of the step's share of the walk's stream (graph.h: step_blocks).
//
// First order: x with probability w(v, x) / sum_x w(v, x), one draw from v's table.
// node2vec (Grover and Leskovec), having come from t: x with probability proportional to
// w(v, x) * a(t, x), a = 1/p for x = t, 1 for x a neighbour of t, 1/q otherwise. A
// proposal from v's table is accepted with a(t, x) / max a, which samples that law
// exactly (rejection sampling). After kWalkTrials rejections the step inverts the law
// directly over v's row: exact too, and the trial budget bounds the random words a step uses.
// A node with no edge of positive weight keeps the walk where it is.
#include "graph/graph.h"

namespace wrs::graph {

// The neighbours of a node (its span of col) and, for node2vec, whether rows are sorted.
template <typename col_t>
struct Graph {
  const int64_t* rowptr;
  const col_t* col;
  const int64_t* table;  // null: every edge weighs the same
  int64_t edges;
};

template <typename col_t, typename Blocks>
C10_HOST_DEVICE inline int64_t first_order_step(const Graph<col_t>& g, const Row& row, int64_t v, Blocks& block) {
  if (row.degree == 0) return v;
  const Words r = block(0);
  const int64_t off = draw_offset(g.table == nullptr ? nullptr : g.table + row.start,
                                  static_cast<uint64_t>(row.degree), r.x, r.y);
  // The neighbour is read once the bucket is resolved: two random reads a step, where reading
  // the bucket's own neighbour alongside would add a third whenever the alias is taken
  // (walks are bound by random reads, not by their latency).
  return off < 0 ? v : static_cast<int64_t>(g.col[row.start + off]);
}

// The node2vec weight of edge e of v's row, having come from t: w(v, x) * a(t, x) / max a.
template <typename col_t, typename w_t>
C10_HOST_DEVICE inline double biased_mass(const Graph<col_t>& g, const w_t* weight, int64_t e, int64_t t,
                                          const Row& trow, const Bias& bias, bool sorted) {
  const int64_t x = static_cast<int64_t>(g.col[e]);
  const double w = weight == nullptr ? 1.0 : static_cast<double>(weight[e]);
  if (!(w > 0)) return 0.0;
  const double a = x == t ? bias.back : (has_neighbor(g.col + trow.start, trow.degree, x, sorted) ? bias.common : bias.away);
  return w * a;
}

template <typename col_t, typename w_t, typename Blocks>
C10_HOST_DEVICE inline int64_t node2vec_step(const Graph<col_t>& g, const w_t* weight, const Row& row, int64_t v,
                                             int64_t t, const Bias& bias, bool sorted, Blocks& block) {
  if (row.degree == 0) return v;
  if (row.degree == 1) {  // the law is a point mass, or nothing for a dead row
    return g.table != nullptr && g.table[row.start] == kDeadBucket ? v : static_cast<int64_t>(g.col[row.start]);
  }
  const Row trow = row_at(g.rowptr, t, g.edges);
  const uint64_t n = static_cast<uint64_t>(row.degree);
  for (int64_t c = 0; c < kWalkTrials; ++c) {
    const Words r = block(c);
    const alias::BucketDraw d = alias::draw_bucket(n, r.x, r.y);
    int64_t off = static_cast<int64_t>(d.bucket);
    if (g.table != nullptr) {
      off = resolve(d, g.table[row.start + off], n);
      if (off < 0) return v;  // the row's weights sum to zero
    }
    const int64_t x = static_cast<int64_t>(g.col[row.start + off]);
    const double a = x == t ? bias.back : (has_neighbor(g.col + trow.start, trow.degree, x, sorted) ? bias.common : bias.away);
    if (open_uniform(r.z, r.w) < a) return x;
  }
  // Inversion over the row: the total, then the first edge whose running sum passes u.
  double total = 0;
  for (int64_t e = row.start; e < row.start + row.degree; ++e) total += biased_mass(g, weight, e, t, trow, bias, sorted);
  if (!(total > 0)) return v;
  const Words r = block(kWalkTrials);
  const double u = open_uniform(r.x, r.y) * total;
  double acc = 0;
  int64_t last = -1;
  for (int64_t e = row.start; e < row.start + row.degree; ++e) {
    const double m = biased_mass(g, weight, e, t, trow, bias, sorted);
    if (m > 0) last = e;
    acc += m;
    if (m > 0 && acc > u) return static_cast<int64_t>(g.col[e]);
  }
  return static_cast<int64_t>(g.col[last]);  // u rounded up to the total
}

}  // namespace wrs::graph
