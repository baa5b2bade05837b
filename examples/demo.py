"""torch_wrs in one minute: build an alias table from a million weights, draw samples,
and check what was drawn against what was asked for.

    python examples/demo.py [--device cuda|cpu] [--samples N]
"""
import argparse
import statistics
import time

import torch

import torch_wrs


def timed(fn, device, repeats=5):
    """Median wall time of fn() in ms (CUDA events on the GPU), after one warm-up."""
    out = fn()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            out = fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            out = fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return out, statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--categories", type=int, default=1_000_000)
    parser.add_argument("--samples", type=int, default=None, help="default: 1e8 on CUDA, 1e7 on CPU")
    args = parser.parse_args()
    device = torch.device(args.device)
    num_samples = args.samples or (100_000_000 if device.type == "cuda" else 10_000_000)
    n = args.categories

    # A shuffled power law (w_i = 1/i) with every tenth item zeroed: skewed, like word counts.
    g = torch.Generator().manual_seed(0)
    weights = (1.0 / torch.arange(1, n + 1, dtype=torch.float64))[torch.randperm(n, generator=g)]
    weights[::10] = 0
    weights = weights.float().to(device)

    table, build_ms = timed(lambda: torch_wrs.AliasTable(weights, validate=False), device)
    gen = torch.Generator(device).manual_seed(1)
    samples, sample_ms = timed(lambda: table.sample(num_samples, generator=gen), device)

    counts = torch.bincount(samples, minlength=n).double()
    expected = weights.double() / weights.double().sum() * num_samples
    big = expected >= 5
    chi2 = float(((counts - expected)[big] ** 2 / expected[big]).sum())
    dof = int(big.sum()) - 1
    tv = 0.5 * float((counts / num_samples - expected / num_samples).abs().sum())
    top = torch.topk(expected, 5).indices
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU ({torch.get_num_threads()} threads)"

    print(f"torch_wrs demo on {name}")
    print(f"  {n:,} weights (shuffled 1/i, every tenth zero), {num_samples:,} samples")
    print(f"  build:  {build_ms:9.3f} ms   ({n / build_ms / 1e3:.2f} M items/s on this {device.type.upper()})")
    print(f"  sample: {sample_ms:9.3f} ms   ({num_samples / sample_ms / 1e6:.2f} G samples/s on this {device.type.upper()})")
    print("  top items     measured     expected")
    for i in top.tolist():
        print(f"  {i:9d} {int(counts[i]):12,d} {expected[i]:12,.0f}")
    print(f"  zero-weight items drawn: {int(counts[weights == 0].sum())} (must be 0)")
    print(f"  chi-square / dof = {chi2:.0f} / {dof} = {chi2 / dof:.4f} (about 1 when the law is right)")
    noise = 0.5 * float((2 * expected / torch.pi).sqrt().sum()) / num_samples  # E|count - mean| summed
    print(f"  total variation distance: {tv:.3e} (sampling noise alone: ~{noise:.3e})")
    ok = counts[weights == 0].sum() == 0 and abs(chi2 / dof - 1) < 5 * (2 / dof) ** 0.5
    print("  check:", "PASS" if ok else "FAIL")
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
