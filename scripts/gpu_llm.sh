#!/usr/bin/env bash
# On a GPU machine: build, run the LLM-sampling GPU tests (and compute-sanitizer over the
# error, edge and small-law tests), then (with `bench` or `bench-quick`) the llm benchmark
# against FlashInfer (carry .flashinfer, see torch_wrs/benchmark_llm.py). Logs to $OUT.
#   bash scripts/gpu_llm.sh [bench|bench-quick|bench-float32|bench-bfloat16|bench-graphs|speculative|extras]
# The full grid in two calls: bench-float32, then SKIP_TESTS=1 ... bench-bfloat16; then
# python -m torch_wrs.benchmark llm --merge f32.md bf16.md --out docs/llm_bench_h200.md.
# CONTROLS="top-p 0.9,per-row mixed" times only those controls of a grid; --merge DOC PART
# puts the cells into the recorded report. `flashinfer-build` (with SKIP_TESTS=1) only
# builds FlashInfer's binding, minutes on a fresh machine, into $OUT/flashinfer_build: copy
# its two files to .flashinfer/build/, and later calls that carry .flashinfer load it
# without compiling. Never kill a first FlashInfer call with a short timeout: torch's
# extension loader leaves a lock file that later loads wait on.
source "$(dirname "$0")/gpu_build.sh"
SKIP_TESTS=${SKIP_TESTS:-0}
[ "${SKIP_TESTS:-0}" = 1 ] || timeout 400 python3 -m pytest -q -p no:cacheprovider tests/test_llm.py tests/test_speculative.py tests/test_sample_logits.py -k "cuda or gpu" 2>&1 | tee "$LOG/llm_tests.log" | tail -15
# The extras (typical-p, top-n-sigma, top-n log-probs, process_logits, the FlashInfer API): every test, both
# devices; the drop-in against FlashInfer's own kernels where .flashinfer is carried.
[ "${SKIP_TESTS:-0}" = 1 ] || timeout 400 python3 -m pytest -q -p no:cacheprovider tests/test_llm_extras.py \
  tests/test_penalties.py tests/test_top_logprobs.py tests/test_flashinfer_dropin.py \
  tests/test_flashinfer_against_flashinfer.py 2>&1 | tee "$LOG/llm_extras_tests.log" | tail -6
[ "${SKIP_TESTS:-0}" = 1 ] || { PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 200 compute-sanitizer --tool memcheck \
  --error-exitcode 9 python3 -m pytest -q -p no:cacheprovider tests/test_penalties.py tests/test_top_logprobs.py \
  -k "cuda and not graph" \
  > "$LOG/penalties_sanitizer.log" 2>&1; echo "penalize_logits + top_logprobs sanitizer rc=$? $(grep -E 'ERROR SUMMARY|passed|failed' \
  "$LOG/penalties_sanitizer.log" | tail -2 | tr '\n' ' ')"; }
[ "${SKIP_SANITIZER:-$SKIP_TESTS}" = 1 ] || PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 \
  python3 -m pytest -q -p no:cacheprovider tests/test_llm.py tests/test_speculative.py \
  -k "cuda and (invalid or argument or shapes or greedy or seeds or logprobs or ties or without or point_masses or zero_residual or matches_the_cpu or per_row_controls or split_rows)" \
  > "$LOG/llm_sanitizer.log" 2>&1; san=$?
[ "${SKIP_SANITIZER:-$SKIP_TESTS}" = 1 ] || echo "sanitizer rc=$san $(grep -E 'ERROR SUMMARY|passed|failed' "$LOG/llm_sanitizer.log" | tail -2 | tr '\n' ' ')"
case "${1:-}" in
  bench) timeout 900 python3 -m torch_wrs.benchmark llm ${CONTROLS:+--controls "$CONTROLS"} --out "$LOG/llm_bench.md" > "$LOG/llm_bench.log" 2>&1 ;;
  speculative) timeout 300 python3 -c "import torch; from torch_wrs import benchmark_llm as b
print('\n'.join(b._speculative_table(b.flashinfer(), torch.Generator('cuda'))))" > "$LOG/llm_bench.log" 2>&1 ;;
  bench-graphs) timeout 400 python3 -m torch_wrs.benchmark llm --cuda-graphs --dtypes float32 ${CONTROLS:+--controls "$CONTROLS"} \
    --out "$LOG/llm_bench_graphs_h200.md" > "$LOG/llm_bench.log" 2>&1 ;;
  extras) timeout 300 python3 -m torch_wrs.benchmark llm-extras --out "$LOG/llm_extras.md" > "$LOG/llm_bench.log" 2>&1 ;;
  flashinfer-build) timeout 500 python3 -c "from torch_wrs.benchmark_llm import flashinfer; assert flashinfer()" \
    > "$LOG/llm_bench.log" 2>&1 && mkdir -p "$LOG/flashinfer_build" && \
    cp .flashinfer/build/wrs_flashinfer_binding.so .flashinfer/build/binding.sha256 "$LOG/flashinfer_build/" ;;
  bench-quick) timeout 400 python3 -m torch_wrs.benchmark llm --quick --out "$LOG/llm_bench.md" > "$LOG/llm_bench.log" 2>&1 ;;
  bench-float32|bench-bfloat16) timeout 480 python3 -m torch_wrs.benchmark llm --dtypes "${1#bench-}" ${CONTROLS:+--controls "$CONTROLS"} \
    --out "$LOG/llm_bench_${1#bench-}.md" > "$LOG/llm_bench.log" 2>&1 ;;
esac
[ -n "${1:-}" ] && { echo "bench rc=$?"; tail -18 "$LOG/llm_bench.log"; }
echo "== $(head -1 "$LOG/gpu.txt"): $(grep -E 'passed|failed' "$LOG/llm_tests.log" 2>/dev/null | tail -1); extras: $(grep -E 'passed|failed' "$LOG/llm_extras_tests.log" 2>/dev/null | tail -1)"
