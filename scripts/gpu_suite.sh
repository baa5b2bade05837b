#!/usr/bin/env bash
# On a GPU machine: build, then one half of the whole test suite, since the build and the
# whole suite outrun one device call (10 minutes). Part 1 ends with the LLM tests; part 2
# runs the rest (multinomial onwards); scripts/gpu_cpp.sh runs the C++ tests. The slowest
# tests are listed, a summary comes last; logs go to $OUT.
#   bash scripts/gpu_suite.sh 1      bash scripts/gpu_suite.sh 2
source "$(dirname "$0")/gpu_build.sh"
part="${1:-1}"
files=()
for f in tests/test_*.py; do
  name="$(basename "$f")"
  if [[ "$name" < "test_m" ]]; then first=1; else first=2; fi
  [ "$first" = "$part" ] && files+=("$f")
done
timeout 470 python3 -m pytest -q -p no:cacheprovider --durations=12 "${files[@]}" 2>&1 | tee "$LOG/tests$part.log" | tail -25
echo "== $(head -1 "$LOG/gpu.txt"), part $part: $(grep -E 'passed|failed' "$LOG/tests$part.log" | tail -1)"
