"""Writes docs/benchmarks.md and its plots from the latest recorded runs.

    python scripts/docs_benchmarks.py

Recorded runs: the sweeps' full reports (docs/multinomial_sweep_{h100,h200,cpu}.md,
docs/multinomial_contended_cpu.md, written by `python -m torch_wrs.benchmark ... --out`),
the LLM benchmarks (docs/llm_bench_h200.md, docs/llm_bench_graphs_h200.md, docs/llm_extras_h200.md), the graph benchmark (docs/graph_bench_h200.md),
the replay benchmark (docs/replay_bench_h200.md) and the other tables (docs/runs/*.md), each
headed by its device, versions and date. Replace a run's file with a newer run's output,
then run this script; the page holds current numbers only.
"""
import os
import re
import statistics

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

DOCS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs")
RUNS = ["construction", "sampling", "gamma", "radix", "qmc", "lda", "distributed", "lda_distributed"]
SWEEPS = {"h100": "GPU: NVIDIA H100", "h200": "GPU: NVIDIA H200", "cpu": "CPU: this repository's CI machine"}


def read(name):
    with open(os.path.join(DOCS, name)) as f:
        return f.read()


def titled(name, title):
    """The recorded run's text, with a title line first (the docs' table of contents
    needs one); the file is rewritten once if it has none."""
    text = read(name)
    if not text.startswith("# "):
        text = f"# {title}\n\n{text}"
        with open(os.path.join(DOCS, name), "w") as f:
            f.write(text)
    return text


def table_rows(text, first_header):
    """The rows of the Markdown table whose header starts with first_header, as lists."""
    lines = text.split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith(first_header))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows


def summary_lines(text):
    """The report's summary: its lines from the head down to the first blank line after
    the cell counts."""
    lines = [line for line in text.split("\n") if not line.startswith("# ")]
    out = []
    for line in lines:
        if line.startswith("|") or (out and not line.strip() and len(out) > 2):
            break
        if line.strip() and not line.startswith("torch.multinomial not run"):  # listed in the run's file
            out.append(line)
    return out


def sweep_heatmap(text, path, title):
    """torch / ours over rows x categories, float32, the least over samples and both
    replacement modes (where torch runs)."""
    cells = {}
    for dtype, rows, n, _k, _rep, _ours, _torch, ratio, *_ in table_rows(text, "| dtype | rows | n | k |"):
        if dtype != "float32" or ratio == "n/a":
            continue
        key = (int(rows.replace(",", "")), int(n.replace(",", "")))
        value = float(ratio.split("x")[0])
        cells[key] = min(value, cells.get(key, value))
    rows = sorted({r for r, _ in cells})
    cats = sorted({n for _, n in cells})
    grid = np.full((len(rows), len(cats)), np.nan)
    for (r, n), v in cells.items():
        grid[rows.index(r), cats.index(n)] = v
    fig, ax = plt.subplots(figsize=(1.0 + 0.75 * len(cats), 0.9 + 0.45 * len(rows)))
    im = ax.imshow(np.log2(grid), cmap="RdYlGn", vmin=-2, vmax=4, aspect="auto")
    for i in range(len(rows)):
        for j in range(len(cats)):
            if not np.isnan(grid[i, j]):
                ax.text(j, i, f"{grid[i, j]:.1f}", ha="center", va="center", fontsize=7)
    ax.set_xticks(range(len(cats)), [f"{c:,}" for c in cats], rotation=45, ha="right", fontsize=7)
    ax.set_yticks(range(len(rows)), [f"{r:,}" for r in rows], fontsize=7)
    ax.set_xlabel("categories")
    ax.set_ylabel("rows")
    ax.set_title(title, fontsize=9)
    fig.colorbar(im, ax=ax, label="log2(torch / ours)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def llm_bars(text, path):
    """Median speed of ours against FlashInfer and against the torch sort path per
    control, float32 probabilities."""
    per = {}
    for control, dtype, _shape, *cols in table_rows(text, "| control | dtype |"):
        if dtype != "float32":
            continue
        ours = float(cols[0])  # ratios from the times, as the report's own summary takes them
        fi, th = float(cols[2]) / ours, float(cols[3]) / ours
        per.setdefault(control, ([], []))
        per[control][0].append(fi)
        per[control][1].append(th)
    controls = list(per)
    fi = [statistics.median(per[c][0]) for c in controls]
    th = [statistics.median(per[c][1]) for c in controls]
    x = np.arange(len(controls))
    fig, ax = plt.subplots(figsize=(7.5, 3.2))
    ax.bar(x - 0.2, fi, 0.4, label="against FlashInfer")
    ax.bar(x + 0.2, th, 0.4, label="against torch (sort)")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_xticks(x, controls, fontsize=8)
    ax.set_ylabel("speed-up (median over cells)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return controls, fi, th


def replay_bars(text, path):
    """A full PER step's time per (capacity, n): ours eager and in a CUDA graph, TorchRL's
    CUDA sampler, cumsum + searchsorted in a CUDA graph."""
    rows = table_rows(text, "| capacity | n | m | ours, eager |")
    labels = [f"{r[0]}\nn={r[1]}" for r in rows]
    med = lambda cell: float(cell.split("/")[0].replace(",", ""))  # noqa: E731
    series = [("ours, eager", [med(r[3]) for r in rows]), ("ours, CUDA graph", [med(r[4]) for r in rows]),
              ("TorchRL CUDA", [med(r[5]) for r in rows]), ("cumsum + searchsorted, graph", [med(r[7]) for r in rows])]
    x = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(8.5, 3.4))
    for k, (name, ys) in enumerate(series):
        ax.bar(x + (k - 1.5) * 0.2, ys, 0.2, label=name)
    ax.set_yscale("log")
    ax.set_xticks(x, labels, fontsize=7)
    ax.set_ylabel("us a step (median)")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main():
    out = ["# Benchmarks", "",
           "Current numbers, written by `python scripts/docs_benchmarks.py` from the latest recorded "
           "run of each benchmark; each section names its device, versions and date. GPU times are "
           "medians of CUDA-event timings after warm-up, CPU times medians of wall-clock timings, "
           "ours and the alternative side by side in one process on the same inputs (never all-zero). "
           "The floor is the memory traffic the operation cannot avoid at the copy bandwidth "
           "measured in the same run.", "",
           "## multinomial against torch.multinomial", "",
           "`python -m torch_wrs.benchmark sweep [--device cpu]`: rows x categories x samples, with "
           "and without replacement, in float32 (and 1, 8 and 64 samples in bfloat16, float16 and "
           "float64). The maps show, per rows x categories, the least ratio over the samples and both "
           "modes, float32.", ""]
    for key, label in SWEEPS.items():
        name = f"multinomial_sweep_{key}.md"
        text = titled(name, f"multinomial sweep, {label}")
        out += [f"### {label}", ""] + [f"- {line}" for line in summary_lines(text)]
        png = f"_static/sweep_{key}.png"
        if key != "h200":
            sweep_heatmap(text, os.path.join(DOCS, png), f"torch / ours, float32 ({label})")
            out += ["", f"![torch / ours over rows x categories]({png})"]
        out += ["", f"Every cell: [{name}]({name}).", ""]
    text = titled("multinomial_contended_cpu.md", "multinomial under contention, CPU")
    out += ["### The CPU under contention", "",
            "`python -m torch_wrs.benchmark contended-sweep --device cpu` times 40 cells while as "
            "many busy-loop processes as cores compete for them, as a data loader's workers or "
            "another job would. torch's OpenMP regions split the work up front and end at a barrier, so a "
            "thread that the scheduler has not run stalls a call for a timeslice (about 8 ms on this "
            "machine, against calls of 0.1-1 ms). torch_wrs's CPU ops note how late their threads "
            "start; once one starts a millisecond late, calls run on the calling thread alone for "
            "100 ms (`csrc/common/parallel.h`).", ""]
    out += [f"- {line}" for line in summary_lines(text)]
    out += ["", "Every cell: [multinomial_contended_cpu.md](multinomial_contended_cpu.md).", ""]

    text = titled("llm_bench_h200.md", "LLM sampling, NVIDIA H200")
    controls, fi, th = llm_bars(text, os.path.join(DOCS, "_static/llm_h200.png"))
    out += ["## LLM sampling against FlashInfer and a torch sort path", "",
            [line for line in text.split("\n") if line.startswith("LLM sampling on")][0], "",
            "`python -m torch_wrs.benchmark llm` (FlashInfer 0.7.2's header-only sampling kernels, "
            "bound for the benchmark). Medians over the float32 cells (rows 1 to 1,024; vocabularies "
            "32,000 to 256,000); below 1 we are slower.", "",
            "| control | against FlashInfer | against torch (sort) |", "| --- | ---: | ---: |"]
    out += [f"| {c} | {a:.2f}x | {b:.1f}x |" for c, a, b in zip(controls, fi, th)]
    out += ["", "![speed-up against FlashInfer and torch](_static/llm_h200.png)", "",
            "Every cell: [llm_bench_h200.md](llm_bench_h200.md).", ""]
    text = titled("llm_extras_h200.md", "LLM sampling extras, NVIDIA H200")
    out += ["### The pass before sampling, top-n log-probs, typical-p and masked rows", "",
            "`python -m torch_wrs.benchmark llm-extras`: each against sampling alone (for typical-p "
            "and top-n-sigma, against top-p alone).", "", text.split("\n", 1)[1].strip(), "",
            "Where the time goes: [llm.md](llm.md#speed).", ""]
    text = titled("llm_bench_graphs_h200.md", "LLM sampling in CUDA graphs, NVIDIA H200")
    summary = text.split("Per control:", 1)[1].split("\n")
    out += ["### In CUDA graphs, on rows of mixed sharpness", "",
            [line for line in text.split("\n") if line.startswith("LLM sampling on")][0], "",
            "`python -m torch_wrs.benchmark llm --cuda-graphs --dtypes float32`: FlashInfer / ours per "
            "control (median, minimum, the cells where we are slower), float32 probabilities, 32 cells each.",
            "", *[line for line in summary if line.startswith("- ")], "",
            "Every cell: [llm_bench_graphs_h200.md](llm_bench_graphs_h200.md).", ""]

    text = read("graph_bench_h200.md").split("\n", 1)[1].strip().replace("\n## ", "\n### ")  # under our title
    out += ["## Graph sampling", "", text, "",
            "The targets and where they are missed: [graph.md](graph.md). "
            "Every row: [graph_bench_h200.md](graph_bench_h200.md).", ""]

    text = read("replay_bench_h200.md")
    replay_bars(text, os.path.join(DOCS, "_static/replay_h200.png"))
    text = text.split("\n", 1)[1].strip().replace("\n## ", "\n### ")
    out += ["## Prioritized replay", "", text, "", "![a PER step's time](_static/replay_h200.png)", "",
            "The targets and where they are missed: [replay.md](replay.md). "
            "The run: [replay_bench_h200.md](replay_bench_h200.md).", ""]

    for run in RUNS:
        text = read(os.path.join("runs", f"{run}.md"))
        out += [re.sub(r"^# ", "## ", text.strip()), ""]
    with open(os.path.join(DOCS, "benchmarks.md"), "w") as f:
        f.write("\n".join(out))
    print("wrote docs/benchmarks.md")


if __name__ == "__main__":
    main()
