"""``python -m torch_wrs.benchmark llm``: LLM sampling against FlashInfer's kernels, a
vLLM-style torch path (sort, masks, exponential trick) and the read-once floor, in one
process on one GPU.

FlashInfer is a benchmark-only dependency: point ``FLASHINFER_INCLUDE`` at the
``flashinfer/data/include`` folder of its wheel (default: ``.flashinfer/flashinfer/data/include``
in this repository, git-ignored); ``benchmarks/flashinfer_binding.cu`` is then built
against it, in ``FLASHINFER_BUILD`` (default ``.flashinfer/build``). A build whose source,
headers' folder, flags and torch match is loaded without compiling (minutes on a fresh GPU
machine), so it can be built once and carried with the headers. Without the headers the
other columns are printed.
"""
import hashlib
import importlib.util
import math
import os
import statistics

import torch

import torch_wrs

ROWS = [1, 4, 16, 32, 64, 128, 256, 1024]
VOCABS = [32_000, 128_256, 151_936, 256_000]
CONTROLS = ["none", "top-k 50", "top-p 0.9", "top-k 50 + top-p 0.9", "min-p 0.1", "per-row mixed"]
_HERE = os.path.dirname(os.path.abspath(__file__))
_REPO = os.path.dirname(_HERE)


def flashinfer():
    """The FlashInfer binding (built, or loaded where a matching build exists), or None with
    the reason printed where the headers are missing."""
    inc = os.environ.get("FLASHINFER_INCLUDE", os.path.join(_REPO, ".flashinfer", "flashinfer", "data", "include"))
    if not os.path.exists(os.path.join(inc, "flashinfer", "sampling.cuh")):
        print(f"FlashInfer headers not found at {inc}: its columns are left out")
        return None
    from torch.utils.cpp_extension import load

    flags = ["-O3", "-std=c++17", "--expt-relaxed-constexpr", "-U__CUDA_NO_HALF_OPERATORS__",
             "-U__CUDA_NO_HALF_CONVERSIONS__", "-U__CUDA_NO_HALF2_OPERATORS__", "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
             "-U__CUDA_NO_BFLOAT16_OPERATORS__"]
    source = os.path.join(_REPO, "benchmarks", "flashinfer_binding.cu")
    build = os.environ.get("FLASHINFER_BUILD", os.path.join(_REPO, ".flashinfer", "build"))
    os.makedirs(build, exist_ok=True)
    stamp = hashlib.sha256(repr((flags, torch.__version__, torch.version.cuda)).encode())
    for path in (source, os.path.join(inc, "flashinfer", "sampling.cuh")):
        with open(path, "rb") as fh:
            stamp.update(fh.read())
    stamp = stamp.hexdigest()
    so, stamp_file = os.path.join(build, "wrs_flashinfer_binding.so"), os.path.join(build, "binding.sha256")
    built = os.path.exists(so) and os.path.exists(stamp_file) and open(stamp_file).read() == stamp
    if built:  # built before for this source and torch: no compiler, no lock file to wait on
        spec = importlib.util.spec_from_file_location("wrs_flashinfer_binding", so)
        fi = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(fi)
    else:
        fi = load("wrs_flashinfer_binding", [source], extra_include_paths=[inc], extra_cuda_cflags=flags,
                  build_directory=build, verbose=False)
        with open(stamp_file, "w") as fh:
            fh.write(stamp)
    # Its law on a small row before any timing.
    p = torch.softmax(torch.randn(64, device="cuda") * 2, -1)
    rows = p.expand(1 << 14, -1).contiguous()
    counts = sum(torch.bincount(fi.from_probs(rows, 7, i * 4).long(), minlength=64) for i in range(30)).double()
    n = counts.sum()
    z = ((counts - n * p.double()) / (n * p.double() * (1 - p.double())).sqrt()).abs().max().item()
    assert z < 6, f"FlashInfer binding's draws are off the law (max |z| = {z:.1f})"
    return fi


def timed(fn, calls=10, reps=15):
    """Median ms per call over `reps` CUDA-event timings of `calls` back-to-back calls (an
    eager loop's throughput), after warm-up."""
    for _ in range(3):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    once = start.elapsed_time(end)
    calls = max(1, min(calls, int(20 / max(once, 1e-3))))
    reps = max(3, min(reps, int(400 / max(once * calls, 1e-3))))
    times = []
    for _ in range(reps):
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / calls)
    return statistics.median(times)


def graphed(fn, calls=20, reps=15):
    """Median ms per call of `calls` calls captured in one CUDA graph: the GPU's time alone,
    without the host's per-call work that an eager loop also pays."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    g.replay()
    times = []
    for _ in range(reps):
        start.record()
        g.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / calls)
    return statistics.median(times)


def _latency_table(fi, gen):
    """Eager against graph-replayed time for small calls: what the host adds per call."""
    lines = ["Small calls, eager and in a CUDA graph (float32 probabilities): ms per call", "",
             "| rows x vocab | control | ours eager | ours graph | FlashInfer eager | FlashInfer graph |",
             "|---|---|---:|---:|---:|---:|"]
    for b, v in ((1, 32_000), (32, 32_000), (1, 128_256), (32, 128_256)):
        probs = torch.softmax(_llm_logits(b, v, torch.float32, gen), -1)
        for name in ("none", "top-k 50", "top-k 50 + top-p 0.9"):
            kw = _controls(name, b, "cuda")
            ours = lambda: torch_wrs.sample_probs(probs, **kw)  # noqa: E731  (the default generator: capturable)
            f = _fi_call(fi, name, probs, kw)
            row = [timed(ours), graphed(ours)]
            try:
                row += [timed(f), graphed(f)] if f is not None else [None, None]
            except RuntimeError:  # a binding that cannot be captured
                row += [None, None]
            lines.append(f"| {b:,} x {v:,} | {name} | " + " | ".join(_fmt(t) for t in row) + " |")
            print(lines[-1], flush=True)
    return lines


def torch_native(probs, k=None, p=None, min_p=None):
    """The vLLM-style torch path: sort, top-k / top-p / min-p masks, exponential trick."""
    srt, idx = probs.sort(dim=-1, descending=True)
    if k is not None:
        kk = k if isinstance(k, torch.Tensor) else torch.full((probs.shape[0],), k, device=probs.device)
        srt = srt.masked_fill(torch.arange(probs.shape[-1], device=probs.device) >= kk[:, None], 0)
    if p is not None:
        pp = p if isinstance(p, torch.Tensor) else torch.full((probs.shape[0],), p, device=probs.device)
        cum = (srt / srt.sum(-1, keepdim=True)).cumsum(-1)
        srt = srt.masked_fill((cum - srt / srt.sum(-1, keepdim=True)) >= pp[:, None], 0)
    if min_p is not None:
        srt = srt.masked_fill(srt < min_p * srt[:, :1], 0)
    q = torch.empty_like(srt).exponential_()
    return idx.gather(-1, (srt / q).argmax(-1, keepdim=True))


def _controls(name, b, device):
    g = torch.Generator(device).manual_seed(b)
    if name == "none":
        return {}
    if name == "top-k 50":
        return dict(top_k=50)
    if name == "top-p 0.9":
        return dict(top_p=0.9)
    if name == "top-k 50 + top-p 0.9":
        return dict(top_k=50, top_p=0.9)
    if name == "min-p 0.1":
        return dict(min_p=0.1)
    return dict(top_k=torch.randint(20, 101, (b,), device=device, generator=g),
                top_p=torch.rand(b, device=device, generator=g) * 0.15 + 0.8)


def _fi_call(fi, name, probs, kw):
    if fi is None:
        return None
    if name == "none":
        return lambda: fi.from_probs(probs, 1, 0)
    if name == "top-k 50":
        return lambda: fi.top_k(probs, 50, 1, 0)
    if name == "top-p 0.9":
        return lambda: fi.top_p(probs, 0.9, 1, 0)
    if name == "top-k 50 + top-p 0.9":
        return lambda: fi.top_k_top_p(probs, 50, 0.9, None, None, 1, 0)
    if name == "min-p 0.1":
        return lambda: fi.min_p(probs, 0.1, 1, 0)
    k, p = kw["top_k"].int(), kw["top_p"].float()
    return lambda: fi.top_k_top_p(probs, 0, 1.0, k, p, 1, 0)


def _llm_logits(b, v, dtype, gen, mixed=False):
    """LLM-like logits: a heavy tail (std 2) plus 200 strong candidates; with `mixed`, even
    rows are peaked instead (8 candidates 14-17 above unit noise: a top-p 0.9 set of a few
    tokens)."""
    x = torch.randn(b, v, device="cuda", generator=gen) * 2
    x[:, :200] += torch.rand(b, 200, device="cuda", generator=gen) * 8
    if mixed:
        peaked = torch.randn(b, v, device="cuda", generator=gen)
        peaked[:, :8] += 14 + torch.rand(b, 8, device="cuda", generator=gen) * 3
        x = torch.where((torch.arange(b, device="cuda") % 2 == 0)[:, None], peaked, x)
    return x[:, torch.randperm(v, device="cuda", generator=gen)].to(dtype)


def run(args):
    dev = torch.cuda.get_device_name()
    bw = _bandwidth()
    fi = flashinfer()
    gen = torch.Generator("cuda").manual_seed(0)
    rows = ROWS if not args.quick else [1, 32, 256]
    vocabs = VOCABS if not args.quick else [32_000, 128_256]
    graphs = getattr(args, "cuda_graphs", False)
    controls = args.controls.split(",") if getattr(args, "controls", None) else CONTROLS
    if not set(controls) <= set(CONTROLS):
        raise SystemExit(f"--controls: a comma-separated subset of {', '.join(CONTROLS)}; got {args.controls!r}")
    clock = graphed if graphs else timed
    draw_gen = None if graphs else gen  # capture takes the default generator
    how = ("calls captured in CUDA graphs, medians; rows of mixed sharpness" if graphs
           else "CUDA events over back-to-back calls, medians")
    lines = [f"LLM sampling on {dev}, torch {torch.__version__}, CUDA {torch.version.cuda}; ms per call "
             f"({how}); floor: one read of the input at the measured "
             f"copy bandwidth ({bw / 1e12:.2f} TB/s). FlashInfer reads float32 probabilities.", "",
             "| control | dtype | rows x vocab | ours | ours + log-probs | FlashInfer | torch (sort) | floor | "
             "x FlashInfer | x torch |", "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    results = []
    names = args.dtypes.split(",")
    if not set(names) <= {"float32", "bfloat16", "float16"}:
        raise SystemExit(f"--dtypes: float32, bfloat16 or float16, comma-separated; got {args.dtypes!r}")
    dtypes = [getattr(torch, name) for name in names]
    for dtype in dtypes:
        for v in vocabs:
            for b in rows:
                logits = _llm_logits(b, v, dtype, gen, mixed=graphs)
                probs = torch.softmax(logits.float(), -1).to(dtype)
                probs32 = probs.float()
                floor = b * v * probs.element_size() / bw * 1e3
                for name in controls:
                    kw = _controls(name, b, "cuda")
                    ours = clock(lambda: torch_wrs.sample_probs(probs, generator=draw_gen, **kw))
                    ours_lp = clock(lambda: torch_wrs.sample_probs(probs, generator=draw_gen, return_logprobs="raw",
                                                                   **kw))
                    f = _fi_call(fi, name, probs32, kw)
                    fi_ms = _maybe(clock, f) if f is not None and dtype == torch.float32 else None
                    tn_kw = {"k": kw.get("top_k"), "p": kw.get("top_p"), "min_p": kw.get("min_p")}
                    tn = _maybe(clock, lambda: torch_native(probs32, **tn_kw), calls=2, reps=5) \
                        if b * v <= 2**28 else None
                    results.append(dict(control=name, dtype=str(dtype).replace("torch.", ""), b=b, v=v, ours=ours,
                                        ours_lp=ours_lp, fi=fi_ms, torch=tn, floor=floor))
                    r = results[-1]
                    lines.append(f"| {name} | {r['dtype']} | {b:,} x {v:,} | {ours:.4f} | {ours_lp:.4f} | "
                                 f"{_fmt(fi_ms)} | {_fmt(tn)} | {floor:.4f} | {_ratio(fi_ms, ours)} | {_ratio(tn, ours)} |")
                    print(lines[-1], flush=True)
    if torch.float32 in dtypes and not graphs and controls == CONTROLS:  # a part of the grid leaves these out
        lines += ["", *_logits_table(fi, gen, rows, vocabs), "", *_latency_table(fi, gen), "", *_speculative_table(fi, gen)]
    lines += ["", *_summary(results)]
    text = "\n".join(lines)
    print("\n".join(_summary(results)))
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text + "\n")


def _logits_table(fi, gen, rows, vocabs):
    lines = ["From logits (float32, temperature 1): ms per call", "",
             "| rows x vocab | ours | FlashInfer `sampling_from_logits` | x FlashInfer | ours, top-k 50 + top-p 0.9 with seeds | seeds / scalar controls |",
             "|---|---:|---:|---:|---:|---:|"]
    for v in vocabs:
        for b in rows:
            x = _llm_logits(b, v, torch.float32, gen)
            seeds = torch.arange(b, device="cuda")
            ours = timed(lambda: torch_wrs.sample_logits(x, generator=gen))
            seeded = timed(lambda: torch_wrs.sample_logits(x, seeds=seeds, top_k=50, top_p=0.9))
            scalar = timed(lambda: torch_wrs.sample_logits(x, generator=gen, top_k=50, top_p=0.9))
            f = timed(lambda: fi.from_logits(x, 1, 0)) if fi is not None else None
            lines.append(f"| {b:,} x {v:,} | {ours:.4f} | {_fmt(f)} | {_ratio(f, ours)} | {seeded:.4f} | "
                         f"{seeded / scalar:.2f} |")
            print(lines[-1], flush=True)
    return lines


def _speculative_table(fi, gen):
    v = 128_256
    lines = [f"Speculative acceptance (V = {v:,}, float32): ms per call", "",
             "| B | S | ours | FlashInfer `chain_speculative_sampling` | x FlashInfer |", "|---:|---:|---:|---:|---:|"]
    for b in (1, 16, 64, 256):
        for s in (1, 4, 8):
            d = torch.softmax(_llm_logits(b * s, v, torch.float32, gen), -1).view(b, s, v)
            t = torch.softmax(_llm_logits(b * (s + 1), v, torch.float32, gen), -1).view(b, s + 1, v)
            tok = torch.multinomial(d.view(-1, v), 1).view(b, s)
            ours = timed(lambda: torch_wrs.speculative_accept(d, tok, t, generator=gen))
            f = timed(lambda: fi.chain_speculative(d, tok.int(), t, 1, 0)) if fi is not None else None
            lines.append(f"| {b} | {s} | {ours:.4f} | {_fmt(f)} | {_ratio(f, ours)} |")
            print(lines[-1], flush=True)
    return lines


def _summary(results):
    lines = ["Per control: FlashInfer / ours (float32; median, minimum and the cells where we lose), "
             "then the torch sort path / ours (every dtype; median, minimum):", ""]
    for name in CONTROLS:
        parts = []
        rs = [r["fi"] / r["ours"] for r in results if r["control"] == name and r["fi"]]
        if rs:
            lose = [f"{r['b']}x{r['v']}" for r in results if r["control"] == name and r["fi"] and r["fi"] < r["ours"]]
            parts.append(f"median {statistics.median(rs):.2f}x, min {min(rs):.2f}x; slower in {len(lose)} of "
                         f"{len(rs)}: {', '.join(lose) or 'none'}")
        tn = [r["torch"] / r["ours"] for r in results if r["control"] == name and r["torch"]]
        if tn:
            parts.append(f"vs torch sort path: median {statistics.median(tn):.1f}x, min {min(tn):.1f}x")
        if parts:
            lines.append(f"- {name}: " + "; ".join(parts))
    lp = [r["ours_lp"] / r["ours"] for r in results]
    lines.append(f"- log-probs cost: median {statistics.median(lp):.3f}x, max {max(lp):.3f}x of the plain call")
    plain = {(r["dtype"], r["b"], r["v"]): r["ours"] for r in results if r["control"] == "none"}
    ctl = [r["ours"] / plain[(r["dtype"], r["b"], r["v"])] for r in results
           if r["control"] != "none" and (r["dtype"], r["b"], r["v"]) in plain]  # a part of the grid may lack "none"
    if ctl:
        lines.append(f"- a control over our plain sampling: median {statistics.median(ctl):.2f}x, max {max(ctl):.2f}x")
    return lines


def merge(paths, out):
    """One report from the reports of several ``--dtypes`` or ``--controls`` calls (``--merge
    A.md B.md --out C.md``, no GPU needed): the grid's rows of each in one table, a later
    report's cell replacing an earlier one's, the first full float32 report's other tables,
    and the summary over every row."""
    def num(cell):
        return float(cell) if cell else None

    head, cells, rest, best = [], {}, [], None
    for path in paths:
        with open(path) as fh:
            lines = fh.read().split("\n")
        start = next(i for i, line in enumerate(lines) if line.startswith("| control | dtype |"))
        end = next(i for i in range(start, len(lines)) if not lines[i].startswith("|"))
        body = lines[start + 2:end]
        for line in body:
            c = [x.strip() for x in line.strip("|").split("|")]
            b, v = (int(x.replace(",", "")) for x in c[2].split(" x "))
            cells[(c[1], v, b, c[0])] = (line, dict(control=c[0], dtype=c[1], b=b, v=v, ours=float(c[3]),
                                                     ours_lp=float(c[4]), fi=num(c[5]), torch=num(c[6])))
        summary = next((i for i in range(end, len(lines)) if lines[i].startswith(("Against FlashInfer", "Per control"))),
                       len(lines))
        f32 = any("| float32 |" in line for line in body)
        full = any(line.startswith("|") for line in lines[end:summary])  # with the other tables
        rank = (not (f32 and full), not f32)
        if not head or rank < best:  # the first full float32 report's head and other tables
            head, rest, best = lines[:start + 2], lines[end:summary], rank
    order = {name: i for i, name in enumerate(CONTROLS)}  # the grid's order: dtype, vocabulary, rows, control
    keys = sorted(cells, key=lambda k: (k[0] != "float32", k[0], k[1], k[2], order.get(k[3], len(order))))
    rows, results = [cells[k][0] for k in keys], [cells[k][1] for k in keys]
    text = "\n".join(head + rows + rest + _summary(results))
    with open(out, "w") as fh:
        fh.write(text + "\n")
    print("\n".join(_summary(results)))


def _maybe(clock, fn, **kw):
    """clock(fn), or None where fn cannot be captured in a CUDA graph (its cell is left empty)."""
    try:
        return clock(fn, **kw)
    except RuntimeError as e:
        print(f"left out (not capturable): {e}".splitlines()[0], flush=True)
        torch.cuda.synchronize()
        return None


def _fmt(x):
    return "" if x is None else f"{x:.4f}"


def _ratio(a, b):
    return "" if a is None else f"{a / b:.2f}x"


def _bandwidth():
    src = torch.empty(1 << 29, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    ms = timed(lambda: dst.copy_(src), calls=1, reps=10)
    return 2 * src.numel() / (ms * 1e-3)
