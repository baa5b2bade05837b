#!/usr/bin/env bash
# On a GPU machine: build, then Nsight Compute's source view of the LLM sampler's kernel
# (one case of scripts/profile_llm.py): the CUDA lines with the most warp-stall samples.
#   bash scripts/gpu_llm_hotspots.sh [plain|top-p|top-k]
source "$(dirname "$0")/gpu_build.sh"
c="${1:-top-p}"
timeout 240 ncu --kernel-name regex:sample_kernel --launch-skip 3 --launch-count 1 --set full --import-source yes \
  -o "$LOG/hot_$c" -f python3 scripts/profile_llm.py "$c" > "$LOG/hot_$c.log" 2>&1 || tail -5 "$LOG/hot_$c.log"
ncu -i "$LOG/hot_$c.ncu-rep" --page source --csv --print-source sass > "$LOG/hot_$c.csv" 2>&1
rm -f "$LOG/hot_$c.ncu-rep"
python3 - "$LOG/hot_$c.csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
print(rows[1][:12] if len(rows) > 1 else rows)
head = next(i for i, r in enumerate(rows) if any("Warp Stall Sampling (All" in c for c in r))
h = rows[head]
col = next(i for i, c in enumerate(h) if c.startswith("Warp Stall Sampling (All"))
src = next(i for i, c in enumerate(h) if "Source" in c)
line = 0
data = []
for r in rows[head + 1:]:
    try:
        data.append((float(r[col] or 0), r[0], r[src][:110]))
    except (ValueError, IndexError):
        pass
total = sum(d[0] for d in data) or 1
for v, ln, s in sorted(data, reverse=True)[:25]:
    print(f"{100 * v / total:5.1f}%  {ln:>5}  {s}")
# SASS in address order with the samples: the hottest instruction's neighbourhood
order = [d for d in data]
top = max(range(len(order)), key=lambda i: order[i][0])
for v, ln, s in order[max(0, top - 12): top + 6]:
    print(f"   {100 * v / total:5.1f}%  {ln:>5}  {s}")
PY
