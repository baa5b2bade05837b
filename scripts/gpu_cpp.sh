#!/usr/bin/env bash
# On a GPU machine: the C++ tests. Builds the CMake project (the library and the C++ test
# programs), has pytest export the TorchScript and AOTInductor artifacts that they load,
# and runs ctest. With `build`, only the CMake build (to run beside another build).
#   bash scripts/gpu_cpp.sh [build]
set -uo pipefail
cd "$(dirname "$0")/.."
LOG="${OUT:-build/gpu-logs}"
mkdir -p "$LOG"
prefix="$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')"
{ cmake -S . -B build/cmake -DCMAKE_PREFIX_PATH="$prefix" -DPython3_EXECUTABLE="$(command -v python3)" &&
  cmake --build build/cmake -j "${CMAKE_JOBS:-16}"; } > "$LOG/cmake.log" 2>&1 || { tail -30 "$LOG/cmake.log"; exit 1; }
[ "${1:-}" = build ] && exit 0
python3 -m pytest -q -p no:cacheprovider tests/test_alias_integration.py tests/test_radix_forest_integration.py \
  tests/test_export_aoti.py -k "torchscript or aoti or export" > "$LOG/export.log" 2>&1
echo "exports: $(grep -E 'passed|failed' "$LOG/export.log" | tail -1)"
ctest --test-dir build/cmake 2>&1 | grep -E "tests passed|Passed|Failed|Skipped|Not Run"
