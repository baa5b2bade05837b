"""Builds torch_wrs._C: a CUDAExtension when torch has CUDA and nvcc is found, else CPU only.

Install with `pip install --no-build-isolation -e .` so the build uses the torch
already installed (build isolation would download another one).
"""
import glob
import os

import torch
from setuptools import find_packages, setup
from torch.utils import cpp_extension

ROOT = os.path.dirname(os.path.abspath(__file__))


def sources(pattern):
    return sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "csrc", "**", pattern), recursive=True))


def want_cuda():
    if os.environ.get("TORCH_WRS_FORCE_CPU", "0") == "1":
        return False
    return torch.version.cuda is not None and cpp_extension.CUDA_HOME is not None


# No fused multiply-adds on the host: exact quantization relies on each rounding step.
cxx_flags = ["-O3", "-fopenmp", "-std=c++17", "-ffp-contract=off"]
# Link the shared libstdc++ explicitly: where the toolchain has only the static archive
# next to g++ (seen on the GPU image), a private copy of the iostream/locale code lands
# in _C.so and crashes the first time it formats a number against torch's shared copy.
link_flags = ["-fopenmp", "-l:libstdc++.so.6"]
include_dirs = [os.path.join(ROOT, "csrc")]
if want_cuda():
    # The arch list comes from TORCH_CUDA_ARCH_LIST or, unset, the GPU present (sm_90 on H100/H200).
    ext = cpp_extension.CUDAExtension(
        "torch_wrs._C",
        sources("*.cpp") + sources("*.cu"),
        include_dirs=include_dirs,
        define_macros=[("WITH_CUDA", None)],
        extra_compile_args={"cxx": cxx_flags, "nvcc": ["-O3", "--expt-relaxed-constexpr", "-lineinfo"]},
        extra_link_args=link_flags,
    )
else:
    ext = cpp_extension.CppExtension(
        "torch_wrs._C",
        sources("*.cpp"),
        include_dirs=include_dirs,
        extra_compile_args={"cxx": cxx_flags},
        extra_link_args=link_flags,
    )

setup(
    name="torch_wrs",
    version="0.3.0",
    description="Weighted random sampling and gamma variates for PyTorch (CPU and CUDA custom ops)",
    packages=find_packages(include=["torch_wrs", "torch_wrs.*"]),
    ext_modules=[ext],
    cmdclass={"build_ext": cpp_extension.BuildExtension.with_options(no_python_abi_suffix=True)},
    python_requires=">=3.9",
    install_requires=["torch>=2.4"],
)
