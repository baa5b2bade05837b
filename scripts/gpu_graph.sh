#!/usr/bin/env bash
# On a GPU machine: build, the graph tests (GPU and CPU), compute-sanitizer memcheck over the
# graph kernels, then the graph benchmark. Logs and the report go to $OUT.
#   bash scripts/gpu_graph.sh [tests] [sanitizer] [bench]     (all three when none is named)
# torch_cluster's random-walk extension is built for the benchmark from TORCH_CLUSTER_SRC
# (its 1.6.3 `csrc` folder), by default .bench/torch_cluster_csrc.
source "$(dirname "$0")/gpu_build.sh"
what="${*:-tests sanitizer bench}"
export TORCH_CLUSTER_SRC="${TORCH_CLUSTER_SRC:-$PWD/.bench/torch_cluster_csrc}"
export TORCH_EXTENSIONS_DIR="${TORCH_EXTENSIONS_DIR:-$PWD/build/torch_extensions}"
if [[ " $what " == *" tests "* ]]; then
  timeout 400 python3 -m pytest -q -p no:cacheprovider --durations=8 tests/test_graph_table.py tests/test_graph_sample.py \
    tests/test_graph_walk.py 2>&1 | tee "$LOG/graph_tests.log" | tail -30
fi
if [[ " $what " == *" sanitizer "* ]]; then
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 \
    python3 -m pytest -q -p no:cacheprovider tests/test_graph_table.py tests/test_graph_sample.py tests/test_graph_walk.py \
    -k "cuda and (degree_classes or boundaries or zero_weights or empty or int32 or few_nonzero or zero_sum or ordered_tuples or dead_ends or bad_input or k_zero or reproducible or validate_false)" \
    > "$LOG/graph_sanitizer.log" 2>&1
  echo "sanitizer rc=$? $(grep -E 'ERROR SUMMARY|passed|failed' "$LOG/graph_sanitizer.log" | tail -2 | tr '\n' ' ')"
fi
if [[ " $what " == *" bench "* ]]; then
  timeout 420 python3 -m torch_wrs.benchmark graph --graph-scales "${GRAPH_SCALES:-21:16,24:8}" \
    --out "$LOG/graph_bench.md" 2>&1 | tee "$LOG/graph_bench.log" | tail -40
fi
echo "== $(head -1 "$LOG/gpu.txt"): $(grep -E 'passed|failed' "$LOG/graph_tests.log" 2>/dev/null | tail -1)"
