#!/usr/bin/env bash
# On a GPU machine: build, then Nsight Compute over the LLM sampler's kernel for the cases
# of scripts/profile_llm.py (duration, throughput, occupancy, warp stalls). Logs to $OUT.
source "$(dirname "$0")/gpu_build.sh"
for c in plain top-p; do
  timeout 150 ncu --kernel-name regex:sample_kernel --launch-skip 3 --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats \
    python3 scripts/profile_llm.py $c > "$LOG/ncu_$c.txt" 2>&1
  echo "== $c"; grep -E "Duration|Memory Throughput|DRAM Throughput|Compute \(SM\)|Achieved Occupancy|Registers Per|Dynamic Shared|Stall|Warp Cycles Per Issued|Block Limit" "$LOG/ncu_$c.txt" | head -24
done
