"""`python -m torch_wrs.benchmark graph`: weighted graph sampling against what users run
otherwise, side by side in one process on an R-MAT graph made on the GPU.

The graph: Graph500's R-MAT (0.57 / 0.19 / 0.19 / 0.05), node ids permuted, symmetrised,
self loops and duplicate edges dropped, rows sorted; lognormal (sigma 2) edge weights, and
in 64 rows of degree 16 or more one edge holding 10^4 times the rest of its row. The
controls are written in torch: a float64 cumsum (the build's yardstick), cumsum +
searchsorted (with replacement, the CDF prebuilt), exponential keys + segmented sort (DGL's
and cuGraph's method without replacement), the same multi-hop deduplication on top of that,
and torch_cluster's walks where its random-walk extension builds (TORCH_CLUSTER_SRC: the
folder of torch_cluster 1.6.3's `csrc`).
"""
import datetime
import os

import torch

import torch_wrs

from .benchmark import captured, copy_bandwidth, cuda_ms

A, B, C = 0.57, 0.19, 0.19


def rmat(scale, edge_factor, seed=0):
    """(rowptr, col, weight) on the GPU."""
    g = torch.Generator("cuda").manual_seed(seed)
    n, m = 1 << scale, edge_factor << scale
    src = torch.zeros(m, dtype=torch.int64, device="cuda")
    dst = torch.zeros(m, dtype=torch.int64, device="cuda")
    for bit in range(scale):
        u = torch.rand(m, generator=g, device="cuda")
        src |= (u >= A + B).long() << bit
        dst |= (((u >= A) & (u < A + B)) | (u >= A + B + C)).long() << bit
    perm = torch.randperm(n, generator=g, device="cuda")
    src, dst = perm[src], perm[dst]
    keep = src != dst
    key = torch.cat([src[keep] * n + dst[keep], dst[keep] * n + src[keep]])
    del src, dst, keep
    key = torch.unique(key)
    src, col = key // n, key % n
    del key
    rowptr = torch.zeros(n + 1, dtype=torch.int64, device="cuda")
    rowptr[1:] = torch.cumsum(torch.bincount(src, minlength=n), 0)
    del src
    w = torch.exp(2.0 * torch.randn(col.numel(), generator=g, device="cuda"))
    degree = rowptr[1:] - rowptr[:-1]
    big = torch.nonzero(degree >= 16).squeeze(1)
    rows = big[torch.randperm(big.numel(), generator=g, device="cuda")[:64]]
    sums = torch.zeros(n, device="cuda").index_add_(0, torch.repeat_interleave(torch.arange(n, device="cuda"), degree), w)
    w[rowptr[rows]] = 1e4 * sums[rows]
    return rowptr, col, w


def torch_cluster_rw():
    """torch_cluster's random_walk op, its rw extension built alone, or None."""
    try:
        import torch_cluster  # noqa: F401

        return torch.ops.torch_cluster.random_walk
    except Exception:
        pass
    src = os.environ.get("TORCH_CLUSTER_SRC", "")
    if not src or not os.path.isdir(src):
        return None
    from torch.utils.cpp_extension import load

    load(name="torch_cluster_rw", sources=[os.path.join(src, f) for f in ("rw.cpp", "cpu/rw_cpu.cpp", "cuda/rw_cuda.cu")],
         extra_cflags=["-O3", "-DWITH_CUDA"], extra_cuda_cflags=["-O3"], extra_include_paths=[src],
         is_python_module=False, verbose=False)
    return torch.ops.torch_cluster.random_walk


def keys_sort_without_replacement(rowptr, w, seeds, k, generator):
    """DGL's and cuGraph's method in torch: an exponential key per edge of every seed,
    then a segmented sort (two stable sorts) and the first k of each seed."""
    start, degree = rowptr[seeds], rowptr[seeds + 1] - rowptr[seeds]
    total = int(degree.sum())
    seg = torch.repeat_interleave(torch.arange(seeds.numel(), device="cuda"), degree, output_size=total)
    first = torch.cumsum(degree, 0) - degree
    eid = start[seg] + torch.arange(total, device="cuda") - first[seg]
    keys = torch.empty(total, device="cuda").exponential_(generator=generator) / w[eid]
    order = torch.sort(keys, stable=True).indices
    order = order[torch.sort(seg[order], stable=True).indices]
    rank = torch.arange(total, device="cuda") - first[seg[order]]
    take = order[(rank < k) & (w[eid[order]] > 0)]
    return eid[take], seg[take]


def cdf_search_with_replacement(cdf, rowptr, seeds, k, generator):
    """cumsum + searchsorted with the CDF prebuilt (cdf[e] = weights before edge e, E + 1
    entries): k draws per seed by inversion, edge ids [S, k]."""
    lo, hi = cdf[rowptr[seeds]], cdf[rowptr[seeds + 1]]
    u = torch.rand(seeds.numel(), k, generator=generator, device="cuda", dtype=cdf.dtype)
    return torch.searchsorted(cdf, lo[:, None] + u * (hi - lo)[:, None], right=True) - 1


def multi_hop_torch(rowptr, col, w, seeds, fanouts, generator):
    """[15, 10, 5] in torch-native ops: keys + segmented sort per hop, then the same
    deduplication and relabelling as torch_wrs.graph."""
    from .graph import _NONE, _first_appearances

    n = rowptr.numel() - 1
    local = torch.full((n,), -1, dtype=torch.int64, device="cuda")
    local[seeds] = torch.arange(seeds.numel(), device="cuda")
    first = torch.full((n,), _NONE, dtype=torch.int64, device="cuda")
    frontier, total, out = seeds, seeds.numel(), []
    for k in fanouts:
        eid, seg = keys_sort_without_replacement(rowptr, w, frontier, k, generator)
        dst = col[eid]
        new = _first_appearances(dst, local, first)
        local[new] = torch.arange(total, total + new.numel(), device="cuda")
        out.append((local[frontier][seg], local[dst], eid))
        frontier, total = new, total + new.numel()
    return out


def _graph_replay_ms(fn):
    """Median ms of replaying fn() captured in a CUDA graph."""
    return cuda_ms(captured(fn), warmup=5, reps=50)


def _row(cells):
    return "| " + " | ".join(cells) + " |"


def run_scale(scale, edge_factor, lines, summary, tc_rw, bandwidth):
    torch.cuda.empty_cache()
    rowptr, col, w = rmat(scale, edge_factor)
    n, e = rowptr.numel() - 1, col.numel()
    degree = rowptr[1:] - rowptr[:-1]
    live = torch.nonzero(degree > 0).squeeze(1)
    lines.append(f"\n## R-MAT scale {scale}: {n:,} nodes, {e:,} directed edges, {live.numel():,} non-isolated, "
                 f"max degree {int(degree.max()):,}\n")
    gen = torch.Generator("cuda").manual_seed(1)

    # Build.
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    table = torch.ops.wrs.csr_alias_table(rowptr, w, validate=False)
    peak = torch.cuda.max_memory_allocated() - base
    build = cuda_ms(lambda: torch.ops.wrs.csr_alias_table(rowptr, w, validate=False), reps=10)
    cumsum = cuda_ms(lambda: torch.cumsum(w, 0, dtype=torch.float64), reps=10)
    floor = (4 + 8) * e / bandwidth * 1e3
    del table
    if os.environ.get("GRAPH_PROFILE"):
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            torch.ops.wrs.csr_alias_table(rowptr, w, validate=False)
            torch.cuda.synchronize()
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=12))
    t = torch_wrs.graph.CSRAliasTable(rowptr, col, w, validate=False)
    lines += ["| case | ours ms | theirs ms | theirs / ours | floor ms | note |", "| --- | ---: | ---: | ---: | ---: | --- |",
              _row(["build (float32 weights)", f"{build:.3f}", f"{cumsum:.3f}", f"{cumsum / build:.2f}", f"{floor:.3f}",
                    f"theirs: float64 cumsum; peak scratch {peak / 2**30:.2f} GiB, table {8 * e / 2**30:.2f} GiB"])]
    summary.append((scale, "build <= 2x a float64 cumsum", build / cumsum, f"{build / cumsum:.2f}x the cumsum", build <= 2 * cumsum))

    # One hop, 2^20 seeds x 15, with replacement.
    seeds = live[torch.randint(0, live.numel(), (1 << 20,), generator=gen, device="cuda")]
    k = 15
    ours = cuda_ms(lambda: t.sample_neighbors_padded(seeds, k, validate=False, generator=gen))
    cdf = torch.cat([torch.zeros(1, dtype=torch.float64, device="cuda"), torch.cumsum(w, 0, dtype=torch.float64)])
    theirs = cuda_ms(lambda: cdf_search_with_replacement(cdf, rowptr, seeds, k, gen))
    offsets = (torch.rand(seeds.numel(), k, generator=gen, device="cuda") * degree[seeds, None]).long()
    positions = rowptr[seeds, None] + offsets
    gather = cuda_ms(lambda: col[positions])
    draws = seeds.numel() * k
    lines.append(_row([f"2^20 seeds x {k}, with replacement", f"{ours:.3f}", f"{theirs:.3f}", f"{theirs / ours:.2f}",
                       f"{gather:.3f}", f"{draws / ours / 1e6:.1f} G draws/s; floor: col gathered at the draws' "
                       f"positions (one random read, 8 B written a draw)"]))
    summary.append((scale, ">= 4x cumsum + searchsorted", theirs / ours, f"{theirs / ours:.1f}x", theirs >= 4 * ours))
    summary.append((scale, "within 2x of the random-gather floor", ours / gather, f"{ours / gather:.2f}x the floor",
                    ours <= 2 * gather))

    # The same without replacement.
    ours = cuda_ms(lambda: t.sample_neighbors_padded(seeds, k, replace=False, validate=False, generator=gen))
    theirs = cuda_ms(lambda: keys_sort_without_replacement(rowptr, w, seeds, k, gen), warmup=1, reps=5)
    lines.append(_row([f"2^20 seeds x {k}, without replacement", f"{ours:.3f}", f"{theirs:.3f}", f"{theirs / ours:.1f}",
                       "", "theirs: exponential keys + segmented sort (DGL, cuGraph)"]))
    summary.append((scale, ">= 50x keys + segmented sort", theirs / ours, f"{theirs / ours:.0f}x", theirs >= 50 * ours))
    del cdf, offsets, positions

    # One hop, 1,024 seeds x 20, weighted (without replacement, as DGL's default).
    small = seeds[:1024]
    ours = cuda_ms(lambda: t.sample_neighbors_padded(small, 20, replace=False, validate=False, generator=gen), reps=50)
    compact = cuda_ms(lambda: t.sample_neighbors(small, 20, replace=False, generator=gen), reps=50)
    graphed = _graph_replay_ms(lambda: t.sample_neighbors_padded(small, 20, replace=False, validate=False))
    lines.append(_row(["1,024 seeds x 20, without replacement", f"{ours:.4f}", "", "", f"{graphed:.4f}",
                       f"fixed shape, eager; floor column: the same call replayed from a CUDA graph (no host "
                       f"work); {compact:.4f} ms compacted (one read back)"]))
    summary.append((scale, "one hop of 1,024 x 20 <= 0.05 ms", ours,
                    f"{ours:.4f} ms eager, {graphed:.4f} ms in a CUDA graph", min(ours, graphed) <= 0.05))

    # [15, 10, 5] from 1,024 seeds, deduplicated and relabelled.
    ours = cuda_ms(lambda: t.neighbor_sample(small, [15, 10, 5], generator=gen), reps=10)
    theirs = cuda_ms(lambda: multi_hop_torch(rowptr, col, w, small, [15, 10, 5], gen), warmup=1, reps=5)
    hops = t.neighbor_sample(small, [15, 10, 5], generator=gen)
    kernels = cuda_ms(lambda: [t.sample_neighbors_padded(f, kk, replace=False, validate=False, generator=gen)
                               for f, kk in zip((small, hops[2][1024:1024 + hops[4][1]],
                                                 hops[2][1024 + hops[4][1]:1024 + hops[4][1] + hops[4][2]]),
                                                (15, 10, 5))], reps=10)
    lines.append(_row(["[15, 10, 5] from 1,024 seeds, deduplicated", f"{ours:.3f}", f"{theirs:.3f}",
                       f"{theirs / ours:.1f}", f"{kernels:.3f}",
                       f"{sum(hops[5]):,} edges, {hops[2].numel():,} nodes; floor: the three sampling kernels alone"]))
    summary.append((scale, "[15, 10, 5] >= 5x torch-native", theirs / ours, f"{theirs / ours:.1f}x", theirs >= 5 * ours))

    # Walks: first order, length 80, one from every non-isolated node.
    length = 80
    steps = live.numel() * length
    ours = cuda_ms(lambda: t.random_walk(live, length, validate=False, generator=gen), warmup=1, reps=5)
    uniform = torch_wrs.graph.CSRAliasTable(rowptr, col)
    ours_u = cuda_ms(lambda: uniform.random_walk(live, length, validate=False, generator=gen), warmup=1, reps=5)
    tc = cuda_ms(lambda: tc_rw(rowptr, col, live, length, 1.0, 1.0), warmup=1, reps=5) if tc_rw else float("nan")
    # The floor: one random read of col a step (what an unweighted step needs), written out.
    where = torch.randint(0, e, (steps,), generator=gen, device="cuda")
    floor = cuda_ms(lambda: col[where], warmup=1, reps=5)
    del where
    lines.append(_row([f"first-order walks, {live.numel():,} x {length}, weighted", f"{ours:.2f}", f"{tc:.2f}",
                       f"{tc / ours:.2f}", f"{floor:.2f}", f"{steps / ours / 1e6:.1f} G steps/s; theirs: torch_cluster, "
                       f"unweighted; ours unweighted {ours_u:.2f} ms ({steps / ours_u / 1e6:.1f} G steps/s); floor: "
                       f"one random 8-byte read of col a step ({steps / floor / 1e6:.1f} G/s)"]))
    summary.append((scale, ">= 20 G steps/s", steps / ours / 1e6, f"{steps / ours / 1e6:.1f} G steps/s",
                    steps / ours / 1e6 >= 20))
    if tc_rw:
        summary.append((scale, ">= 1x torch_cluster's unweighted walks", tc / ours, f"{tc / ours:.2f}x", tc >= ours))

    # node2vec, p = 4, q = 0.5, on a subset of starts (torch_cluster's rejection scans rows).
    sub = live[torch.randperm(live.numel(), generator=gen, device="cuda")[:1 << 16]]
    t.rows_sorted()
    ours = cuda_ms(lambda: t.random_walk(sub, length, p=4.0, q=0.5, validate=False, generator=gen), warmup=1, reps=5)
    uniform.rows_sorted()
    ours_u = cuda_ms(lambda: uniform.random_walk(sub, length, p=4.0, q=0.5, validate=False, generator=gen), warmup=1,
                     reps=5)
    tc = cuda_ms(lambda: tc_rw(rowptr, col, sub, length, 4.0, 0.5), warmup=1, reps=3) if tc_rw else float("nan")
    steps = sub.numel() * length
    lines.append(_row([f"node2vec walks p=4 q=0.5, {sub.numel():,} x {length}, weighted", f"{ours:.2f}", f"{tc:.2f}",
                       f"{tc / ours:.1f}", "", f"{steps / ours / 1e6:.2f} G steps/s; theirs: torch_cluster, "
                       f"unweighted; ours unweighted {ours_u:.2f} ms ({tc / ours_u:.1f}x)"]))
    if tc_rw:
        summary.append((scale, "node2vec >= 10x torch_cluster's", tc / ours_u, f"{tc / ours_u:.0f}x (both unweighted)",
                        tc >= 10 * ours_u))
    del t, uniform, rowptr, col, w


def run(args):
    bandwidth = copy_bandwidth()
    tc_rw = torch_cluster_rw()
    props = torch.cuda.get_device_properties(0)
    lines = [f"# Graph sampling on an {props.name}\n",
             f"{props.name} (copy bandwidth {bandwidth / 1e12:.2f} TB/s), torch {torch.__version__.split('+')[0]}, "
             f"CUDA {torch.version.cuda}, {datetime.date.today().isoformat()}. `python -m torch_wrs.benchmark graph`. "
             f"CUDA-event medians after warm-up. torch_cluster: "
             f"{'1.6.3, its random-walk extension' if tc_rw else 'not available'}."]
    summary = []
    for scale, edge_factor in args.graph_scales:
        run_scale(scale, edge_factor, lines, summary, tc_rw, bandwidth)
    lines += ["\n## Targets\n", "| scale | target | measured | met |", "| ---: | --- | --- | --- |"]
    lines += [_row([str(s), what, shown, "yes" if ok else "**no**"]) for s, what, _, shown, ok in summary]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
