#!/usr/bin/env bash
# On a GPU machine: build, run the whole test suite (GPU tests included) and the C++
# test, run compute-sanitizer memcheck over a small GPU subset, then the demo and (if
# asked) a benchmark. Logs go to $OUT (or build/gpu-logs); a summary table comes last.
#   bash scripts/gpu_check.sh [construction] [sampling] [multinomial] [gamma] [radix]
set -uo pipefail
cd "$(dirname "$0")/.."
LOG="${OUT:-build/gpu-logs}"
mkdir -p "$LOG"
export PYTHONUNBUFFERED=1
declare -a SUMMARY

step() {  # step NAME COMMAND...: runs, logs, records the last line
  local name="$1"; shift
  local t0=$SECONDS
  "$@" > "$LOG/$name.log" 2>&1
  local rc=$?
  SUMMARY+=("$(printf '%-12s rc=%-3s %4ss  %s' "$name" "$rc" "$((SECONDS - t0))" "$(grep -v '^\s*$' "$LOG/$name.log" | tail -1 | cut -c1-110)")")
  return $rc
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$LOG/gpu.txt"
step test bash scripts/run.sh test
tail -25 "$LOG/test.log"
step sanitizer env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck --error-exitcode 9 \
  python3 -m pytest -q -p no:cacheprovider tests/test_alias_sample.py tests/test_alias_table.py \
  tests/test_alias_sample_unordered.py tests/test_multinomial.py tests/test_gamma.py tests/test_radix_forest.py \
  -k "cuda and (dtypes_and_non or sample_batched or shape_dtype or odd_sample or zero_and_single or batched_rows or many_small or one_huge or zeros_mixed or single_item or sectioned_edge or test_shapes or every_float_dtype or mixed_alpha or non_contiguous or special_values)"
tail -5 "$LOG/sanitizer.log"
step demo python3 examples/demo.py
cat "$LOG/demo.log"
for what in "$@"; do  # benchmarks: construction, sampling, multinomial, gamma, radix
  step "bench-$what" python3 -m torch_wrs.benchmark "$what"
  cat "$LOG/bench-$what.log"
done
echo
echo "== summary ($(head -1 "$LOG/gpu.txt"))"
printf '%s\n' "${SUMMARY[@]}"
