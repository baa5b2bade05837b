#!/usr/bin/env bash
# On a machine with two or more GPUs: build, run the distributed, placement, segments,
# alias-sampling and multinomial_counts tests (NCCL across two GPUs, gloo on the CPU;
# memcheck over the counts, placement and segments kernels), then, as asked:
#   bench    torchrun -m torch_wrs.benchmark distributed on 2 GPUs and on all of them
#            (sampling 2^30, then the largest table that fits)
#   ranks    one GPU doing rank 0's work of 2 and 4 ranks, network left out
#   lda      data-parallel LDA, nytimes shape: 1 GPU, 2 GPUs and all of them, wall time from the
#            command's start to the exact sampler's log-likelihood after 50 sweeps (LDA_TARGET)
#   lda4     the default MH (4 cycles)'s tokens/s on 1 GPU, 2 GPUs and all of them
#   pubmed   the pubmed shape (738M tokens) on 1 and 2 GPUs (PUBMED_ITERS sweeps)
# NVLink multicast stays off (KINDS.md). Logs go to $OUT (or build/gpu-logs).
#   bash scripts/gpu_distributed.sh [tests] [bench] [ranks] [lda] [lda4] [pubmed]
set -uo pipefail
cd "$(dirname "$0")/.."
LOG="${OUT:-build/gpu-logs}"
mkdir -p "$LOG"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$LOG/gpu.txt"
t0=$SECONDS
MAX_JOBS=32 python3 -m pip install -q --no-build-isolation --no-deps -e . > "$LOG/build.log" 2>&1 || { tail -40 "$LOG/build.log"; exit 1; }
echo "build: $((SECONDS - t0)) s"
TARGET="${LDA_TARGET:--8.1758}"
for what in "$@"; do
  case "$what" in
    tests)
      timeout 300 python3 -m pytest -q -p no:cacheprovider tests/test_distributed.py tests/test_place.py \
        tests/test_alias_segments.py tests/test_alias_sample.py tests/test_alias_sample_unordered.py \
        tests/test_multinomial_counts.py 2>&1 | tee "$LOG/tests.log" | tail -8
      if [ "${SKIP_SANITIZER:-0}" != 1 ]; then
        PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 \
          python3 -m pytest -q -p no:cacheprovider tests/test_multinomial_counts.py tests/test_place.py \
          tests/test_alias_segments.py -k cuda > "$LOG/sanitizer.log" 2>&1
        echo "sanitizer rc=$? $(grep -E 'ERROR SUMMARY|passed|failed' "$LOG/sanitizer.log" | tail -2 | tr '\n' ' ')"
      fi
      ;;
    bench)
      for n in $(echo 2 "$(nvidia-smi -L | wc -l)" | tr ' ' '\n' | sort -u); do
        timeout 300 torchrun --nproc_per_node=$n -m torch_wrs.benchmark distributed 2>&1 | grep -v -E "UserWarning|return func|\[W[0-9]|OMP_NUM" | tee "$LOG/bench$n.log" | tail -20
      done
      ;;
    ranks)
      timeout 300 python3 -m torch_wrs.benchmark distributed --one-gpu-ranks 2 4 2>&1 | tee "$LOG/ranks.log"
      ;;
    lda)
      for n in $(echo 1 2 "$(nvidia-smi -L | wc -l)" | tr ' ' '\n' | sort -un); do
        timeout 200 torchrun --nproc_per_node=$n examples/lda_gibbs.py --synthetic nytimes --iters 60 --mh-cycles 32 \
          --target "$TARGET" --history "$LOG/lda32_$n.json" 2>&1 | grep -E "^\| |corpus|set-up|peak|Error" | tee "$LOG/lda32_$n.log"
      done
      ;;
    lda4)
      for n in $(echo 1 2 "$(nvidia-smi -L | wc -l)" | tr ' ' '\n' | sort -un); do
        timeout 100 torchrun --nproc_per_node=$n examples/lda_gibbs.py --synthetic nytimes --iters 30 \
          --target -8.7 --history "$LOG/lda4_$n.json" 2>&1 | grep -E "^\| |peak" | tee "$LOG/lda4_$n.log"
      done
      ;;
    pubmed)
      for n in 1 2; do
        timeout 280 torchrun --nproc_per_node=$n examples/lda_gibbs.py --synthetic pubmed --iters "${PUBMED_ITERS:-12}" \
          --target "${PUBMED_TARGET:--9.0}" --history "$LOG/pubmed_$n.json" 2>&1 | grep -E "^\| |corpus|peak|Error|error" | tee "$LOG/pubmed_$n.log"
      done
      ;;
  esac
done
echo "== $(head -1 "$LOG/gpu.txt") x $(nvidia-smi -L | wc -l): $(grep -E 'passed|failed' "$LOG/tests.log" 2>/dev/null | tail -1)"
