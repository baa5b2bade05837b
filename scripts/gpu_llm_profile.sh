#!/usr/bin/env bash
# On a GPU machine: Nsight Compute's speed-of-light, warp-state, launch and occupancy
# sections for one LLM-sampling call (after gpu_build.sh), in $LOG/llm_profile_<case>.txt,
# for docs/llm.md's "Where the time goes". Cases: ROWS V CONTROL (none, topk, topp, topkp).
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
