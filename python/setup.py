"""Builds libdistsample.so and libdistsample_rank.so (the CMake targets distsample_c and
distsample_rank_c of the repository this folder is in) and puts them inside the package. The build
directory is $DISTSAMPLE_BUILD_DIR, else build-python/ at the repository root; a directory without
a CMakeCache.txt is configured first (tests off, plus $DISTSAMPLE_CMAKE_ARGS), one that has it is
used as it is configured. Only those two targets are built."""

import os
import shlex
import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

ROOT = Path(__file__).resolve().parent.parent


LIBRARIES = {"distsample_c": "libdistsample.so", "distsample_rank_c": "libdistsample_rank.so"}  # target: file


def build_libraries():
    build_dir = Path(os.environ.get("DISTSAMPLE_BUILD_DIR") or ROOT / "build-python").resolve()
    if not (build_dir / "CMakeCache.txt").is_file():
        args = ["cmake", "-S", str(ROOT), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release",
                "-DDISTSAMPLE_BUILD_TESTS=OFF"]
        if shutil.which("ccache"):
            args += ["-DCMAKE_CXX_COMPILER_LAUNCHER=ccache", "-DCMAKE_CUDA_COMPILER_LAUNCHER=ccache"]
        subprocess.run(args + shlex.split(os.environ.get("DISTSAMPLE_CMAKE_ARGS", "")), check=True)
    jobs = str(os.cpu_count() or 2)
    subprocess.run(["cmake", "--build", str(build_dir), "--target", *LIBRARIES, "-j", jobs], check=True)
    return [build_dir / "lib" / name for name in LIBRARIES.values()]


class BuildWithLibrary(build_py):
    def run(self):
        super().run()
        target = Path(self.build_lib) / "distsample"
        target.mkdir(parents=True, exist_ok=True)
        for library in build_libraries():
            shutil.copy2(library, target / library.name)


class BinaryDistribution(Distribution):
    """The wheel holds a native library: tag it for this platform."""

    def has_ext_modules(self):
        return True


commands = {"build_py": BuildWithLibrary}
try:
    from wheel.bdist_wheel import bdist_wheel

    class AnyPythonWheel(bdist_wheel):
        """The library is loaded with ctypes, not imported: one wheel serves every Python 3."""

        def get_tag(self):
            return "py3", "none", super().get_tag()[2]

    commands["bdist_wheel"] = AnyPythonWheel
except ImportError:  # no wheel package: plain installs still work
    pass

setup(cmdclass=commands, distclass=BinaryDistribution)
