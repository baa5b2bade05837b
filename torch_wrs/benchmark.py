"""Side-by-side benchmarks on the GPU it finds (CUDA-event medians after warm-up).

    python -m torch_wrs.benchmark construction   # alias-table build vs torch.cumsum(float64)
    python -m torch_wrs.benchmark sampling       # alias sampling vs torch.multinomial and others
    python -m torch_wrs.benchmark multinomial    # torch_wrs.multinomial vs torch.multinomial, batched
    python -m torch_wrs.benchmark gamma          # standard_gamma / dirichlet vs torch, CuPy, JAX
    python -m torch_wrs.benchmark gamma-sweep [--device cpu] [--out FILE]
                                                 # standard_gamma / dirichlet / beta vs torch in the
                                                 # default call, from one element up
    python -m torch_wrs.benchmark radix          # radix forest build / inverse_cdf vs cumsum / searchsorted
    python -m torch_wrs.benchmark sweep [--device cpu] [--out FILE]
                                                 # multinomial vs torch.multinomial over the grid of
                                                 # shapes users run, and sample_logits
    python -m torch_wrs.benchmark contended-sweep --device cpu [--out FILE]
                                                 # multinomial vs torch on the CPU while busy
                                                 # loops hold every core
    python -m torch_wrs.benchmark llm-extras [--out FILE]   # process_logits, top-n log-probs, typical-p, masks
    python -m torch_wrs.benchmark llm [--quick] [--cuda-graphs] [--dtypes float32,bfloat16] [--out FILE]
                                                 # LLM sampling vs FlashInfer and a torch sort path
                                                 # (torch_wrs/benchmark_llm.py); --merge A.md B.md
                                                 # --out FILE joins the reports of --dtypes calls
    python -m torch_wrs.benchmark replay [--out FILE]     # prioritized replay against TorchRL's
                                                 # trees and cumsum + searchsorted
                                                 # (torch_wrs/benchmark_replay.py)
    python -m torch_wrs.benchmark graph [--graph-scales 21:16,24:8] [--out FILE]
                                                 # graph sampling (CSR alias tables, neighbours,
                                                 # walks) vs torch and torch_cluster on R-MAT
                                                 # (torch_wrs/benchmark_graph.py)
    torchrun --nproc_per_node=2 -m torch_wrs.benchmark distributed
                                                 # ShardedAliasTable over NCCL vs one GPU
                                                 # (torch_wrs/benchmark_distributed.py);
                                                 # --one-gpu-ranks 2 4: one GPU, no network

Each table row prints our time, what a user would run otherwise, their ratio, and the
memory-traffic floor at this device's measured copy bandwidth.
"""
import argparse
import statistics
import sys
import time

import torch

import torch_wrs
from torch_wrs._radix_diagnostics import search_loads, table1_weights


def cuda_ms(fn, warmup=3, reps=20):
    """Median milliseconds of fn() over `reps` CUDA-event timings, after `warmup` calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def captured(fn):
    """fn() captured in a CUDA graph (after warm-up calls on a side stream): its replay."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


def copy_bandwidth():
    """Device-to-device copy bandwidth in bytes/s, counting bytes read plus written."""
    src = torch.empty(1 << 29, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    ms = cuda_ms(lambda: dst.copy_(src), warmup=3, reps=10)
    return 2 * src.numel() / (ms * 1e-3)


def _weights(kind, shape, gen):
    if kind == "uniform":
        return torch.rand(shape, generator=gen, device="cuda") + 1e-3
    n = shape[-1]
    w = 1.0 / torch.arange(1, n + 1, device="cuda", dtype=torch.float32)
    return w[torch.randperm(n, generator=gen, device="cuda")].expand(shape).contiguous()


def construction(args):
    bw = copy_bandwidth()
    gen = torch.Generator("cuda").manual_seed(0)
    cases = [((n,), kind) for n in (10**6, 10**7, 10**8) for kind in ("uniform", "power_law")]
    cases += [((102_400, 1_024), "uniform"), ((65_536, 100), "uniform")]
    rows = []
    for shape, kind in cases:
        w = _weights(kind, shape, gen)
        items = w.numel()
        ours = cuda_ms(lambda: torch_wrs.alias_table(w, validate=False))
        cumsum = cuda_ms(lambda: torch.cumsum(w, dim=-1, dtype=torch.float64))
        floor = 12 * items / bw * 1e3  # read 4 bytes, write 8 bytes per item
        rows.append((" x ".join(f"{d:,}" for d in shape), kind, ours, cumsum, floor))
        del w
        torch.cuda.empty_cache()
    print(f"\nalias_table construction on {torch.cuda.get_device_name()} "
          f"(float32 weights, copy bandwidth {bw / 1e12:.2f} TB/s, medians of CUDA events)")
    print(f"| shape | weights | ours ms | torch.cumsum f64 ms | ours / cumsum | floor ms | ours / floor |")
    print(f"| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for shape, kind, ours, cumsum, floor in rows:
        print(f"| {shape} | {kind} | {ours:.3f} | {cumsum:.3f} | {ours / cumsum:.2f} | {floor:.3f} | {ours / floor:.1f} |")
    if args.profile:
        profile_build(args.profile)
    if args.cpu_scaling:
        cpu_scaling(args.cpu_scaling)


def _gsps(num, ms):
    return num / (ms * 1e-3) / 1e9


def sampling(args):
    """1-D sampling, ordered (i.i.d. in order), num_samples draws from N categories."""
    bw = copy_bandwidth()
    gen = torch.Generator("cuda").manual_seed(0)
    try:
        import cupy
    except ImportError:
        cupy = None
    s = args.samples
    rows = []
    for n in (10**3, 10**6, 10**7, 10**8):
        w = _weights("power_law", (n,), gen)
        table = torch_wrs.alias_table(w)
        r = {"n": n}
        r["ours"] = cuda_ms(lambda: torch_wrs.alias_sample(table, s, generator=gen))
        r["ours_i32"] = cuda_ms(lambda: torch_wrs.alias_sample(table, s, dtype=torch.int32, generator=gen))
        for method in ("auto", "shared", "cached"):
            r[method] = cuda_ms(lambda: torch_wrs.alias_sample(table, s, ordered=False, method=method, generator=gen))
        r["multinomial"] = (cuda_ms(lambda: torch.multinomial(w, s, replacement=True, generator=gen), warmup=1, reps=3)
                            if n <= 1 << 24 else None)
        cdf = torch.cumsum(w, 0, dtype=torch.float64)

        def searchsorted():
            u = torch.rand(s, device="cuda", dtype=torch.float64, generator=gen) * cdf[-1]
            return torch.searchsorted(cdf, u)

        r["searchsorted"] = cuda_ms(searchsorted, warmup=1, reps=3)
        # The exponential (Gumbel-max) trick draws one sample per argmax over N noisy keys:
        # timed on the draws that fit in about 2^28 keys, reported as a rate.
        gumbel_draws = max(1, (1 << 28) // n)
        logw = w.log()

        def gumbel_argmax():
            g = torch.empty(gumbel_draws, n, device="cuda").exponential_(generator=gen).log_().neg_()
            return (logw + g).argmax(-1)

        r["gumbel"] = cuda_ms(gumbel_argmax, warmup=1, reps=3) * s / gumbel_draws
        r["cupy"] = None
        if cupy is not None and n <= 10**6:
            p = cupy.asarray((w.double() / w.double().sum()).cpu().numpy())
            rs = cupy.random.RandomState(0)
            r["cupy"] = cuda_ms(lambda: rs.choice(n, s, p=p), warmup=1, reps=3)
        buf = torch.empty(s, dtype=torch.int64, device="cuda")
        r["random_"] = cuda_ms(lambda: buf.random_(generator=gen))
        r["floor"] = 8 * s / bw * 1e3
        rows.append(r)
        del w, table, cdf, buf, logw
        torch.cuda.empty_cache()

    def col(ms):
        if ms is None:
            return "n/a"
        rate = _gsps(s, ms)
        return f"{rate:.1f}" if rate >= 1 else f"{rate:.2g}"

    print(f"\nalias_sample, {s:,} samples, on {torch.cuda.get_device_name()} "
          f"(G samples/s; shuffled 1/i weights; copy bandwidth {bw / 1e12:.2f} TB/s)")
    print("| N | ordered int64 | ordered int32 | unordered auto | shared sectioned | cached sectioned | "
          "torch.multinomial | cumsum+searchsorted | exponential-trick argmax | cupy choice | torch random_ int64 (RNG ceiling) | "
          "int64 write floor | ordered / multinomial | unordered / multinomial |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        def ratio(key):
            return "n/a" if r["multinomial"] is None else f"{r['multinomial'] / r[key]:.1f}x"
        print(f"| {r['n']:,} | {col(r['ours'])} | {col(r['ours_i32'])} | {col(r['auto'])} | {col(r['shared'])} | "
              f"{col(r['cached'])} | {col(r['multinomial'])} | {col(r['searchsorted'])} | {col(r['gumbel'])} | {col(r['cupy'])} | "
              f"{col(r['random_'])} | {col(r['floor'])} | {ratio('ours')} | {ratio('auto')} |")


def multinomial_cases(args):
    """torch_wrs.multinomial vs torch.multinomial on batched shapes (ms, medians)."""
    gen = torch.Generator("cuda").manual_seed(0)
    cases = [((65_536, 1_000), 1, True), ((1_048_576, 100), 1, True), ((65_536, 1_000), 8, True),
             ((65_536, 1_000), 8, False), ((4_096, 100_000), 32, False)]
    print(f"\nmultinomial on {torch.cuda.get_device_name()} (ms; uniform random weights)")
    print("| input | samples per row | replacement | ours ms | torch.multinomial ms | torch / ours |")
    print("| --- | ---: | --- | ---: | ---: | ---: |")
    for shape, k, replacement in cases:
        w = torch.rand(shape, generator=gen, device="cuda") + 1e-3
        ours = cuda_ms(lambda: torch_wrs.multinomial(w, k, replacement, generator=gen))
        theirs = cuda_ms(lambda: torch.multinomial(w, k, replacement, generator=gen))
        print(f"| {shape[0]:,} x {shape[1]:,} | {k} | {replacement} | {ours:.3f} | {theirs:.3f} | {theirs / ours:.2f}x |")
        del w
        torch.cuda.empty_cache()


def profile_build(n):
    for kind in ("uniform", "power_law"):
        _profile_build(n, kind)


def _profile_build(n, kind):
    """Per-kernel device time of one N-item build (torch.profiler), to see where time goes."""
    w = _weights(kind, (n,), torch.Generator("cuda").manual_seed(0))
    for _ in range(3):
        torch_wrs.alias_table(w, validate=False)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            torch_wrs.alias_table(w, validate=False)
        torch.cuda.synchronize()
    print(f"\nper-kernel device time of alias_table, N = {n:,}, {kind} (mean of 5 builds)")
    for e in sorted(prof.key_averages(), key=lambda e: -e.device_time_total):
        if e.device_time_total > 0:
            print(f"  {e.device_time_total / 5 / 1e3:8.3f} ms  {e.key[:100]}")


def cpu_scaling(n):
    """CPU build at N items: all threads against one thread, same code."""
    w = torch.rand(n, generator=torch.Generator().manual_seed(0)) + 1e-3
    threads = torch.get_num_threads()
    torch_wrs.alias_table(w[: 1 << 20])
    results = {}
    for t in (1, threads):
        torch.set_num_threads(t)
        t0 = time.perf_counter()
        torch_wrs.alias_table(w)
        results[t] = time.perf_counter() - t0
    torch.set_num_threads(threads)
    print(f"\nCPU alias_table, N = {n:,}: 1 thread {results[1]:.2f} s, {threads} threads "
          f"{results[threads]:.2f} s, speed-up {results[1] / results[threads]:.1f}x")


GAMMA_METHODS = ("cheng_ga", "marsaglia_tsang", "ahrens_dieter_gc", "best_xg", "cheng_feast_gkm3", "auto")


def _wall_ms(fn, warmup=3, reps=20):
    """Median wall-clock milliseconds of fn() (which must block until done)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def _other_gammas():
    """cupy.random.gamma and jax.random.gamma where installed: label -> fn(alpha) -> ms."""
    others = {}
    try:
        import cupy

        def cupy_ms(alpha):
            a = cupy.asarray(alpha)
            return cuda_ms(lambda: cupy.random.gamma(a, dtype=a.dtype))

        others["cupy"] = cupy_ms
    except Exception:  # noqa: BLE001  (absent or broken install: skip the column)
        pass
    try:
        import os

        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
        import jax
        import jax.numpy as jnp

        def jax_ms(alpha):
            if alpha.dtype == torch.float64 and not jax.config.jax_enable_x64:
                return float("nan")
            a = jnp.asarray(alpha.cpu().numpy())
            f = jax.jit(lambda key, a: jax.random.gamma(key, a, dtype=a.dtype))
            key = jax.random.PRNGKey(0)
            return _wall_ms(lambda: f(key, a).block_until_ready())

        others["jax (wall)"] = jax_ms
    except Exception:  # noqa: BLE001
        pass
    return others


def gamma_cases(args):
    bw = copy_bandwidth()
    gen = torch.Generator("cuda").manual_seed(0)
    n = 1 << 26
    others = _other_gammas()
    rows = []
    for dtype in (torch.float32, torch.float64):
        for label in ("0.5", "1.0001", "2", "4", "10", "U(0.1,10)"):
            if label.startswith("U"):
                alpha = torch.rand(n, generator=gen, device="cuda", dtype=dtype) * 9.9 + 0.1
            else:
                alpha = torch.full((n,), float(label), device="cuda", dtype=dtype)
            out = torch.empty_like(alpha)
            ms = {m: cuda_ms(lambda: torch_wrs.standard_gamma(alpha, m, validate=False)) for m in GAMMA_METHODS}
            ms["default"] = cuda_ms(lambda: torch_wrs.standard_gamma(alpha))  # what a user gets: validate=True
            ms["torch"] = cuda_ms(lambda: torch._standard_gamma(alpha))
            ms["randn"] = cuda_ms(lambda: torch.randn(n, out=out))
            for name, fn in others.items():
                ms[name] = fn(alpha)
            floor = 2 * alpha.element_size() * n / bw * 1e3  # read alpha, write X
            rows.append((label, str(dtype).replace("torch.", ""), ms, floor))
            del alpha, out
            torch.cuda.empty_cache()
    gs = lambda ms: n / (ms * 1e-3) / 1e9  # noqa: E731
    cols = list(GAMMA_METHODS) + ["default", "torch"] + list(others) + ["randn"]
    print(f"\nstandard_gamma, 2^26 elements, G samples/s on {torch.cuda.get_device_name()} "
          f"(copy bandwidth {bw / 1e12:.2f} TB/s; validate=False except 'default', which is auto with validate=True)")
    print("| alpha | dtype | " + " | ".join(cols) + " | default / torch | validate cost | auto / torch | auto / randn "
          "| floor |")
    print("| --- | --- | " + " | ".join("---:" for _ in cols) + " | ---: | ---: | ---: | ---: | ---: |")
    for label, dtype, ms, floor in rows:
        cells = " | ".join(f"{gs(ms[c]):.0f}" for c in cols)
        print(f"| {label} | {dtype} | {cells} | {ms['torch'] / ms['default']:.2f} | "
              f"{ms['default'] / ms['auto'] - 1:+.1%} | {ms['torch'] / ms['auto']:.2f} | "
              f"{ms['randn'] / ms['auto']:.2f} | {gs(floor):.0f} |")

    print(f"\nDirichlet 65,536 x 1,000 (float32), ms")
    print("| concentration | ours, validate=False | ours, default | torch._sample_dirichlet | torch / ours "
          "| torch / default | floor |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for label in ("0.1", "U(0.1,10)", "1e-3"):
        if label.startswith("U"):
            conc = torch.rand(65_536, 1_000, generator=gen, device="cuda") * 9.9 + 0.1
        else:
            conc = torch.full((65_536, 1_000), float(label), device="cuda")
        ours = cuda_ms(lambda: torch_wrs.dirichlet(conc, validate=False))
        default = cuda_ms(lambda: torch_wrs.dirichlet(conc))
        ref = cuda_ms(lambda: torch._sample_dirichlet(conc))
        floor = 8 * conc.numel() / bw * 1e3
        print(f"| {label} | {ours:.3f} | {default:.3f} | {ref:.3f} | {ref / ours:.2f} | {ref / default:.2f} | {floor:.3f} |")
        del conc
        torch.cuda.empty_cache()


GAMMA_SWEEP_SIZES = (1, 256, 4_096, 65_536, 1 << 20, 1 << 24)
GAMMA_SWEEP_ALPHAS = ("0.5", "2", "U(0.1,10)")
DIRICHLET_SWEEP_SHAPES = ((1, 3), (16, 10), (256, 100), (4_096, 1_000), (65_536, 1_000))
BETA_SWEEP_SIZES = (1, 256, 65_536, 1 << 20)


def _per_call_ms(device, fn, budget_s):
    """Median ms per call of fn() in a loop (the training-loop case: calls back to back,
    timed in batches of about a millisecond, so a small call's time is its launch or
    host cost, not the timer's), 3 to 9 batches within about budget_s."""
    sync, once = _one_call_s(device, fn)
    for _ in range(int(min(1e4, 0.01 / max(once, 1e-7)))):  # 10 ms of warm-up: a small cell after
        fn()                                                # a large one first read 2x (CPU)
    sync()
    calls = max(1, min(1_000, int(1e-3 / max(once, 1e-7))))
    reps = int(max(3, min(9, budget_s / max(once * calls, 1e-6))))
    times = []
    for _ in range(reps):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(calls):
                fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / calls)
        else:
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            times.append((time.perf_counter() - t0) * 1e3 / calls)
    return statistics.median(times)


def _gamma_sweep_cells(device, gen):
    """(op, shape, dtype, parameters, ours(validate), torch's) over the grid, against
    torch._standard_gamma, torch._sample_dirichlet, and Beta as torch.distributions
    samples it (the first entry of a Dirichlet of the stacked pair, stacked beforehand:
    ours stacks inside)."""
    big = 1 << 24 if device == "cuda" else 1 << 22  # the CPU: seconds, not minutes
    dtypes = ("float32", "float64", "bfloat16") if device == "cuda" else ("float32", "float64")  # torch's CPU has no bf16
    for dtype_name in dtypes:
        dtype = getattr(torch, dtype_name)
        for n in (n for n in GAMMA_SWEEP_SIZES if n <= big):
            for label in GAMMA_SWEEP_ALPHAS:
                if label.startswith("U"):
                    a = (torch.rand(n, generator=gen, device=device) * 9.9 + 0.1).to(dtype)
                else:
                    a = torch.full((n,), float(label), device=device, dtype=dtype)
                yield ("standard_gamma", f"{n:,}", dtype_name, label,
                       lambda v, a=a: torch_wrs.standard_gamma(a, validate=v), lambda a=a: torch._standard_gamma(a))
    for dtype_name in ("float32", "float64"):
        dtype = getattr(torch, dtype_name)
        for rows, k in (s for s in DIRICHLET_SWEEP_SHAPES if s[0] * s[1] <= big):
            c = (torch.rand(rows, k, generator=gen, device=device) * 0.9 + 0.1).to(dtype)
            yield ("dirichlet", f"{rows:,} x {k:,}", dtype_name, "U(0.1,1)",
                   lambda v, c=c: torch_wrs.dirichlet(c, validate=v), lambda c=c: torch._sample_dirichlet(c))
        for n in (n for n in BETA_SWEEP_SIZES if n <= big):
            a = (torch.rand(n, generator=gen, device=device) + 0.5).to(dtype)
            b = (torch.rand(n, generator=gen, device=device) + 0.5).to(dtype)
            ab = torch.stack([a, b], -1)
            yield ("beta", f"{n:,}", dtype_name, "U(0.5,1.5)",
                   lambda v, a=a, b=b: torch_wrs.beta(a, b, validate=v),
                   lambda ab=ab: torch._sample_dirichlet(ab).select(-1, 0))


def gamma_sweep(args):
    """standard_gamma, dirichlet and beta against torch over sizes from one element up:
    the default call (validate=True: on CUDA one status read, a host sync, per call) and
    validate=False. Every cell where the default call is slower is marked."""
    device = args.device
    gen = torch.Generator(device).manual_seed(0)
    name = torch.cuda.get_device_name() if device == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    budget = 0.05 if device == "cuda" else 0.1
    rows = []
    for op, shape, dtype, params, ours, theirs in _gamma_sweep_cells(device, gen):
        # Two rounds, ours first then torch first, the better median of each: drift on a
        # shared machine then hits both alike.
        default, unvalidated = (lambda: ours(True)), (lambda: ours(False))
        ms = [_per_call_ms(device, default, budget), _per_call_ms(device, unvalidated, budget)]
        torch_ms = min(_per_call_ms(device, theirs, budget), _per_call_ms(device, theirs, budget))
        ms = [min(ms[0], _per_call_ms(device, default, budget)), min(ms[1], _per_call_ms(device, unvalidated, budget))]
        rows.append((op, shape, dtype, params, ms[0], ms[1], torch_ms))
    lines = [f"gamma sweep on {name}, torch {torch.__version__}: ms per call in a loop (medians); "
             "'default' is validate=True", "",
             "| op | shape | dtype | parameters | ours, default | ours, validate=False | torch | torch / default "
             "| torch / validate=False |",
             "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for op, shape, dtype, params, d, u, t in rows:
        mark = " **slower**" if t < d else ""
        lines.append(f"| {op} | {shape} | {dtype} | {params} | {_fmt_ms(d)} | {_fmt_ms(u)} | {_fmt_ms(t)} | "
                     f"{t / d:.2f}{mark} | {t / u:.2f} |")
    lines.append("")
    for label, col in (("default", 4), ("validate=False", 5)):
        ratios = sorted(r[6] / r[col] for r in rows)
        worst = min(rows, key=lambda r: r[6] / r[col])
        lines.append(f"{label}: {len(rows)} cells, median {statistics.median(ratios):.2f}x torch, minimum "
                     f"{ratios[0]:.2f}x ({worst[0]} {worst[1]} {worst[2]} {worst[3]}), "
                     f"{sum(r < 1 for r in ratios)} slower than torch")
    report = "\n".join(lines)
    print(report)
    if args.out:
        with open(args.out, "w") as f:
            f.write(report + "\n")


def _radix_weights(kind, n, gen):
    if kind in ("uniform", "power_law"):
        return _weights(kind, (n,), gen).double()
    w = table1_weights(n)[kind].cuda()
    return w[torch.randperm(n, generator=gen, device="cuda")] if kind == "4 spikes" else w


def radix_cases(args):
    """Radix forests: build vs torch.cumsum, inverse_cdf vs torch.searchsorted and alias sampling."""
    bw = copy_bandwidth()
    gen = torch.Generator("cuda").manual_seed(0)
    s = args.samples
    cases = [(n, kind) for n in (10**3, 10**6, 10**7, 10**8) for kind in ("uniform", "power_law")]
    cases += [(10**6, kind) for kind in table1_weights(8)]
    build_rows, lookup_rows = [], []
    for n, kind in cases:
        w = _radix_weights(kind, n, gen)
        w32 = w.float()
        r = {"n": n, "kind": kind}
        r["build"] = cuda_ms(lambda: torch_wrs.radix_forest(w, validate=False))
        r["build32"] = cuda_ms(lambda: torch_wrs.radix_forest(w32, validate=False))
        r["cumsum"] = cuda_ms(lambda: torch.cumsum(w, 0))
        r["cumsum32"] = cuda_ms(lambda: torch.cumsum(w32, 0, dtype=torch.float64))
        r["alias_build"] = cuda_ms(lambda: torch_wrs.alias_table(w, validate=False))
        build_rows.append(r)
        forest = torch_wrs.radix_forest(w)
        cdf = torch.cumsum(w, 0)
        cdf /= cdf[-1].clone()
        u = torch.rand(s, device="cuda", dtype=torch.float64, generator=gen)
        u32 = u.float()
        table = torch_wrs.alias_table(w)
        q = {"n": n, "kind": kind}
        q["inverse"] = cuda_ms(lambda: torch_wrs.inverse_cdf(forest, u, validate=False))
        q["inverse32"] = cuda_ms(lambda: torch_wrs.inverse_cdf(forest, u32, validate=False))
        q["searchsorted"] = cuda_ms(lambda: torch.searchsorted(cdf, u), warmup=1, reps=5)
        q["sample"] = cuda_ms(lambda: torch_wrs.radix_forest_sample(forest, s, generator=gen))
        q["alias"] = cuda_ms(lambda: torch_wrs.alias_sample(table, s, generator=gen))
        q["floor"] = 16 * s / bw * 1e3  # read 8-byte u, write 8-byte index
        lookup_rows.append(q)
        del w, w32, forest, cdf, u, u32, table
        torch.cuda.empty_cache()

    print(f"\nradix_forest build on {torch.cuda.get_device_name()} (ms, medians of CUDA events; "
          f"copy bandwidth {bw / 1e12:.2f} TB/s; floor: read 8 + write 8 + 8 + 4 bytes per item)")
    print("| N | weights | ours f64 | torch.cumsum f64 | ours / cumsum | ours f32 | cumsum f32->f64 | ours / cumsum | "
          "alias_table f64 | floor |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in build_rows:
        floor = 28 * r["n"] / bw * 1e3
        print(f"| {r['n']:,} | {r['kind']} | {r['build']:.3f} | {r['cumsum']:.3f} | {r['build'] / r['cumsum']:.2f} | "
              f"{r['build32']:.3f} | {r['cumsum32']:.3f} | {r['build32'] / r['cumsum32']:.2f} | "
              f"{r['alias_build']:.3f} | {floor:.3f} |")
    rate = lambda ms: s / (ms * 1e-3) / 1e9  # noqa: E731
    print(f"\nLookups, {s:,} per case (G lookups/s): inverse_cdf on float64 and float32 u vs torch.searchsorted "
          "(float64 cdf and u); radix_forest_sample vs alias_sample (ordered)")
    print("| N | weights | inverse_cdf f64 | inverse_cdf f32 | torch.searchsorted | inverse / searchsorted | "
          "radix_forest_sample | alias_sample | sample / alias | floor (f64 u) |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for q in lookup_rows:
        print(f"| {q['n']:,} | {q['kind']} | {rate(q['inverse']):.1f} | {rate(q['inverse32']):.1f} | "
              f"{rate(q['searchsorted']):.2f} | {q['searchsorted'] / q['inverse']:.1f}x | {rate(q['sample']):.1f} | "
              f"{rate(q['alias']):.1f} | {q['alias'] / q['sample']:.2f} | {rate(q['floor']):.1f} |")

    print("\nLoads per lookup, the paper's Table 1 distributions (N = 100, 128 cells; guide entry + cdf values "
          "compared): maximum / average / average over 32 lanes")
    print("| distribution | cutpoint + binary search | cutpoint + radix forest |")
    print("| --- | --- | --- |")
    u = torch.rand(1 << 20, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    for kind, w in table1_weights(100).items():
        f = torch_wrs.RadixForest(w)
        cols = []
        for method in ("bisect", "forest"):
            loads = search_loads(f, u, method)[0]
            lanes = loads.view(-1, 32).max(1).values.double().mean().item()
            cols.append(f"{loads.max().item()} / {loads.double().mean().item():.2f} / {lanes:.2f}")
        print(f"| {kind} | {cols[0]} | {cols[1]} |")



# ---- the multinomial sweep ----------------------------------------------------------------

SWEEP_ROWS = (1, 8, 64, 256, 4_096, 65_536, 1 << 20)
SWEEP_CATEGORIES = (4, 18, 100, 1_000, 32_000, 128_256, 1 << 20, 1 << 24, 100_000_000)
SWEEP_SAMPLES = (1, 2, 8, 64, 1_024, 1 << 20, 100_000_000)
SWEEP_DTYPES = ("float32", "bfloat16", "float16", "float64")


def _sweep_limits(device):
    """Largest input (items), output (samples) and row*n for the device's grid."""
    if device == "cuda":
        return {"items": 1 << 28, "samples": 1 << 27}
    return {"items": 1 << 23, "samples": 1 << 20}


def _one_call_s(device, fn):
    """The device's sync, and the seconds of one call of fn() after a first (warm-up)."""
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    fn()
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    return sync, time.perf_counter() - t0


def _time(device, fn, budget_s):
    """Median ms of fn(): CUDA events on the GPU, perf_counter on the CPU; as many
    repetitions (3 to 15) as fit in about budget_s after two warm-up calls."""
    _, once = _one_call_s(device, fn)
    reps = int(max(3, min(15, budget_s / max(once, 1e-6))))
    if device == "cuda":
        return cuda_ms(fn, warmup=0, reps=reps)
    return _wall_ms(fn, warmup=0, reps=reps)


def _cpu_small_pair_ms(ours, theirs, budget):
    """Ours' and torch's ms for a CPU call under a millisecond: per call in a loop, timed in
    batches (_per_call_ms), in two rounds (ours first, then torch first), the better median
    of each, as the gamma sweep times. One call of a few microseconds timed alone is
    mostly the timer and the machine: CI sweeps marked 2-3 us cells at 0.70-0.99x that
    read 1.11-1.24x over 2,001 interleaved calls. None for torch where it raises."""
    ours_ms = _per_call_ms("cpu", ours, budget / 2)
    try:
        theirs_ms = min(_per_call_ms("cpu", theirs, budget / 2), _per_call_ms("cpu", theirs, budget / 2))
    except RuntimeError:  # beyond torch's limits
        theirs_ms = None
    return min(ours_ms, _per_call_ms("cpu", ours, budget / 2)), theirs_ms


def _sweep_cells(device):
    lim = _sweep_limits(device)
    for dtype in SWEEP_DTYPES:
        # float32 takes the whole grid; the other dtypes the samples users draw most.
        samples = SWEEP_SAMPLES if dtype == "float32" else (1, 8, 64)
        for rows in SWEEP_ROWS:
            for n in SWEEP_CATEGORIES:
                if rows * n > lim["items"] or (dtype == "float64" and 2 * rows * n > lim["items"]):
                    continue
                ks = [k for k in samples if rows * k <= lim["samples"]]
                if ks:
                    yield dtype, rows, n, ks


def sweep(args):
    """torch_wrs.multinomial against torch.multinomial over the grid (one process, same
    inputs: uniform random weights + 1e-3, never zero), then sample_logits."""
    device = args.device
    gen = torch.Generator(device).manual_seed(0)
    bw = copy_bandwidth() if device == "cuda" else None
    name = torch.cuda.get_device_name() if device == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    budget = 0.15 if device == "cuda" else 0.3
    cells = []
    asserts = []  # cells where torch.multinomial would hit a device-side assert
    for dtype_name, rows, n, ks in _sweep_cells(device):
        dtype = getattr(torch, dtype_name)
        shape = (n,) if rows == 1 else (rows, n)
        w = (torch.rand(shape, generator=gen, device=device) + 1e-3).to(dtype)
        # torch's CUDA sampler with replacement (k > 1) renormalizes rows in the input dtype:
        # a float16 row summing past 65,504 becomes zeros and trips its device-side assert
        # `cumdist[size - 1] > 0` (seen on the H100 at 1 x 2^20).
        overflows = dtype == torch.float16 and device == "cuda" and w.double().sum(-1).max().item() > 65_504
        for k in ks:
            for replacement in (True, False):
                if not replacement and k > n:
                    continue
                torch_asserts = overflows and replacement and k > 1
                if device == "cuda":  # names the cell should a device-side assert end the process
                    print(f"cell {dtype_name} {rows} x {n} k={k} replacement={replacement}", file=sys.stderr, flush=True)
                ours_fn = lambda: torch_wrs.multinomial(w, k, replacement, generator=gen)  # noqa: E731
                theirs_fn = lambda: torch.multinomial(w, k, replacement, generator=gen)  # noqa: E731
                theirs = None
                if torch_asserts:  # a device-side assert would end the process
                    asserts.append((dtype_name, rows, n, k))
                    ours = _time(device, ours_fn, budget)
                elif device == "cpu" and _one_call_s(device, ours_fn)[1] < 1e-3:
                    ours, theirs = _cpu_small_pair_ms(ours_fn, theirs_fn, budget)
                else:
                    ours = _time(device, ours_fn, budget)
                    try:
                        theirs = _time(device, theirs_fn, budget)
                    except RuntimeError:  # beyond torch's limits (2^24 categories, ...)
                        pass
                floor = None
                if bw is not None:
                    floor = (rows * n * w.element_size() + rows * k * 8) / bw * 1e3
                cells.append({"dtype": dtype_name, "rows": rows, "n": n, "k": k, "replacement": replacement,
                              "ours": ours, "torch": theirs, "floor": floor})
        del w
        if device == "cuda":
            torch.cuda.empty_cache()
    logits_rows = _sweep_logits(device, gen, budget)
    lines = _sweep_report(name, device, bw, cells, logits_rows)
    if asserts:
        lines.insert(3, "torch.multinomial not run (its float16 row sum overflows; device-side assert, which ends "
                        "the CUDA context) in: " + "; ".join(f"{d} {r:,} x {n:,} k = {k:,}" for d, r, n, k in asserts))
    text = "\n".join(lines)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    print(text)


# Cells per class for the contended sweep: with and without replacement, one draw and a
# few, short and long rows.
CONTENDED_CELLS = [(rows, n, k) for rows, n in ((1_024, 100), (256, 1_000), (1_024, 1_000), (64, 32_000), (4, 128_256))
                   for k in (1, 2, 8, 64)]


def _busy_loop():
    """A process that spins until killed: another job wanting a core. Left to the
    scheduler, as a data loader's workers are: busy loops pinned one to a core leave each
    of our threads a fair half of its core and stall nothing."""
    while True:
        pass


def contended_sweep(args):
    """torch_wrs.multinomial against torch.multinomial on the CPU while as many busy-loop
    processes as cores compete for them: how each degrades when the machine is shared. Reports the minimum ratio and any cell slower than torch (target: no cell
    below 0.8x)."""
    import multiprocessing as mp
    import os
    import statistics as st

    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    ctx = mp.get_context("spawn")
    busy = [ctx.Process(target=_busy_loop, daemon=True) for _ in cpus]
    for p in busy:
        p.start()
    try:
        time.sleep(0.5)
        gen = torch.Generator().manual_seed(0)
        cells = []
        for rows, n, k in CONTENDED_CELLS:
            w = torch.rand(rows, n, generator=gen) + 1e-3
            for replacement in (True, False):
                ours = lambda: torch_wrs.multinomial(w, k, replacement, generator=gen)  # noqa: E731
                theirs = lambda: torch.multinomial(w, k, replacement, generator=gen)  # noqa: E731
                # Two interleaved rounds, the better median of each: the busy loops make
                # single calls noisy for both.
                os_, ts = [], []
                for _ in range(2):
                    os_.append(_wall_ms(ours, warmup=2, reps=15))
                    ts.append(_wall_ms(theirs, warmup=2, reps=15))
                cells.append((rows, n, k, replacement, min(os_), min(ts)))
    finally:
        for p in busy:
            p.kill()
            p.join()
    ratios = [t / o for *_, o, t in cells]
    worst = min(cells, key=lambda c: c[5] / c[4])
    lines = [f"multinomial under contention: CPU, {torch.get_num_threads()} threads, {len(cpus)} busy-loop "
             f"processes on {len(cpus)} cores; torch {torch.__version__}", "",
             f"cells: {len(cells)}; torch / ours: median {st.median(ratios):.2f}x, minimum {min(ratios):.2f}x at "
             f"{worst[0]:,} x {worst[1]:,}, k = {worst[2]}, replacement={worst[3]}; below 0.8x in "
             f"{sum(r < 0.8 for r in ratios)} cells, slower than torch in {sum(r < 1 for r in ratios)}", "",
             "| rows | n | k | replacement | ours ms | torch ms | torch / ours |",
             "| ---: | ---: | ---: | --- | ---: | ---: | ---: |"]
    for rows, n, k, replacement, o, t in cells:
        lines.append(f"| {rows:,} | {n:,} | {k} | {replacement} | {_fmt_ms(o)} | {_fmt_ms(t)} | {t / o:.2f}x"
                     + (" SLOWER" if t < o else "") + " |")
    text = "\n".join(lines)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    print(text)


def _sweep_logits(device, gen, budget):
    """sample_logits against softmax + torch.multinomial and the unfused exponential trick."""
    shapes = [(1, 128_256), (8, 32_000), (64, 128_256), (256, 152_064)] if device == "cuda" else [(1, 128_256), (8, 32_000), (64, 128_256)]
    out = []
    for dtype in (torch.float32, torch.bfloat16):
        for rows, n in shapes:
            x = torch.randn(rows, n, generator=gen, device=device).to(dtype) * 3
            ours = _time(device, lambda: torch_wrs.sample_logits(x, temperature=0.8, generator=gen), budget)
            softmax = _time(device, lambda: torch.multinomial(torch.softmax(x / 0.8, -1), 1, generator=gen), budget)

            def exponential_trick():
                e = torch.empty_like(x).exponential_(generator=gen)
                return (x / 0.8 - e.log()).argmax(-1, keepdim=True)

            trick = _time(device, exponential_trick, budget)
            out.append((str(dtype).replace("torch.", ""), rows, n, ours, softmax, trick))
    return out


def _fmt_ms(ms):
    return "n/a" if ms is None else (f"{ms:.3f}" if ms >= 0.01 else f"{ms:.4f}")


def _sweep_report(name, device, bw, cells, logits_rows):
    import statistics as st
    head = f"multinomial sweep on {name}"
    if bw is not None:
        head += f" (copy bandwidth {bw / 1e12:.2f} TB/s; floor: read the input once, write the output once)"
    lines = [head, ""]
    both = [c for c in cells if c["torch"] is not None]
    ratios = [c["torch"] / c["ours"] for c in both]
    losses = [c for c in both if c["torch"] < c["ours"]]
    lines.append(f"cells: {len(cells)} ({len(both)} where torch runs); torch / ours: median {st.median(ratios):.2f}x, "
                 f"minimum {min(ratios):.2f}x, maximum {max(ratios):.2f}x; slower than torch in {len(losses)} cells")

    def klass(title, pick, target):
        sel = [c for c in both if pick(c)]
        if sel:
            worst = min(sel, key=lambda c: c["torch"] / c["ours"])
            lines.append(f"{title}: {len(sel)} cells, torch / ours median {st.median(c['torch'] / c['ours'] for c in sel):.2f}x, "
                         f"minimum {worst['torch'] / worst['ours']:.2f}x at {_cell_name(worst)} (target {target})")

    klass("few long rows, k <= 8 (rows <= 256, n >= 32,000)", lambda c: c["rows"] <= 256 and c["n"] >= 32_000 and c["k"] <= 8, ">= 4x")
    klass("without replacement, k <= 64", lambda c: not c["replacement"] and c["k"] <= 64, ">= 2x")
    if bw is not None:
        sel = [c for c in cells if 8 <= c["rows"] <= 256 and c["n"] >= 32_000 and c["k"] <= 8]
        if sel:
            worst = max(sel, key=lambda c: c["ours"] / (3 * (c["floor"] + 0.010)))
            lines.append(f"few long rows, rows >= 8: worst ours / (floor + 10 us) = "
                         f"{worst['ours'] / (worst['floor'] + 0.010):.2f} at {_cell_name(worst)} (target <= 3)")
    lines += ["", "Cells where ours is slower than torch:" if losses else "No cell where ours is slower than torch.", ""]
    if losses:
        lines += ["| dtype | rows | n | k | replacement | ours ms | torch ms | torch / ours |", "| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: |"]
        for c in losses:
            lines.append(f"| {c['dtype']} | {c['rows']:,} | {c['n']:,} | {c['k']:,} | {c['replacement']} | {_fmt_ms(c['ours'])} | "
                         f"{_fmt_ms(c['torch'])} | {c['torch'] / c['ours']:.2f}x |")
        lines.append("")
    lines += ["sample_logits (temperature 0.8, one draw per row), ms:", "",
              "| dtype | rows | V | ours | softmax + torch.multinomial | exponential trick (unfused) | vs softmax | vs trick |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for dtype, rows, n, ours, softmax, trick in logits_rows:
        lines.append(f"| {dtype} | {rows:,} | {n:,} | {_fmt_ms(ours)} | {_fmt_ms(softmax)} | {_fmt_ms(trick)} | "
                     f"{softmax / ours:.2f}x | {trick / ours:.2f}x |")
    lines += ["", "Every cell (ms; SLOWER marks a loss):", "",
              "| dtype | rows | n | k | replacement | ours | torch | torch / ours | floor | ours / floor |",
              "| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |"]
    for c in cells:
        ratio = "n/a" if c["torch"] is None else f"{c['torch'] / c['ours']:.2f}x" + (" SLOWER" if c["torch"] < c["ours"] else "")
        floor = "n/a" if c["floor"] is None else _fmt_ms(c["floor"])
        over = "n/a" if c["floor"] is None else f"{c['ours'] / c['floor']:.1f}"
        lines.append(f"| {c['dtype']} | {c['rows']:,} | {c['n']:,} | {c['k']:,} | {c['replacement']} | {_fmt_ms(c['ours'])} | "
                     f"{_fmt_ms(c['torch'])} | {ratio} | {floor} | {over} |")
    return lines


def _cell_name(c):
    return f"{c['dtype']} {c['rows']:,} x {c['n']:,}, k = {c['k']:,}, replacement={c['replacement']}"

def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["construction", "sampling", "multinomial", "gamma", "gamma-sweep", "radix",
                                             "sweep", "contended-sweep", "distributed", "llm", "llm-extras", "graph",
                                             "replay"])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="for `sweep` and `gamma-sweep`")
    parser.add_argument("--out", default="", help="the sweeps: also write the report to this file")
    parser.add_argument("--samples", type=int, default=100_000_000, help="draws per case in `sampling` and `radix`")
    parser.add_argument("--cpu-scaling", type=int, default=0, metavar="N",
                        help="also time the CPU build at N items on 1 thread and on all threads")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="also print the per-kernel device time of one N-item build")
    parser.add_argument("--log2-categories", type=int, default=30, help="`distributed`: table size")
    parser.add_argument("--log2-draws", type=int, default=28, help="`distributed`: draws per rank")
    parser.add_argument("--huge-log2-categories", type=int, default=-1,
                        help="`distributed`: the table no GPU holds alone, 2^H categories (default: the most "
                             "that the GPUs' free memory holds; 0: skip)")
    parser.add_argument("--placement", default="auto", choices=["auto", "replicate", "shard"],
                        help="`distributed`: the 2^L-category table's placement (ShardedAliasTable)")
    parser.add_argument("--one-gpu-ranks", type=int, nargs="+", default=[], metavar="P",
                        help="`distributed`: without torchrun, rank 0's work of P ranks on one GPU, no network")
    parser.add_argument("--quick", action="store_true", help="`llm`: a few rows and vocabularies only")
    parser.add_argument("--cuda-graphs", action="store_true",
                        help="`llm`: time each call in a CUDA graph (the default generator) on rows of mixed "
                             "sharpness (even rows peaked, odd rows heavy-tailed); the grid only")
    parser.add_argument("--dtypes", default="float32,bfloat16",
                        help="`llm`: the grid's input dtypes (the float32 part also times from-logits, small calls "
                             "and speculative acceptance), so that a GPU call can take part of the grid")
    parser.add_argument("--controls", default=None, metavar="NAME,...",
                        help="`llm`: time only these controls of the grid (its other tables are left out); "
                             "--merge puts the cells into an earlier report")
    parser.add_argument("--merge", nargs="+", default=[], metavar="REPORT",
                        help="`llm`: join the reports of several --dtypes or --controls calls into --out, a later "
                             "report's cells replacing an earlier one's (no GPU needed)")
    parser.add_argument("--graph-scales", default="21:16,24:8", metavar="S:F,...",
                        help="`graph`: R-MAT graphs of 2^S nodes and F * 2^S edges before symmetrising")
    args = parser.parse_args()
    args.graph_scales = [tuple(int(x) for x in c.split(":")) for c in args.graph_scales.split(",") if c]
    if args.merge:
        if args.what != "llm" or not args.out:
            raise SystemExit("--merge joins `llm` reports and needs --out")
        from .benchmark_llm import merge

        return merge(args.merge, args.out)
    if args.what == "replay":  # the GPU where there is one, and the CPU
        from .benchmark_replay import run

        return run(args)
    cpu_tables = ("sweep", "gamma-sweep", "contended-sweep")
    if args.device == "cpu" and args.what not in cpu_tables:
        raise SystemExit(f"torch_wrs.benchmark {args.what} runs on CUDA only; on the CPU: "
                         f"{' / '.join(cpu_tables)} --device cpu")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"torch_wrs.benchmark {args.what} needs a CUDA device (on the CPU: "
                         f"{' / '.join(cpu_tables)} --device cpu)")
    if args.what == "distributed":
        from .benchmark_distributed import run

        return run(args)
    if args.what == "llm":
        from .benchmark_llm import run

        return run(args)
    if args.what == "llm-extras":
        from .benchmark_llm_extras import run

        return run(args)
    if args.what == "graph":
        from .benchmark_graph import run

        return run(args)
    {"construction": construction, "sampling": sampling, "multinomial": multinomial_cases,
     "gamma": gamma_cases, "gamma-sweep": gamma_sweep, "radix": radix_cases, "sweep": sweep,
     "contended-sweep": contended_sweep}[args.what](args)


if __name__ == "__main__":
    main()
