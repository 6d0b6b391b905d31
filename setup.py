"""Builds the Python module kev_native with this tree's CMake (pyproject.toml says how to call it).

The extension kev_native/_core is CMake's target kev_native_core (python/CMakeLists.txt), built
for the interpreter running this script in build/pip-<python version>/ and copied into the wheel
beside python/kev_native/*.py. KEV_CMAKE_ARGS adds CMake options; KEV_JOBS sets the build jobs.
"""
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


def version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        return re.search(r"project\(kev-native VERSION ([0-9.]+)", f.read()).group(1)


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build = os.path.join(ROOT, "build", f"pip-{sys.version_info[0]}.{sys.version_info[1]}")
        args = ["-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release", "-DKEV_TESTS=OFF",
                "-DKEV_BENCH=OFF", "-DKEV_CLI_DOCS=OFF", "-DKEV_PYTHON_MODULE=ON",
                f"-DPython_EXECUTABLE={sys.executable}"]
        if shutil.which("ninja"):
            args += ["-G", "Ninja"]
        if shutil.which("ccache"):
            args += ["-DCMAKE_CXX_COMPILER_LAUNCHER=ccache", "-DCMAKE_C_COMPILER_LAUNCHER=ccache"]
        args += shlex.split(os.environ.get("KEV_CMAKE_ARGS", ""))
        subprocess.run(["cmake", *args], check=True)
        subprocess.run(["cmake", "--build", build, "--target", "kev_native_core",
                        "-j", os.environ.get("KEV_JOBS", str(os.cpu_count() or 1))], check=True)
        built = os.path.join(build, "python", "kev_native",
                             "_core" + sysconfig.get_config_var("EXT_SUFFIX"))
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(built, target)


setup(
    version=version(),
    packages=["kev_native"],
    package_dir={"kev_native": "python/kev_native"},
    package_data={"kev_native": ["py.typed", "*.pyi"]},
    ext_modules=[Extension("kev_native._core", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
)
