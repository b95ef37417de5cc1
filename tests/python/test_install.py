"""`pip install ./python` as a user would run it: into a fresh venv over Debian's python3
(--system-site-packages, so numpy is there; no network: --no-index, --no-build-isolation), then
import and sample with the library the package installed. The CMake build reuses
$DISTSAMPLE_BUILD_DIR (ctest passes its own build directory, so only the targets of the two
libraries are checked)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_pip_install_then_sample(tmp_path):
    build_dir = os.environ.get("DISTSAMPLE_BUILD_DIR")
    if not build_dir:
        pytest.skip("set DISTSAMPLE_BUILD_DIR to a configured CMake build directory to reuse (ctest does)")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=120)
    env = {k: v for k, v in os.environ.items() if k not in ("DISTSAMPLE_LIBRARY", "DISTSAMPLE_RANK_LIBRARY")}
    python = str(venv / "bin" / "python")
    done = subprocess.run([python, "-m", "pip", "install", "--no-index", "--no-build-isolation", str(ROOT / "python")],
                          env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    script = ("import distsample, numpy as np\n"
              "print(distsample.LIBRARY_PATH)\n"
              "print(distsample.sample(np.eye(3, dtype=np.float32) * 5, temperature=0).tolist())\n"
              "from distsample import _rank\n"
              "print(_rank._lib()._name)\n")
    done = subprocess.run([python, "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    library, tokens, rank_library = done.stdout.splitlines()
    assert library.startswith(str(venv)) and library.endswith("distsample/libdistsample.so")
    assert rank_library.startswith(str(venv)) and rank_library.endswith("distsample/libdistsample_rank.so")
    assert tokens == "[0, 1, 2]"
