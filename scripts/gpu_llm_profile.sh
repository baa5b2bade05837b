#!/usr/bin/env bash
# On a GPU machine: Nsight Compute's speed-of-light, warp-state, launch and occupancy
# sections for one LLM-sampling call (after gpu_build.sh), in $LOG/llm_profile_<case>.txt,
# for docs/llm.md's "Where the time goes". Cases: ROWS V CONTROL (none, topk, topp, topkp).
# With SOURCE=1, also the warp-stall samples per SASS instruction (the source page as CSV,
# and its 25 hottest lines printed).
#   bash scripts/gpu_llm_profile.sh 32 32000 topk
source "$(dirname "$0")/gpu_build.sh"
rows=${1:-32}; v=${2:-32000}; ctl=${3:-topk}
cat > "$LOG/call.py" <<PY
import torch, torch_wrs
kw = dict(none={}, topk=dict(top_k=50), topp=dict(top_p=0.9), topkp=dict(top_k=50, top_p=0.9))["$ctl"]
x = torch.randn($rows, $v, device="cuda") * 2
x[:, :200] += torch.rand($rows, 200, device="cuda") * 8
p = torch.softmax(x[:, torch.randperm($v, device="cuda")], -1)
for _ in range(3):
    torch_wrs.sample_probs(p, **kw)
torch.cuda.synchronize()
PY
timeout 300 ncu --kernel-name regex:"sample_kernel|plain_kernel" --launch-skip 2 --launch-count 1 \
  --section WarpStateStats --section SpeedOfLight --section LaunchStats --section Occupancy python3 "$LOG/call.py" > "$LOG/llm_profile_${ctl}.txt" 2>&1
grep -E "Duration|Stall|Warp Cycles|Issued" "$LOG/llm_profile_${ctl}.txt" | head -20
[ "${SOURCE:-0}" = 1 ] || exit 0
timeout 300 ncu --kernel-name regex:"sample_kernel|plain_kernel" --launch-skip 2 --launch-count 1 \
  --section SourceCounters --section WarpStateStats --import-source yes -f -o "$LOG/llm_profile_${ctl}" \
  python3 "$LOG/call.py" > /dev/null 2>&1
ncu -i "$LOG/llm_profile_${ctl}.ncu-rep" --page source --csv --print-source sass > "$LOG/llm_source_${ctl}.csv" 2>&1
python3 - "$LOG/llm_source_${ctl}.csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
head = next((i for i, r in enumerate(rows) if any("Stall Sampling (All" in c for c in r)), None)
if head is None:
    sys.exit(print("no stall-sampling column in", sys.argv[1]))
cols = rows[head]
stall = next(i for i, c in enumerate(cols) if "Stall Sampling (All" in c)
body = [r for r in rows[head + 1:] if len(r) == len(cols) and r[stall].replace(".", "").isdigit()]
total = sum(float(r[stall]) for r in body) or 1.0
for r in sorted(body, key=lambda r: -float(r[stall]))[:25]:
    print(f"{100 * float(r[stall]) / total:5.1f}%", " | ".join(c for c in r[:3]))
PY
