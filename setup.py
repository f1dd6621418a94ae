"""Builds dnnfusion: CMake compiles the plain C++17 core and the dnnfusion._C bridge.

`pip install --no-build-isolation .` (or `-e .`) needs torch and pybind11 already installed,
since the extension is compiled against the torch in the current environment.
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        import pybind11
        import torch
        from torch.utils.cpp_extension import include_paths

        out_path = Path(self.get_ext_fullpath(ext.name)).resolve()
        build_dir = Path(os.environ.get("DNNFUSION_BUILD_DIR", ROOT / "build" / "py"))
        build_dir.mkdir(parents=True, exist_ok=True)
        cfg = os.environ.get("DNNFUSION_BUILD_TYPE", "Release")
        args = [
            f"-DCMAKE_BUILD_TYPE={cfg}",
            "-DDNNFUSION_BUILD_PYTHON=ON",
            "-DDNNFUSION_BUILD_TESTS=OFF",
            f"-DPython3_EXECUTABLE={sys.executable}",
            f"-DCMAKE_PREFIX_PATH={pybind11.get_cmake_dir()}",
            "-DDNNF_TORCH_INCLUDE_DIRS=" + ";".join(include_paths()),
            f"-DDNNF_TORCH_LIBRARY_DIR={Path(torch.__file__).parent / 'lib'}",
            f"-DDNNF_TORCH_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
            f"-DCMAKE_LIBRARY_OUTPUT_DIRECTORY={out_path.parent}",
        ]
        if os.environ.get("DNNFUSION_SANITIZE"):  # scripts/sanitize.sh --python
            args.append(f"-DDNNFUSION_SANITIZE={os.environ['DNNFUSION_SANITIZE']}")
        if shutil.which("ninja"):
            args.append("-GNinja")
        subprocess.check_call(["cmake", str(ROOT), *args], cwd=build_dir)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
        subprocess.check_call(["cmake", "--build", ".", "--target", "_C", "-j", jobs], cwd=build_dir)
        built = next(build_dir.rglob("_C*.so"), None)
        if built is None:
            built = next(out_path.parent.glob("_C*.so"))
        out_path.parent.mkdir(parents=True, exist_ok=True)
        if built.resolve() != out_path:
            shutil.copy2(built, out_path)
        # Editable installs import the package from the checkout: put the extension there too.
        if getattr(self, "editable_mode", False) or self.inplace:
            inplace = ROOT / "dnnfusion" / out_path.name
            if inplace.resolve() != out_path:
                shutil.copy2(out_path, inplace)


setup(
    name="dnnfusion",
    version="0.1.0",
    description="Operator-fusion inference compiler for PyTorch (torch.compile backend) with a C++17 core",
    packages=find_packages(include=["dnnfusion", "dnnfusion.*"]),
    ext_modules=[CMakeExtension("dnnfusion._C")],
    cmdclass={"build_ext": CMakeBuild},
    python_requires=">=3.10",
    install_requires=["torch==2.14.1"],
    extras_require={"test": ["pytest", "torchvision==0.29.1", "transformers", "tqdm"]},
    entry_points={"torch_dynamo_backends": ["dnnfusion = dnnfusion.backend:dnnfusion_backend"]},
    zip_safe=False,
)
