#!/usr/bin/env bash
# On a machine of two GPUs: the multinomial sweep of a baseline tree (a copy of csrc/,
# torch_wrs/, setup.py and pyproject.toml from an earlier commit, in $1, default
# .baseline) on GPU 0 and of this working tree on GPU 1, side by side; each sweep times
# ours against torch in one process on its own GPU. Reports go to $OUT (or build/gpu-logs).
#   here:  git archive COMMIT csrc torch_wrs setup.py pyproject.toml | tar -x -C .baseline
#   there: bash scripts/gpu_sweep_compare.sh .baseline   (carry .baseline)
set -uo pipefail
cd "$(dirname "$0")/.."
BASE="${1:-.baseline}"
LOG="${OUT:-build/gpu-logs}"
mkdir -p "$LOG"
export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader | tee "$LOG/gpu.txt"
t0=$SECONDS
(cd "$BASE" && MAX_JOBS=16 python3 setup.py build_ext --inplace > "$LOG/build_baseline.log" 2>&1) &
MAX_JOBS=16 python3 setup.py build_ext --inplace > "$LOG/build.log" 2>&1 &
wait
echo "both built in $((SECONDS - t0)) s"
(cd "$BASE" && CUDA_VISIBLE_DEVICES=0 PYTHONPATH=. timeout 540 python3 -m torch_wrs.benchmark sweep \
  --out "$LOG/sweep_baseline.md" > "$LOG/sweep_baseline.log" 2>&1; echo "baseline sweep rc=$?") &
CUDA_VISIBLE_DEVICES=1 PYTHONPATH=. timeout 540 python3 -m torch_wrs.benchmark sweep \
  --out "$LOG/sweep.md" > "$LOG/sweep.log" 2>&1; echo "sweep rc=$?"
wait
for f in sweep_baseline sweep; do echo "== $f"; sed -n '3,8p' "$LOG/$f.md" 2>/dev/null || tail -5 "$LOG/$f.log"; done
