"""Quasi-Monte Carlo sampling of a 2-D density: a radix forest keeps Sobol points
low-discrepancy, an alias table scrambles them (Binder and Keller 2019, Figures 8-9).

A high-dynamic-range "environment map" (sky gradient, a sun 10^4 times brighter, a black
ground) of 100 x 300 pixels is sampled to continuous positions three ways:
  - Sobol points through the monotone inverse CDF (torch_wrs.RadixForest2D): u0 picks the
    row, u1 the column, and what is left of each (rescaled) places the point in the pixel;
  - the same Sobol points through an alias table over all pixels: u0 picks the bucket and
    its remainder the x offset, u1 is the coin and its remainder the y offset;
  - i.i.d. random points through the forest (plain Monte Carlo, for reference).
The quadratic error e = sum_i (p_i - c_i / n)^2 of the counts c_i of the n points in a
grid 4 times finer than the pixels is printed as a table and plotted against n.

    python examples/quasi_monte_carlo.py [--device cuda|cpu] [--max-log2 22] [--plot docs/quasi_monte_carlo.png]
"""
import argparse
import math
import os

import torch

import torch_wrs

SUBCELLS = 4  # error grid: 4 x 4 cells per pixel


def environment_map(rows=100, cols=300, device="cpu"):
    """float64 [rows, cols]: a sky brightening towards the horizon, a sun 10^4 times
    brighter than the sky, and a black ground (zero weights, never sampled)."""
    r = torch.linspace(0, 1, rows, dtype=torch.float64, device=device)[:, None]
    c = torch.linspace(0, 1, cols, dtype=torch.float64, device=device)[None, :]
    sky = (0.2 + 0.8 * r**2) * (1 + 0.5 * torch.sin(6 * math.pi * c))
    sun = 1e4 * torch.exp(-((r - 0.25) ** 2 + (c - 0.7) ** 2) / (2 * 0.015**2))
    return torch.where(r < 0.75, sky + sun, torch.zeros_like(sky + sun))


def forest_positions(forest, u):
    """Continuous (y, x) pixel coordinates of u through the forest: the pixel from the
    monotone inverse CDF, the offset in it from where u fell in its interval."""
    row, col = forest.inverse_cdf(u, validate=False)
    lo_r, p_r = forest.rows.cdf.double() / 2.0**63, forest.rows.probs
    lo_c, p_c = forest.cols.cdf.double() / 2.0**63, forest.cols.probs
    dy = (u[:, 0] - lo_r[row]) / p_r[row]
    dx = (u[:, 1] - lo_c[row, col]) / p_c[row, col]
    return row + dy, col + dx


def alias_positions(table, cols, u):
    """The same with an alias table over the flattened pixels (driven by the given
    uniforms, in torch_wrs's table format: bucket k keeps k when the 32-bit coin is below
    its threshold, else takes its alias): u0 gives the bucket and, rescaled, the x offset;
    u1 is the coin and, rescaled to its side of the threshold, the y offset."""
    n = table.shape[-1]
    bucket = (u[:, 0] * n).long().clamp(max=n - 1)
    row = table[bucket]
    threshold = (row & 0xFFFFFFFF).double() / 2.0**32
    keep = u[:, 1] < threshold
    item = torch.where(keep, bucket, row >> 32)
    dx = u[:, 0] * n - bucket
    dy = torch.where(keep, u[:, 1] / threshold, (u[:, 1] - threshold) / (1 - threshold))
    return item // cols + dy, item % cols + dx


def sobol(n, device, seed=0):
    engine = torch.quasirandom.SobolEngine(2, scramble=True, seed=seed)
    return engine.draw(n, dtype=torch.float64).to(device)


def quadratic_errors(sizes, device="cpu"):
    """{method: [e(n) for n in sizes]} for the three methods on environment_map()."""
    density = environment_map(device=device)
    rows, cols = density.shape
    fine = (density / density.sum()).repeat_interleave(SUBCELLS, 0).repeat_interleave(SUBCELLS, 1) / SUBCELLS**2
    forest = torch_wrs.RadixForest2D(density)
    table = torch_wrs.alias_table(density.flatten())
    gen = torch.Generator(device=device).manual_seed(0)

    def error(position, n):
        y, x = position
        fy = (y * SUBCELLS).long().clamp(0, rows * SUBCELLS - 1)
        fx = (x * SUBCELLS).long().clamp(0, cols * SUBCELLS - 1)
        counts = torch.bincount(fy * cols * SUBCELLS + fx, minlength=fine.numel()).double()
        return ((fine.flatten() - counts / n) ** 2).sum().item()

    out = {"radix forest, Sobol": [], "alias table, Sobol": [], "radix forest, random": []}
    for n in sizes:
        u = sobol(n, device)
        out["radix forest, Sobol"].append(error(forest_positions(forest, u), n))
        out["alias table, Sobol"].append(error(alias_positions(table, cols, u), n))
        r = torch.rand(n, 2, dtype=torch.float64, device=device, generator=gen)
        out["radix forest, random"].append(error(forest_positions(forest, r), n))
    return out


def plot(sizes, errors, path):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"(matplotlib is not installed: no plot written to {path})")
        return
    fig, ax = plt.subplots(figsize=(6, 4.2))
    for (name, e), style in zip(errors.items(), ("o-", "s-", "^--")):
        ax.plot(sizes, e, style, label=name)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("number of samples n")
    ax.set_ylabel("quadratic error  sum (p_i - c_i/n)^2")
    ax.set_title("2-D environment map, 100 x 300 pixels (error on a 4x finer grid)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig.savefig(path, dpi=120)
    print(f"plot written to {path}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--max-log2", type=int, default=22, help="largest n is 2^this")
    parser.add_argument("--plot", default="", help="write the plot (PNG) here; needs matplotlib")
    args = parser.parse_args()
    sizes = [2**k for k in range(10, args.max_log2 + 1, 2)]
    errors = quadratic_errors(sizes, args.device)
    names = list(errors)
    print("| n | " + " | ".join(names) + " | alias / forest (Sobol) |")
    print("| ---: | " + " | ".join("---:" for _ in names) + " | ---: |")
    for k, n in enumerate(sizes):
        cells = " | ".join(f"{errors[name][k]:.3g}" for name in names)
        ratio = errors["alias table, Sobol"][k] / errors["radix forest, Sobol"][k]
        print(f"| 2^{int(math.log2(n))} | {cells} | {ratio:.1f}x |")
    if args.plot:
        plot(sizes, errors, args.plot)


if __name__ == "__main__":
    main()
