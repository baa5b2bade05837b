#!/usr/bin/env bash
# On a GPU machine: build, then the drop-ins' tests on CUDA: multinomial's errors, PyTorch's
# own tests ported (tests/test_upstream_*.py), gamma, Dirichlet and Beta with their
# gradients, and torch.export + AOTInductor. Logs to $OUT.
#   bash scripts/gpu_drop_ins.sh
source "$(dirname "$0")/gpu_build.sh"
timeout 480 python3 -m pytest -q -p no:cacheprovider tests/test_upstream_torch.py tests/test_upstream_distributions.py \
  tests/test_multinomial.py tests/test_dirichlet_beta.py tests/test_gamma_grad.py tests/test_gamma.py \
  tests/test_export_aoti.py -rs 2>&1 | tee "$LOG/drop_ins.log" | tail -15
echo "== $(head -1 "$LOG/gpu.txt"): $(grep -E 'passed|failed' "$LOG/drop_ins.log" | tail -1)"
