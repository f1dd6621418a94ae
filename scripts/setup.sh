#!/usr/bin/env bash
# Installs what dnnfusion needs on a fresh Debian 12 machine and builds it; safe to re-run:
# each step is skipped when its result is already there.
#   - Debian packages: a C++ compiler, GoogleTest, Python venv support, OpenCL (headers, ICD
#     loader, PoCL's CPU device) for the fpga target
#   - a virtualenv OUTSIDE the checkout ($DNNFUSION_VENV, default ~/.venvs/dnnfusion), so fresh
#     clones reuse it instead of reinstalling gigabytes of torch
#   - Python packages pinned in requirements.txt (torch==2.14.1, torchvision==0.29.1, ...)
#   - the cuda target's toolchain where the machine lacks it: NVRTC, ptxas, nvdisasm (PyPI wheels)
#   - the build: pip install --no-build-isolation -e . (CMake; incremental in build/)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${DNNFUSION_VENV:-$HOME/.venvs/dnnfusion}"

need_apt=()
command -v g++ >/dev/null 2>&1 || need_apt+=(g++)
[ -f /usr/include/gtest/gtest.h ] || need_apt+=(libgtest-dev)
python3 -c "import ensurepip, venv" >/dev/null 2>&1 || need_apt+=(python3-venv)
# The fpga target's OpenCL: headers, the ICD loader, and PoCL's CPU device (development and CI).
[ -f /usr/include/CL/cl.h ] || need_apt+=(opencl-headers)
grep -q 'libOpenCL\.so\.1 ' <<<"$(PATH="$PATH:/sbin:/usr/sbin" ldconfig -p 2>/dev/null)" || need_apt+=(ocl-icd-opencl-dev)
ls /etc/OpenCL/vendors/pocl*.icd >/dev/null 2>&1 || need_apt+=(pocl-opencl-icd)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "[setup] apt-get install ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if [ ! -x "$VENV/bin/python" ]; then
  echo "[setup] creating virtualenv $VENV"
  python3 -m venv "$VENV"
fi
PY="$VENV/bin/python"

if ! "$PY" -c "import torch, torchvision, transformers, pytest, pybind11, numpy, tqdm, cmake, ninja, setuptools, sklearn; assert torch.__version__.startswith('2.14.1') and int(setuptools.__version__.split('.')[0]) >= 70" >/dev/null 2>&1; then
  echo "[setup] pip install -r requirements.txt"
  "$PY" -m pip install -q -r "$ROOT/requirements.txt"
fi

# The cuda target's toolchain (dnnfusion.cuda; no GPU needed to build, emulate or test kernels):
# NVRTC (CUDA C -> PTX; a CUDA build of torch brings it), ptxas (PTX -> cubin; a CUDA toolkit's,
# else PyPI's nvidia-cuda-nvcc) and nvdisasm (SASS statistics).
SITE="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
cuda_pkgs=()
ls "$SITE"/nvidia/*/lib/libnvrtc.so* >/dev/null 2>&1 || cuda_pkgs+=(nvidia-cuda-nvrtc)
{ command -v ptxas || ls /usr/local/cuda/bin/ptxas "$SITE"/nvidia/*/bin/ptxas; } >/dev/null 2>&1 || cuda_pkgs+=(nvidia-cuda-nvcc)
ls "$SITE"/nvidia/*/bin/nvdisasm >/dev/null 2>&1 || command -v nvdisasm >/dev/null 2>&1 || cuda_pkgs+=(nvidia-cuda-nvdisasm)
if [ ${#cuda_pkgs[@]} -gt 0 ]; then
  echo "[setup] pip install ${cuda_pkgs[*]}"
  "$PY" -m pip install -q "${cuda_pkgs[@]}"
fi

export PATH="$VENV/bin:$PATH"
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"
echo "[setup] building dnnfusion (incremental)"
"$PY" -m pip install -q --no-build-isolation --use-pep517 --no-deps -e "$ROOT"
"$PY" -c "import dnnfusion._C" || { echo "[setup] dnnfusion._C failed to import" >&2; exit 1; }
echo "[setup] ready: $PY"
