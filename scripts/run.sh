#!/usr/bin/env bash
# The two entry points of the README:
#   bash scripts/run.sh demo   build torch_wrs and run examples/demo.py
#   bash scripts/run.sh test   build torch_wrs and run every test (pytest, then the C++ TorchScript and AOTInductor tests)
#   bash scripts/run.sh sweep  build torch_wrs and run the multinomial sweep against torch on the CPU
#   bash scripts/run.sh gamma-sweep   the same for standard_gamma, dirichlet and beta
#   bash scripts/run.sh contended-sweep   multinomial against torch while busy loops compete for the cores
#   bash scripts/run.sh docs   build the documentation site (Sphinx, warnings as errors) into build/docs
#   bash scripts/run.sh wheel  build the wheel (pip wheel .), install it into a clean venv, run its smoke test
# It uses the python3 that already has torch (the GPU machine) and otherwise makes .venv
# with the CPU build of torch 2.13, and builds the extension in place (PYTHONPATH is set to
# this folder; `pip install --no-build-isolation -e .` makes it importable from anywhere).
# Extra arguments go to pytest or to the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
what="${1:-}"
shift || true

if [ -x .venv/bin/python ]; then
  PY=.venv/bin/python
elif python3 -c "import torch" 2>/dev/null; then
  PY=python3
else
  echo "== no torch here: making .venv with the CPU build of torch 2.13"
  python3 -m venv .venv
  PY=.venv/bin/python
  $PY -m pip install -q --upgrade pip
  $PY -m pip install -q "torch==2.13.0"
fi
$PY -c "import numpy, scipy, pytest, setuptools" 2>/dev/null ||
  $PY -m pip install -q numpy scipy pytest setuptools wheel
$PY -c "import ninja" 2>/dev/null || $PY -m pip install -q ninja || true

# In place and incremental (ninja): an unchanged tree builds nothing, a changed one only
# what changed. The first build compiles everything (minutes on two cores).
mkdir -p build
echo "== building torch_wrs in place with $($PY -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda)') (only what changed; log: build/build.log)"
t0=$SECONDS
MAX_JOBS="${MAX_JOBS:-$(nproc)}" $PY setup.py build_ext --inplace > build/build.log 2>&1 || { tail -40 build/build.log; exit 1; }
echo "== built in $((SECONDS - t0)) s"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
$PY -c "import torch_wrs" # fails loudly if the build did not produce the extension

case "$what" in
  demo)
    exec $PY examples/demo.py "$@"
    ;;
  sweep)
    exec $PY -m torch_wrs.benchmark sweep --device cpu "$@"
    ;;
  gamma-sweep)
    exec $PY -m torch_wrs.benchmark gamma-sweep --device cpu "$@"
    ;;
  contended-sweep)
    exec $PY -m torch_wrs.benchmark contended-sweep --device cpu "$@"
    ;;
  docs)
    $PY -c "import sphinx, myst_parser" 2>/dev/null || $PY -m pip install -q sphinx myst-parser
    echo "== the documentation site (warnings are errors): build/docs/index.html"
    exec $PY -m sphinx -W --keep-going -q -b html docs build/docs "$@"
    ;;
  wheel)
    echo "== pip wheel . into build/wheel, then a clean venv with torch 2.13 and the wheel (a few minutes)"
    rm -rf build/wheel build/wheel-venv
    $PY -m pip wheel -q --no-build-isolation --no-deps -w build/wheel . > build/wheel.log 2>&1 || { tail -40 build/wheel.log; exit 1; }
    ls build/wheel
    $PY -m venv build/wheel-venv
    torch_version="$($PY -c 'import torch; print(torch.__version__.split("+")[0])')"
    # Without PYTHONPATH (this checkout): pip would take its egg-info for the package installed.
    unset PYTHONPATH
    build/wheel-venv/bin/python -m pip install -q "torch==$torch_version" numpy build/wheel/torch_wrs-*.whl
    # From outside the checkout, so that the installed package is the one imported.
    cd /tmp && exec "$OLDPWD/build/wheel-venv/bin/python" "$OLDPWD/scripts/wheel_smoke.py"
    ;;
  test)
    # Optional test dependencies: their tests skip, saying why, where these do not install.
    $PY -c "import torch_geometric" 2>/dev/null || $PY -m pip install -q torch_geometric > build/optional.log 2>&1 ||
      echo "== torch_geometric did not install (see build/optional.log): its adapter's tests skip"
    $PY -c "import torchrl, gymnasium" 2>/dev/null || $PY -m pip install -q torchrl gymnasium >> build/optional.log 2>&1 ||
      echo "== torchrl or gymnasium did not install (see build/optional.log): the TorchRL adapter's tests skip"
    $PY -m pytest tests -q -p no:cacheprovider "$@"
    echo "== C++: LibTorch build, then the TorchScript and AOTInductor tests (they load what pytest exported)"
    prefix="$($PY -c 'import torch; print(torch.utils.cmake_prefix_path)')"
    mkdir -p build
    cmake -S . -B build/cmake -DCMAKE_PREFIX_PATH="$prefix" -DPython3_EXECUTABLE="$(command -v $PY)" > build/cmake.log 2>&1 ||
      { cat build/cmake.log; exit 1; }
    cmake --build build/cmake -j "$(nproc)" >> build/cmake.log 2>&1 || { tail -50 build/cmake.log; exit 1; }
    ctest --test-dir build/cmake --output-on-failure
    ;;
  *)
    echo "usage: bash scripts/run.sh demo|test|sweep|gamma-sweep|contended-sweep|docs|wheel [args]" >&2
    exit 2
    ;;
esac
