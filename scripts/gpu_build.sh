# Sourced by the scripts/gpu_*.sh drivers: from the repository root, logs to $OUT (or
# build/gpu-logs) as $LOG, the GPU's name in $LOG/gpu.txt, and the extension built in
# place (the device machine's torch, python3 -m pip, no build isolation); SKIP_BUILD=1 reuses
# the build of an earlier driver in the same call.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
LOG="${OUT:-build/gpu-logs}"
mkdir -p "$LOG"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$LOG/gpu.txt"
[ "${SKIP_BUILD:-0}" = 1 ] && return 0
t0=$SECONDS
MAX_JOBS=16 python3 -m pip install -q --no-build-isolation --no-deps -e . > "$LOG/build.log" 2>&1 || { tail -40 "$LOG/build.log"; exit 1; }
echo "build: $((SECONDS - t0)) s"
