// Neighbour sampling on CUDA (csr_sample_neighbors). With replacement, a thread draws two
// of a seed's k neighbours (one Philox block); the seed's rowptr entries and its row's
// sectors are shared through L1 by the threads of one seed. Without replacement, a warp
// runs a seed's trials 32 at a time and keeps the first occurrences in trial order, so
// the draws are exactly those of the CPU's one-at-a-time loop (sample_cpu.cpp).
#include "common/cuda_utils.cuh"
#include "common/philox_cuda.cuh"
#include "graph/graph_ops.h"
#include "graph/status_cuda.cuh"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

namespace wrs::graph {
namespace {

constexpr int kThreads = 256;
constexpr unsigned kFull = 0xFFFFFFFFu;

template <typename col_t, typename w_t>
struct Sampling {
  const int64_t* rowptr;
  const col_t* col;
  const int64_t* table;  // null: uniform
  const w_t* weight;     // null: uniform
  const int64_t* nodes;
  int64_t num_nodes, edges, seeds, k;
  int64_t* nbr;
  int64_t* eid;
  int64_t* count;
  uint32_t* status;

  __device__ double mass(int64_t e) const { return weight == nullptr ? 1.0 : static_cast<double>(weight[e]); }
  // The seed's node, or -1 (flagged) when it is not one.
  __device__ int64_t node(int64_t i) const {
    const int64_t v = nodes[i];
    return v >= 0 && v < num_nodes ? v : -1;
  }
};

// Thread (i, h) draws k-slots 2h and 2h + 1 of seed i from Philox block h of subsequence i.
template <typename col_t, typename w_t>
__global__ void __launch_bounds__(kThreads)
    replace_kernel(Sampling<col_t, w_t> s, at::PhiloxCudaState philox) {
  const int64_t pairs = s.k > 0 ? replace_blocks(s.k) : 1;  // k = 0: a thread still writes the count
  const int64_t g = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (g >= s.seeds * pairs) return;
  const int64_t i = g / pairs, h = g - i * pairs;
  const int64_t v = s.node(i);
  int64_t got[2] = {-1, -1};
  bool live = v >= 0;
  if (v < 0 && h == 0) atomicOr(s.status, kNodeOutOfRange);
  if (live) {
    const Row row = row_at(s.rowptr, v, s.edges);
    live = row.degree > 0;
    if (live) {
      const PhiloxSeed seed = philox_seed(philox);
      const uint4 r = philox_block_at(seed.seed, seed.offset / 4 + static_cast<uint64_t>(h), static_cast<uint64_t>(i));
      const uint64_t n = static_cast<uint64_t>(row.degree);
      const alias::BucketDraw d0 = alias::draw_bucket(n, r.x, r.y), d1 = alias::draw_bucket(n, r.z, r.w);
      int64_t o0 = static_cast<int64_t>(d0.bucket), o1 = static_cast<int64_t>(d1.bucket);
      if (s.table != nullptr) {
        const int64_t t0 = s.table[row.start + o0], t1 = s.table[row.start + o1];
        o0 = resolve(d0, t0, n);
        o1 = resolve(d1, t1, n);
      }
      live = o0 >= 0;  // a dead row's every bucket says so
      got[0] = row.start + o0;
      got[1] = row.start + o1;
    }
  }
#pragma unroll
  for (int c = 0; c < 2; ++c) {
    const int64_t j = 2 * h + c;
    if (j >= s.k) break;
    s.eid[i * s.k + j] = live ? got[c] : -1;
    s.nbr[i * s.k + j] = live ? static_cast<int64_t>(s.col[got[c]]) : -1;
  }
  if (h == 0) s.count[i] = live ? s.k : 0;
}

__device__ inline unsigned lanes_below() {
  unsigned m;
  asm("mov.u32 %0, %%lanemask_lt;" : "=r"(m));
  return m;
}

// Whether edge e is among the first j accepted of seed i (the accepted list is the output).
__device__ inline bool taken(const int64_t* eid, int64_t j, int64_t e) {
  for (int64_t a = 0; a < j; ++a) {
    if (eid[a] == e) return true;
  }
  return false;
}

// A warp's sum of the row's untaken masses, chunk by chunk in a fixed order: the same
// rounding in the pass that totals and the pass that finds. Returns the total; with
// `u` >= 0 also the first edge whose running sum passes u in *found (else the last edge
// of positive mass).
template <typename col_t, typename w_t>
__device__ double scan_rest(const Sampling<col_t, w_t>& s, const Row& row, const int64_t* eid, int64_t j, double u,
                            int64_t* found) {
  const int lane = threadIdx.x % 32;
  double acc = 0;
  int64_t last = -1;
  for (int64_t base = 0; base < row.degree; base += 32) {
    const int64_t e = row.start + base + lane;
    const double m = base + lane < row.degree && !taken(eid, j, e) ? s.mass(e) : 0.0;
    double prefix = m;
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
      const double y = __shfl_up_sync(kFull, prefix, d);
      if (lane >= d) prefix += y;
    }
    const double chunk = __shfl_sync(kFull, prefix, 31);
    if (u >= 0) {
      const unsigned pos = __ballot_sync(kFull, m > 0);
      if (pos) last = row.start + base + (31 - __clz(pos));
      const unsigned hit = __ballot_sync(kFull, m > 0 && acc + prefix > u);
      if (hit) {
        *found = row.start + base + (__ffs(hit) - 1);
        return acc + chunk;
      }
    }
    acc += chunk;
  }
  if (u >= 0) *found = last;
  return acc;
}

// A warp per seed: successive sampling, as sample_cpu.cpp's `distinct`.
template <typename col_t, typename w_t>
__global__ void __launch_bounds__(kThreads)
    distinct_kernel(Sampling<col_t, w_t> s, at::PhiloxCudaState philox) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (kThreads / 32);
  const PhiloxSeed seed = philox_seed(philox);
  const int64_t budget = trial_budget(s.k);
  for (int64_t i = (blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x) / 32; i < s.seeds; i += warps) {
    int64_t* eid = s.eid + i * s.k;
    int64_t* nbr = s.nbr + i * s.k;
    const int64_t v = s.node(i);
    if (v < 0 && lane == 0) atomicOr(s.status, kNodeOutOfRange);
    const Row row = v >= 0 ? row_at(s.rowptr, v, s.edges) : Row{0, 0};
    int64_t j = 0;
    if (row.degree <= s.k) {  // every edge of positive weight, in CSR order
      for (int64_t base = 0; base < row.degree; base += 32) {
        const int64_t e = row.start + base + lane;
        const bool keep = base + lane < row.degree && s.mass(e) > 0;
        const unsigned all = __ballot_sync(kFull, keep);
        if (keep) {
          const int64_t at = j + __popc(all & lanes_below());
          eid[at] = e;
          nbr[at] = static_cast<int64_t>(s.col[e]);
        }
        j += __popc(all);
      }
    } else {
      const int64_t* rt = s.table == nullptr ? nullptr : s.table + row.start;
      const uint64_t n = static_cast<uint64_t>(row.degree);
      bool dead = false;
      for (int64_t t0 = 0; t0 < budget && j < s.k; t0 += 32) {
        const int64_t t = t0 + lane;
        const uint4 r = philox_block_at(seed.seed, seed.offset / 4 + static_cast<uint64_t>(t / 2),
                                        static_cast<uint64_t>(i));
        const int64_t off = draw_offset(rt, n, t % 2 ? r.z : r.x, t % 2 ? r.w : r.y);
        if (__any_sync(kFull, off < 0)) {  // a dead row: every bucket says so
          dead = true;
          break;
        }
        const int64_t e = row.start + off;
        const bool first = (__match_any_sync(kFull, static_cast<unsigned long long>(e)) & lanes_below()) == 0;
        const bool fresh = first && !taken(eid, j, e);
        const unsigned all = __ballot_sync(kFull, fresh);
        const int64_t rank = __popc(all & lanes_below());
        if (fresh && rank < s.k - j) {
          eid[j + rank] = e;
          nbr[j + rank] = static_cast<int64_t>(s.col[e]);
        }
        j += min(static_cast<int64_t>(__popc(all)), s.k - j);
        __syncwarp();
      }
      // Past the budget: exact draws by inversion over the untaken rest of the row.
      for (int64_t m = 0; !dead && j < s.k; ++m) {
        const double total = scan_rest(s, row, eid, j, -1.0, nullptr);
        if (!(total > 0)) break;
        const uint4 r = philox_block_at(seed.seed, seed.offset / 4 + static_cast<uint64_t>(budget / 2 + m),
                                        static_cast<uint64_t>(i));
        int64_t pick = -1;
        scan_rest(s, row, eid, j, open_uniform(r.x, r.y) * total, &pick);
        if (lane == 0) {
          eid[j] = pick;
          nbr[j] = static_cast<int64_t>(s.col[pick]);
        }
        ++j;
        __syncwarp();
      }
      if (dead) j = 0;
    }
    for (int64_t a = j + lane; a < s.k; a += 32) eid[a] = nbr[a] = -1;
    if (lane == 0) s.count[i] = j;
  }
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> csr_sample_neighbors_cuda(
    const at::Tensor& rowptr, const at::Tensor& col, const std::optional<at::Tensor>& table,
    const std::optional<at::Tensor>& weight, const at::Tensor& nodes, int64_t k, bool replace, bool validate,
    std::optional<at::Generator> generator) {
  constexpr const char* op = "csr_sample_neighbors";
  const c10::cuda::CUDAGuard guard(rowptr.device());
  const SamplingArgs a(op, rowptr, col, table, weight, nodes, "nodes");
  check_fanout(op, k, replace, table.has_value(), weight.has_value());
  const int64_t count = a.nodes.numel();
  at::Tensor nbr, eid, counts;
  std::tie(nbr, eid, counts) = neighbor_outputs(count, k, a.rowptr.options());
  if (count == 0) return {nbr, eid, counts};
  const auto stream = at::cuda::getCurrentCUDAStream();
  CallStatus status(validate, a.rowptr.options(), stream);
  const int64_t words = 4 * (replace ? replace_blocks(k) : distinct_blocks(k));
  const auto philox = cuda_philox_state(generator, a.rowptr.device().index(), static_cast<uint64_t>(words));
  dispatch_graph(a, [&](auto col_type, auto w_type) {
    using col_t = decltype(col_type);
    using w_t = decltype(w_type);
    const Sampling<col_t, w_t> s{a.rowptr.const_data_ptr<int64_t>(),
                                 a.col.const_data_ptr<col_t>(),
                                 a.table_ptr(),
                                 a.weight_ptr<w_t>(),
                                 a.nodes.const_data_ptr<int64_t>(),
                                 a.num_nodes(),
                                 a.col.numel(),
                                 count,
                                 k,
                                 nbr.mutable_data_ptr<int64_t>(),
                                 eid.mutable_data_ptr<int64_t>(),
                                 counts.mutable_data_ptr<int64_t>(),
                                 status.bits()};
    if (replace) {
      const int64_t threads = count * std::max<int64_t>(replace_blocks(k), 1);
      replace_kernel<<<ceil_div(threads, kThreads), kThreads, 0, stream>>>(s, philox);
    } else {
      distinct_kernel<<<grid_for(count * 32, kThreads), kThreads, 0, stream>>>(s, philox);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  raise_graph_flags(status.read(), op);
  return {nbr, eid, counts};
}

}  // namespace

TORCH_LIBRARY_IMPL(wrs, CUDA, m) { m.impl("csr_sample_neighbors", &csr_sample_neighbors_cuda); }

}  // namespace wrs::graph
