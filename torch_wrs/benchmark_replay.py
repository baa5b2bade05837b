"""`python -m torch_wrs.benchmark replay`: prioritized replay against what users run
otherwise, side by side in one process.

A step is what a PER training loop does: sample n slots with their importance weights,
write n new priorities at the drawn slots, insert m new items at the largest priority
(round robin). alpha 0.6, beta 0.4, lognormal priorities in every slot. The controls:
TorchRL's PrioritizedSampler (its CUDA and CPU segment trees; where the wheel's compiled
extension does not load, its `csrc` sources are built with torch.utils.cpp_extension.load)
and `cumsum` + `searchsorted` rebuilt every step (TD7/LAP's method, in torch). Medians and
p99 of CUDA events (host clocks on the CPU) after warm-up.
"""
import datetime
import os
import statistics
import time

import torch

import torch_wrs

from .benchmark import captured, copy_bandwidth

ALPHA, BETA = 0.6, 0.4
CAPACITIES = (1 << 17, 1 << 20, 10_000_000)
STEPS = ((256, 16), (4096, 1600), (65536, 1600))


def torchrl_sampler(cuda):
    """(TorchRL's PrioritizedSampler class with working trees, how they were had) or (None, why)."""
    try:
        import torchrl
        import torchrl.data.replay_buffers.samplers.prioritized as pr
    except Exception as e:  # noqa: BLE001  (any import failure means no control)
        return None, f"torchrl not importable ({type(e).__name__})"
    if pr.SumSegmentTreeFp32 is not None and (not cuda or pr.CudaSumSegmentTreeFp32 is not None):
        return pr.PrioritizedSampler, f"torchrl {torchrl.__version__}, its wheel's extension"
    from torch.utils import cpp_extension

    src = os.path.join(os.path.dirname(torchrl.__file__), "csrc")
    sources = [os.path.join(src, f) for f in ("pybind.cpp", "utils.cpp")]
    flags = ["-O3"] + (["-DWITH_CUDA"] if cuda else [])
    if cuda:
        sources.append(os.path.join(src, "cuda_segment_tree.cu"))
    try:
        mod = cpp_extension.load("_torchrl", sources, extra_cflags=flags, extra_cuda_cflags=flags, with_cuda=cuda)
    except Exception as e:  # noqa: BLE001
        return None, f"torchrl {torchrl.__version__}: its csrc did not build ({type(e).__name__})"
    for kind in ("Sum", "Min"):
        for fp in ("Fp32", "Fp64"):
            setattr(pr, f"{kind}SegmentTree{fp}", getattr(mod, f"{kind}SegmentTree{fp}"))
            if cuda:
                setattr(pr, f"Cuda{kind}SegmentTree{fp}", getattr(mod, f"Cuda{kind}SegmentTree{fp}"))
    return pr.PrioritizedSampler, f"torchrl {torchrl.__version__}, trees built from its csrc (cpp_extension.load)"


class _Storage:
    """What TorchRL's sampler reads of a storage: its length, ndim and device."""

    def __init__(self, n, device):
        self.n, self.ndim, self.device = n, 1, device

    def __len__(self):
        return self.n


def _times_cuda(fn, warmup=5, reps=30, inner=10):
    """Microseconds a call: `inner` calls back to back between two events, so the GPU's time
    (or the host's, where launching is slower) is measured, not one launch's latency."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(inner):
            fn()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) * 1e3 / inner)
    return _stats(out)


def _times_cpu(fn, warmup=5, reps=50):
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e6)
    return _stats(out)


def _stats(us):
    us = sorted(us)
    return statistics.median(us), us[min(len(us) - 1, int(0.99 * len(us)))]


def _graph(fn, steps=None):
    """fn captured in a CUDA graph; `steps` draws its insert slots from a device cursor meanwhile."""
    if steps is not None:
        steps.capturing = True
    replay = captured(fn)
    if steps is not None:
        steps.capturing = False
    return replay


def _priorities(n, device, seed):
    g = torch.Generator(device).manual_seed(seed)
    return torch.exp(1.5 * torch.randn(n, generator=g, device=device)) + 1e-3


class _Steps:
    """One step of each method on `device`, over the same capacity and stream of priorities."""

    def __init__(self, capacity, device, torchrl_cls):
        self.capacity, self.device = capacity, device
        p = _priorities(capacity, device, 0)
        self.td = _priorities(65536, device, 1)
        self.cursor = torch.zeros((), dtype=torch.int64, device=device)
        self.ring = [(torch.arange(m, device=device) + j * m) % capacity for m in (16, 1600) for j in range(8)]
        self.turn = 0
        self.capturing = False
        self.ours = torch_wrs.PrioritySampler(capacity, alpha=ALPHA, device=device, validate=False)
        self.ours.update_(torch.arange(capacity, device=device), p)
        self.raw = p.clone()
        self.rl = None
        if torchrl_cls is not None:
            self.rl = torchrl_cls(capacity, ALPHA, BETA, device=device if device.type == "cuda" else None)
            self.storage = _Storage(capacity, device)
            self.rl.update_priority(torch.arange(capacity, device=device), p)

    def _new(self, m):
        """The next m slots, round robin: from a ring made beforehand, or while capturing a
        CUDA graph from a device cursor."""
        if not self.capturing:
            self.turn += 1
            return self.ring[(0 if m == 16 else 8) + self.turn % 8]
        new = (self.cursor + torch.arange(m, device=self.device)).remainder_(self.capacity)
        self.cursor.add_(m)
        return new

    def ours_step(self, n, m):
        index, prob = self.ours.sample(n)
        w = self.ours.weights(prob, BETA)
        self.ours.update_(index, self.td[:n])
        self.ours.insert_(self._new(m))
        return w

    def torchrl_step(self, n, m):
        index, info = self.rl.sample(self.storage, n)
        self.rl.update_priority(index, self.td[:n])
        self.rl.mark_update(self._new(m))
        return info

    def cumsum_step(self, n, m):
        t = self.raw.pow(ALPHA)
        cdf = torch.cumsum(t, 0, dtype=torch.float64)
        total = cdf[-1]
        index = torch.searchsorted(cdf, torch.rand(n, dtype=torch.float64, device=self.device) * total, right=True)
        index.clamp_(max=self.capacity - 1)
        w = (t[index] / t.min()).pow(-BETA)
        self.raw[index] = self.td[:n]
        self.raw[self._new(m)] = self.raw.max()
        return w


def _profile(what, fn):
    """Prints the kernels of ten steps and their device time (to the log, not the report)."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            fn()
        torch.cuda.synchronize()
    print(f"-- kernels of ten steps, {what}")
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=12))


def _row(cells):
    return "| " + " | ".join(cells) + " |"


def _us(x):
    return f"{x[0]:,.1f} / {x[1]:,.1f}"


def gpu_section(lines, summary, rl_cuda):
    bandwidth = copy_bandwidth()
    lines += ["\n## A full step on the GPU (us, median / p99)\n",
              "Eager: one step after another from Python (the host's launches are the limit for small "
              "steps). CUDA graph: the step captured once and replayed.\n",
              "| capacity | n | m | ours, eager | ours, CUDA graph | TorchRL CUDA | cumsum + searchsorted, eager | "
              "cumsum + searchsorted, CUDA graph | vs TorchRL | vs cumsum, eager / graph |",
              "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    sample_rows = []
    gpu_256 = None
    for capacity in CAPACITIES:
        s = _Steps(capacity, torch.device("cuda"), rl_cuda)
        for n, m in STEPS:
            eager = _times_cuda(lambda: s.ours_step(n, m))
            graph = _times_cuda(_graph(lambda: s.ours_step(n, m), s), inner=20)
            rl = _times_cuda(lambda: s.torchrl_step(n, m), reps=10, inner=3) if s.rl is not None else None
            cs = _times_cuda(lambda: s.cumsum_step(n, m))
            cs_graph = _times_cuda(_graph(lambda: s.cumsum_step(n, m), s), inner=20)
            vs_rl = rl[0] / eager[0] if rl else float("nan")
            lines.append(_row([f"{capacity:,}", f"{n:,}", f"{m:,}", _us(eager), _us(graph), _us(rl) if rl else "-",
                               _us(cs), _us(cs_graph), f"{vs_rl:.1f}x",
                               f"{cs[0] / eager[0]:.1f}x / {cs_graph[0] / graph[0]:.1f}x"]))
            if rl and capacity >= 1 << 20:
                summary.append((f"full step vs TorchRL CUDA, {capacity:,}, n = {n:,}", ">= 10x", f"{vs_rl:.1f}x",
                                vs_rl >= 10))
            if (capacity, n) in ((1 << 20, 256), (10_000_000, 65536)):
                _profile(f"{capacity:,}, n = {n:,}, m = {m:,}", lambda: s.ours_step(n, m))
            if capacity == 1 << 20:
                summary.append((f"vs cumsum + searchsorted, 2^20, n = {n:,} (eager / CUDA graph)", ">= 5x",
                                f"{cs[0] / eager[0]:.1f}x / {cs_graph[0] / graph[0]:.1f}x",
                                min(cs[0] / eager[0], cs_graph[0] / graph[0]) >= 5))
                if n == 256:
                    summary.append(("2^20, n = 256, whole step in a CUDA graph", "<= 30 us", f"{graph[0]:.1f} us",
                                    graph[0] <= 30))
                    gpu_256 = (eager, graph)
        levels, c = 1, -(-capacity // 32)
        while c > 1:
            levels, c = levels + 1, -(-c // 32)
        for n in (256, 65536):
            eager = _times_cuda(lambda: s.ours.sample(n))
            graph = _times_cuda(_graph(lambda: s.ours.sample(n)), inner=20)
            floor = n * levels * 256 / bandwidth * 1e6
            sample_rows.append(_row([f"{capacity:,}", f"{n:,}", _us(eager), _us(graph), f"{floor:.1f}"]))
            if capacity == 10_000_000 and n == 65536:
                summary.append(("10M, sample 65,536 (CUDA graph)", "<= 50 us", f"{graph[0]:.1f} us", graph[0] <= 50))
        del s
        torch.cuda.empty_cache()
    lines += ["\n## Sampling alone (us, median / p99)\n",
              "The floor: each draw reads 256 bytes a level at the copy bandwidth "
              f"({bandwidth / 1e12:.2f} TB/s).\n",
              "| capacity | n | eager | CUDA graph | floor |", "| ---: | ---: | ---: | ---: | ---: |"] + sample_rows
    return gpu_256


def cpu_section(lines, summary, rl_cpu, gpu_256):
    torch.set_num_threads(max(1, torch.get_num_threads()))
    s = _Steps(1 << 20, torch.device("cpu"), rl_cpu)
    n, m = 256, 16
    ours = _times_cpu(lambda: s.ours_step(n, m))
    rl = _times_cpu(lambda: s.torchrl_step(n, m)) if s.rl is not None else None
    cs = _times_cpu(lambda: s.cumsum_step(n, m), reps=10)
    lines += [f"\n## A full step on the CPU (us, median / p99; {torch.get_num_threads()} threads)\n",
              "| capacity | n | m | ours | TorchRL CPU | cumsum + searchsorted | vs TorchRL |",
              "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
              _row(["1,048,576", "256", "16", _us(ours), _us(rl) if rl else "-", _us(cs),
                    f"{rl[0] / ours[0]:.1f}x" if rl else "-"])]
    if rl:
        summary.append(("CPU, 2^20, n = 256: ours against TorchRL's CPU trees", ">= 3x", f"{rl[0] / ours[0]:.1f}x",
                        rl[0] / ours[0] >= 3))
        if gpu_256 is not None:
            eager, graph = gpu_256
            summary.append(("2^20, n = 256: our GPU step against TorchRL's CPU step (eager / CUDA graph)", ">= 30x",
                            f"{rl[0] / eager[0]:.1f}x / {rl[0] / graph[0]:.1f}x", rl[0] / eager[0] >= 30))


def run(args):
    cuda = torch.cuda.is_available()
    rl_cuda, how_cuda = torchrl_sampler(True) if cuda else (None, "")
    rl_cpu, how_cpu = torchrl_sampler(False) if not cuda else (rl_cuda, how_cuda)
    where = torch.cuda.get_device_properties(0).name if cuda else "the CPU"
    lines = [f"# Prioritized replay on {where}\n",
             f"torch {torch.__version__.split('+')[0]}" + (f", CUDA {torch.version.cuda}" if cuda else "") +
             f", {datetime.date.today().isoformat()}. `python -m torch_wrs.benchmark replay`. "
             f"TorchRL: {how_cuda or how_cpu}. alpha {ALPHA}, beta {BETA}; a step samples n, updates those n, "
             "inserts m at the largest priority."]
    summary = []
    gpu_256 = gpu_section(lines, summary, rl_cuda) if cuda else None
    cpu_section(lines, summary, rl_cpu, gpu_256)
    lines += ["\n## Targets\n", "| target | wanted | measured | met |", "| --- | --- | --- | --- |"]
    lines += [_row([what, want, got, "yes" if ok else "**no**"]) for what, want, got, ok in summary]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
