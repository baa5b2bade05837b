"""Profiling drivers for a GPU machine (not part of the test suite).

    python3 scripts/profile_cases.py gamma      # one call per case, for ncu to capture
    python3 scripts/profile_cases.py anatomy    # where a small multinomial call's host time goes
    python3 scripts/profile_cases.py gamma_sizes # standard_gamma vs torch at 2^24 and 2^26, twice
    python3 scripts/profile_cases.py topk        # kernel times of draws without replacement, k = 64
    python3 scripts/profile_cases.py race        # the race (top-k kernel) against the inverse CDF, per shape
    python3 scripts/profile_cases.py gamma_validate # what validate=True costs, kernel and call
    python3 scripts/profile_cases.py many        # many draws with replacement: ours, alias tables, torch
    python3 scripts/profile_cases.py tiny        # one draw from many rows of a few items, per method

`gamma` runs torch_wrs.standard_gamma and torch._standard_gamma once per (dtype, alpha),
for ncu (which replays each kernel) to see one launch of each.
`anatomy` times a few LLM-decode-shaped calls (CUDA events, medians) against the
floors a synchronizing call cannot go under, and prints torch.profiler's CPU-side table.
"""
import sys

import torch

import torch_wrs
from torch_wrs.benchmark import cuda_ms


def event_us(fn, reps=200, warmup=20):
    """Median microseconds of fn() over CUDA-event timings (the benchmark's timer)."""
    return cuda_ms(fn, warmup=warmup, reps=reps) * 1e3


def gamma():
    n = 1 << 24
    for dtype in (torch.float64, torch.float32):
        for a in (1.0001, 2.0):
            alpha = torch.full((n,), a, device="cuda", dtype=dtype)
            print(f"launching {dtype} alpha={a}: ours, then torch", flush=True)
            torch_wrs.standard_gamma(alpha, validate=False)
            torch._standard_gamma(alpha)
            torch.cuda.synchronize()


def gamma_sizes():
    """Is the ratio to torch the same at the size ncu profiles and at the benchmark's?"""
    print("| n | dtype | alpha | round | ours validate=False G/s | ours default G/s | torch G/s |")
    print("| --- | --- | --- | --- | ---: | ---: | ---: |")
    for log2n in (24, 26):
        n = 1 << log2n
        for dtype in (torch.float32, torch.float64):
            for a in (1.0001, 2.0):
                alpha = torch.full((n,), a, device="cuda", dtype=dtype)
                for rnd in range(2):
                    ours = event_us(lambda: torch_wrs.standard_gamma(alpha, validate=False), reps=20, warmup=3)
                    default = event_us(lambda: torch_wrs.standard_gamma(alpha), reps=20, warmup=3)
                    ref = event_us(lambda: torch._standard_gamma(alpha), reps=20, warmup=3)
                    print(f"| 2^{log2n} | {str(dtype)[6:]} | {a} | {rnd} | {n / ours / 1e3:.0f} | "
                          f"{n / default / 1e3:.0f} | {n / ref / 1e3:.0f} |")


def topk():
    """Per-kernel device time (torch.profiler) of multinomial without replacement, k = 64."""
    gen = torch.Generator("cuda").manual_seed(0)
    for rows, n, dtype in ((64, 128_256, torch.bfloat16), (65_536, 1_000, torch.float32), (1, 1 << 24, torch.bfloat16),
                           (8, 1 << 20, torch.float32)):
        x = (torch.rand(rows, n, generator=gen, device="cuda") + 1e-3).to(dtype)
        call = lambda: torch_wrs.multinomial(x, 64, False, generator=gen)  # noqa: E731
        wall = event_us(call, reps=20, warmup=3)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                call()
            torch.cuda.synchronize()
        print(f"\n{rows} x {n:,} {str(dtype)[6:]}, k = 64: {wall:.1f} us per call (events); kernels, us per call:")
        for e in sorted(prof.key_averages(), key=lambda e: -e.device_time_total):
            if e.device_time_total > 0:
                print(f"  {e.device_time_total / 5:9.1f}  {e.key[:90]}")


def anatomy():
    gen = torch.Generator("cuda").manual_seed(0)
    op = torch.ops.wrs.multinomial.default
    print(f"{torch.cuda.get_device_name()}: microseconds per call (CUDA-event medians)")
    print("| case | us |")
    print("| --- | ---: |")
    for rows, n, dtype in ((1, 128_256, torch.float32), (64, 128_256, torch.bfloat16), (8, 32_000, torch.float32)):
        x = (torch.rand(rows, n, generator=gen, device="cuda") + 1e-3).to(dtype)
        cases = {
            "torch.empty(1)": lambda: torch.empty(1, device="cuda"),
            "x.sum() (launch only)": lambda: x.sum(),
            "x.sum().item() (launch + sync)": lambda: x.sum().item(),
            "torch.multinomial k=1": lambda: torch.multinomial(x, 1, True, generator=gen),
            "torch.multinomial k=8": lambda: torch.multinomial(x, 8, True, generator=gen),
            "torch_wrs.multinomial k=1": lambda: torch_wrs.multinomial(x, 1, True, generator=gen),
            "op directly k=1": lambda: op(x, 1, True, generator=gen),
            "torch_wrs.multinomial k=8": lambda: torch_wrs.multinomial(x, 8, True, generator=gen),
            "sample_logits k=1": lambda: torch_wrs.sample_logits(x, 1, generator=gen),
        }
        for name, fn in cases.items():
            print(f"| {rows} x {n:,} {str(dtype)[6:]}: {name} | {event_us(fn):.1f} |")
        # Kernels only: our call captured in a graph and replayed.
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            torch_wrs.multinomial(x, 1, True)
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(g):
            torch_wrs.multinomial(x, 1, True)
        print(f"| {rows} x {n:,} {str(dtype)[6:]}: graph replay of ours k=1 | {event_us(g.replay):.1f} |")
    x = torch.rand(1, 128_256, generator=gen, device="cuda") + 1e-3
    for _ in range(20):
        torch_wrs.multinomial(x, 1, True)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(50):
            torch_wrs.multinomial(x, 1, True)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25, max_name_column_width=60))


def race():
    """Whole calls (ms): one draw by the inverse CDF (replacement, k = 1) against the race
    (without replacement, k = 2: the top-k kernel), for probabilities and logits, with
    torch's and the unfused exponential trick's times beside them."""
    gen = torch.Generator("cuda").manual_seed(0)
    print("| dtype | rows | n | cdf k=1 | race k=2 | race k=8 | race k=64 | torch k=1 | torch no-repl k=64 "
          "| logits cdf k=1 | logits race k=2 | trick |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for dtype in (torch.float32, torch.bfloat16):
        for rows, n in ((1, 32_000), (1, 128_256), (8, 128_256), (64, 32_000), (64, 128_256), (256, 128_256),
                        (4_096, 1_000), (4_096, 32_000), (65_536, 1_000), (1, 1 << 24)):
            x = (torch.rand(rows, n, generator=gen, device="cuda") + 1e-3).to(dtype)
            lg = (torch.randn(rows, n, generator=gen, device="cuda") * 3).to(dtype)

            def trick():
                e = torch.empty_like(lg).exponential_(generator=gen)
                return (lg / 0.8 - e.log()).argmax(-1, keepdim=True)

            t = [event_us(f, reps=30, warmup=3) / 1e3 for f in (
                lambda: torch_wrs.multinomial(x, 1, True, generator=gen),
                lambda: torch_wrs.multinomial(x, 2, False, generator=gen),
                lambda: torch_wrs.multinomial(x, 8, False, generator=gen),
                lambda: torch_wrs.multinomial(x, 64, False, generator=gen),
                lambda: torch.multinomial(x, 1, True, generator=gen),
                lambda: torch.multinomial(x, 64, False, generator=gen),
                lambda: torch_wrs.sample_logits(lg, 1, temperature=0.8, generator=gen),
                lambda: torch_wrs.sample_logits(lg, 2, temperature=0.8, replacement=False, generator=gen),
                trick)]
            print(f"| {str(dtype)[6:]} | {rows:,} | {n:,} | " + " | ".join(f"{v:.3f}" for v in t) + " |", flush=True)


def gamma_validate():
    """Where the default call's validation costs: the kernel's own time (torch.profiler)
    with and without the status word, and whole calls, also validate=False followed by
    a stream synchronization (what the read back adds at least)."""
    from torch.profiler import ProfilerActivity, profile
    print("| n | dtype | alpha | kernel us, validate=False | kernel us, default | call us, validate=False "
          "| call us, validate=False + sync | call us, default |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for log2n in (20, 24, 26):
        n = 1 << log2n
        for dtype in (torch.float32, torch.float64):
            for a in (1.0001, 4.0):
                alpha = torch.full((n,), a, device="cuda", dtype=dtype)

                def kernel_us(validate):
                    for _ in range(3):
                        torch_wrs.standard_gamma(alpha, validate=validate)
                    torch.cuda.synchronize()
                    with profile(activities=[ProfilerActivity.CUDA]) as prof:
                        for _ in range(10):
                            torch_wrs.standard_gamma(alpha, validate=validate)
                        torch.cuda.synchronize()
                    times = [e.device_time for e in prof.events() if "gamma" in e.name]
                    return sorted(times)[len(times) // 2]

                def synced():
                    torch_wrs.standard_gamma(alpha, validate=False)
                    torch.cuda.current_stream().synchronize()

                t = [kernel_us(False), kernel_us(True),
                     event_us(lambda: torch_wrs.standard_gamma(alpha, validate=False), reps=20, warmup=3),
                     event_us(synced, reps=20, warmup=3),
                     event_us(lambda: torch_wrs.standard_gamma(alpha), reps=20, warmup=3)]
                print(f"| 2^{log2n} | {str(dtype)[6:]} | {a} | " + " | ".join(f"{v:.1f}" for v in t) + " |", flush=True)


def many():
    """Whole calls (ms), many draws with replacement: multinomial (its method for the
    shape) against the alias-table composite (alias_table + alias_sample, what served
    these shapes before) and torch.multinomial."""
    gen = torch.Generator("cuda").manual_seed(0)
    print("| dtype | rows | n | k | ours | alias tables | torch | torch / ours | alias / ours |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    cases = [(rows, n, k) for k in (128, 1024, 1 << 20) for rows in (1, 8, 64, 256, 4096, 65536)
             for n in (4, 18, 100, 1000, 32_000, 128_256) if rows * k <= 1 << 27 and rows * n <= 1 << 28]
    for dtype in (torch.float32, torch.float64):
        for rows, n, k in cases:
            x = (torch.rand(rows, n, generator=gen, device="cuda", dtype=dtype) + 1e-3)

            def alias():
                table = torch.ops.wrs.alias_table(x, validate=False)
                return torch.ops.wrs.alias_sample(table, k, ordered=True, generator=gen)

            t = [event_us(f, reps=15, warmup=2) / 1e3 for f in (
                lambda: torch_wrs.multinomial(x, k, True, generator=gen),
                alias,
                lambda: torch.multinomial(x, k, True, generator=gen))]
            print(f"| {str(dtype)[6:]} | {rows:,} | {n:,} | {k:,} | " + " | ".join(f"{v:.3f}" for v in t) +
                  f" | {t[2] / t[0]:.2f} | {t[1] / t[0]:.2f} |", flush=True)

def tiny():
    """Whole calls (ms), one draw from many rows of 2 to 18 items: multinomial's choice
    for k = 1, against two draws by each candidate method (without replacement: the
    thread per row of race keys; with it: warp rows) and torch.multinomial, k = 1."""
    gen = torch.Generator("cuda").manual_seed(0)
    print("| dtype | rows | n | ours, k = 1 | thread race, k = 2 | warp rows, k = 2 | torch, k = 1 | torch / ours |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for dtype in (torch.float32, torch.bfloat16):
        for rows in (65_536, 1 << 20):
            for n in (2, 4, 6, 8, 9, 12, 16, 18):
                x = (torch.rand(rows, n, generator=gen, device="cuda") + 1e-3).to(dtype)
                t = [event_us(f, reps=30, warmup=3) / 1e3 for f in (
                    lambda: torch_wrs.multinomial(x, 1, True, generator=gen),
                    lambda: torch_wrs.multinomial(x, 2, False, generator=gen),
                    lambda: torch_wrs.multinomial(x, 2, True, generator=gen),
                    lambda: torch.multinomial(x, 1, True, generator=gen))]
                print(f"| {str(dtype)[6:]} | {rows:,} | {n} | " + " | ".join(f"{v:.3f}" for v in t) +
                      f" | {t[3] / t[0]:.2f} |", flush=True)


if __name__ == "__main__":
    {"gamma": gamma, "gamma_sizes": gamma_sizes, "topk": topk, "anatomy": anatomy, "race": race,
     "many": many, "gamma_validate": gamma_validate, "tiny": tiny}[sys.argv[1]]()
