#!/usr/bin/env bash
# On a GPU machine: build, then one half of the whole test suite, since the build and the
# whole suite outrun one device call (10 minutes). Part 1 ends with the LLM tests; part 2
# runs the rest (multinomial onwards) and then the C++ tests, which load what part 2's
# pytest exports. The slowest tests are listed, a summary comes last; logs go to $OUT.
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
if [ "$part" = 2 ]; then
  # Part 1's TorchScript export too, for the C++ test that loads it.
  python3 -m pytest -q -p no:cacheprovider tests/test_alias_integration.py -k torchscript > "$LOG/export.log" 2>&1
  prefix="$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')"
  { cmake -S . -B build/cmake -DCMAKE_PREFIX_PATH="$prefix" -DPython3_EXECUTABLE="$(command -v python3)" &&
    cmake --build build/cmake -j 16; } > "$LOG/cmake.log" 2>&1 || tail -30 "$LOG/cmake.log"
  ctest --test-dir build/cmake 2>&1 | tail -4
fi
echo "== $(head -1 "$LOG/gpu.txt"), part $part: $(grep -E 'passed|failed' "$LOG/tests$part.log" | tail -1)"
