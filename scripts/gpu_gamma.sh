#!/usr/bin/env bash
# On a GPU machine: build, run the gamma / Dirichlet / Beta GPU tests (KS, 1e-3
# concentrations, gradients, opcheck, compile, TorchScript, graph replay), compute-sanitizer
# over the edge and error tests, then (if asked) the gamma benchmark. Logs go to $OUT (or
# build/gpu-logs); a summary comes last.
#   bash scripts/gpu_gamma.sh [bench]
source "$(dirname "$0")/gpu_build.sh"
TESTS="tests/test_gamma.py tests/test_gamma_grad.py tests/test_dirichlet_beta.py tests/test_gamma_integration.py"
timeout 400 python3 -m pytest -q -p no:cacheprovider $TESTS -k "cuda or gpu" 2>&1 | tee "$LOG/tests.log" | tail -15
PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 \
  python3 -m pytest -q -p no:cacheprovider tests/test_gamma.py tests/test_dirichlet_beta.py \
  -k "cuda and not capture and not graph and (mixed_alpha or non_contiguous or special_values or tiny_alpha or bad_input or every_position or depends_only or invalid_anywhere or wide_rows or softmax_of)" \
  > "$LOG/sanitizer.log" 2>&1
echo "sanitizer rc=$? $(grep -E 'ERROR SUMMARY|passed|failed' "$LOG/sanitizer.log" | tail -2 | tr '\n' ' ')"
if [ "${1:-}" = bench ]; then
  timeout 400 python3 -m torch_wrs.benchmark gamma > "$LOG/bench-gamma.log" 2>&1
  echo "bench rc=$?"; cat "$LOG/bench-gamma.log"
fi
echo "== $(head -1 "$LOG/gpu.txt"): $(grep -E 'passed|failed' "$LOG/tests.log" | tail -1)"
