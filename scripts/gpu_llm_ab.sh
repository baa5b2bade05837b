#!/usr/bin/env bash
# On a GPU machine: the LLM cells of scripts/llm_ab.py for the tree as carried and for the
# tree with each patch applied alone (rebuilt incrementally in place), alternated twice, so
# that kernel changes compare in one call on one GPU. Logs to $OUT.
# PASSES (default 2) sets the alternations; DISTS="heavy peaked" adds llm_ab.py's peaked rows;
# TEST=NAME then tests that build (gpu_llm.sh); CONTROLS="none,top-p 0.9" limits the controls timed, CELLS="128x128256" the shapes.
#   PASSES=1 TEST=b bash scripts/gpu_llm_ab.sh build/ab/a.patch build/ab/b.patch
export SKIP_BUILD=1
source "$(dirname "$0")/gpu_build.sh"
build() { MAX_JOBS=16 python3 setup.py build_ext --inplace > "$LOG/build_$1.log" 2>&1 || { tail -30 "$LOG/build_$1.log"; exit 1; }
          mkdir -p "$LOG/so/$1" && cp torch_wrs/_C*.so "$LOG/so/$1/"; }
t0=$SECONDS; build base; echo "build base: $((SECONDS - t0)) s"
for p in "$@"; do
  n=$(basename "$p" .patch); t0=$SECONDS
  patch -s -p1 < "$p" && build "$n" && patch -s -R -p1 < "$p"; echo "build $n: $((SECONDS - t0)) s"
done
for pass in $(seq "${PASSES:-2}"); do
  for n in base "$@"; do
    n=$(basename "$n" .patch); cp "$LOG/so/$n/"_C*.so torch_wrs/
    for dist in ${DISTS:-heavy}; do
      DIST=$dist PYTHONPATH=. timeout 150 python3 scripts/llm_ab.py "$n" 2>&1 | grep -v "^FlashInfer headers" >> "$LOG/ab.txt"
    done
  done
done
python3 - "$LOG/ab.txt" <<'PY'
import collections, statistics, sys
t = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) > 10 and f[0] != "Traceback":
        cell = " ".join(f[1:-8])
        t[(cell, f[0])].append((float(f[-7]), float(f[-5]), float(f[-3])))
labels = list(dict.fromkeys(k[1] for k in t))
cells = list(dict.fromkeys(k[0] for k in t))
print("cell".ljust(34) + "".join(f"{l:>18s}" for l in labels) + "        FI   (eager/graph ms, min of passes)")
for c in cells:
    row = [t[(c, l)] for l in labels]
    print(c.ljust(34) + "".join(f"{min(x[0] for x in r):8.4f}/{min(x[1] for x in r):.4f}" if r else " " * 18 for r in row)
          + f"  {min(x[2] for x in row[0]):.4f}")
PY
# TEST=NAME: then the LLM GPU tests and compute-sanitizer (gpu_llm.sh) on that build; else the tree's build stays
[ -n "${TEST:-}" ] && cp "$LOG/so/$TEST/"_C*.so torch_wrs/ && bash "$(dirname "$0")/gpu_llm.sh"
[ -z "${TEST:-}" ] && cp "$LOG/so/base/"_C*.so torch_wrs/
rm -rf "$LOG/so"
