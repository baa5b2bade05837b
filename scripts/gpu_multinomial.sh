#!/usr/bin/env bash
# On a GPU machine: build, run the multinomial / sample_logits GPU tests (with
# compute-sanitizer over the error and edge tests; not the capture tests: with the
# caching allocator off, as memcheck needs, capture would call cudaMalloc), then the sweep.
# Logs and the sweep's full report go to $OUT (or build/gpu-logs); a summary comes last.
#   bash scripts/gpu_multinomial.sh [sweep]
source "$(dirname "$0")/gpu_build.sh"
TESTS="tests/test_multinomial.py tests/test_sample_logits.py tests/test_alias_sample.py tests/test_alias_errors.py"
timeout 300 python3 -m pytest -q -p no:cacheprovider $TESTS -k "cuda or gpu" 2>&1 | tee "$LOG/tests.log" | tail -15
PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 \
  python3 -m pytest -q -p no:cacheprovider tests/test_multinomial.py tests/test_sample_logits.py \
  -k "(cuda or gpu) and not capture and (errors or shapes or every_float or out_and or foreign or empty or reproduces or law_per_row or float_keys or (two_pass and 64) or (floor and draws_the_keys and probs) or (one_draw_over_chunks_never and 4194309) or over_chunks_huge or (threshold_candidates and (100_003 or 20000)))" \
  > "$LOG/sanitizer.log" 2>&1
echo "sanitizer rc=$? $(grep -E 'ERROR SUMMARY|passed|failed' "$LOG/sanitizer.log" | tail -2 | tr '\n' ' ')"
if [ "${1:-}" = sweep ]; then
  timeout 420 python3 -m torch_wrs.benchmark sweep --out "$LOG/sweep.md" > "$LOG/sweep.log" 2>&1
  echo "sweep rc=$?"; head -8 "$LOG/sweep.md" 2>/dev/null || tail -20 "$LOG/sweep.log"
  grep -A 12 "^sample_logits" "$LOG/sweep.md"
fi
echo "== $(head -1 "$LOG/gpu.txt"): $(grep -E 'passed|failed' "$LOG/tests.log" | tail -1)"
