"""The package under test is python/distsample of this checkout, loading $DISTSAMPLE_LIBRARY (default:
build/lib/libdistsample.so) and, for WorkerRank, $DISTSAMPLE_RANK_LIBRARY (default:
build/lib/libdistsample_rank.so; empty: none); `distsample kernel` is $DISTSAMPLE_CLI (default:
build/bin/distsample). The `rank_library` fixture skips the tests that need WorkerRank without it."""

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
os.environ.setdefault("DISTSAMPLE_LIBRARY", str(ROOT / "build" / "lib" / "libdistsample.so"))
os.environ.setdefault("DISTSAMPLE_RANK_LIBRARY", str(ROOT / "build" / "lib" / "libdistsample_rank.so"))


@pytest.fixture(scope="session")
def cli():
    path = os.environ.get("DISTSAMPLE_CLI", str(ROOT / "build" / "bin" / "distsample"))
    if not os.path.isfile(path):
        pytest.skip(f"no distsample CLI at {path} (set DISTSAMPLE_CLI)")
    return path


@pytest.fixture(scope="session")
def rank_library():
    path = os.environ.get("DISTSAMPLE_RANK_LIBRARY", "")
    if not os.path.isfile(path):
        pytest.skip(f"no libdistsample_rank.so at {path!r} (DISTSAMPLE_RANK_LIBRARY; builds without UCX have none)")
    return path
