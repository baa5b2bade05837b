#!/usr/bin/env bash
# On a GPU machine: build, the replay tests (GPU and CPU, the TorchRL adapter's too),
# compute-sanitizer memcheck over the replay kernels, then the replay benchmark. Logs and
# the report go to $OUT.
#   bash scripts/gpu_replay.sh [tests] [sanitizer] [bench] [example]     (all four when none is named)
# TorchRL and its pure-Python dependencies come from REPLAY_PYLIBS (default .bench/pylibs,
# unpacked packages put on PYTHONPATH); its trees are built from its csrc for the benchmark.
source "$(dirname "$0")/gpu_build.sh"
what="${*:-tests sanitizer bench example}"
export PYTHONPATH="${PYTHONPATH:-}:${REPLAY_PYLIBS:-$PWD/.bench/pylibs}"
export TORCH_EXTENSIONS_DIR="${TORCH_EXTENSIONS_DIR:-$PWD/build/torch_extensions}"
if [[ " $what " == *" tests "* ]]; then
  timeout 240 python3 -m pytest -q -p no:cacheprovider --durations=8 tests/test_replay.py tests/test_replay_torchrl.py \
    tests/test_prioritized_replay_example.py 2>&1 | tee "$LOG/replay_tests.log" | tail -30
fi
if [[ " $what " == *" sanitizer "* ]]; then
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 \
    python3 -m pytest -q -p no:cacheprovider tests/test_replay.py \
    -k "cuda and (last_write or alpha_eps or zero_priority or insert or dtypes or batched or bad_input or without_validation or tree_equals_cpu and (33 or 40000))" \
    > "$LOG/replay_sanitizer.log" 2>&1
  echo "sanitizer rc=$? $(grep -E 'ERROR SUMMARY|passed|failed' "$LOG/replay_sanitizer.log" | tail -2 | tr '\n' ' ')"
fi
if [[ " $what " == *" bench "* ]]; then
  timeout 300 python3 -m torch_wrs.benchmark replay --out "$LOG/replay_bench.md" 2>&1 | tee "$LOG/replay_bench.log" | tail -45
fi
if [[ " $what " == *" example "* ]]; then
  timeout 120 python3 examples/prioritized_replay.py 2>&1 | grep -v INFO | tee "$LOG/replay_example.log" | tail -4
fi
echo "== $(head -1 "$LOG/gpu.txt"): $(grep -E 'passed|failed' "$LOG/replay_tests.log" 2>/dev/null | tail -1)"
