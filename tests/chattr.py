"""``chattr +i`` for tests of storage faults (issue 24): files and directories made immutable
for real, on the machine's own file system, and always made mutable again.

Needs root and a file system with the immutable attribute (ext4 here); a test that cannot have
it is skipped with the reason printed."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest


def require_chattr(where: Path) -> None:
    """Skip (saying why) unless ``chattr +i`` works in ``where``."""
    if shutil.which("chattr") is None:
        pytest.skip("chattr is not installed")
    if os.geteuid() != 0:
        pytest.skip("chattr +i needs root")
    with tempfile.NamedTemporaryFile(dir=where) as probe:
        done = subprocess.run(
            ["chattr", "+i", probe.name], capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            pytest.skip(f"chattr +i fails here: {done.stderr.strip()}")
        subprocess.run(["chattr", "-i", probe.name], check=True)


def set_immutable(paths: Sequence[Path], on: bool) -> None:
    existing = [str(p) for p in paths if p.exists()]
    if existing:
        subprocess.run(["chattr", "+i" if on else "-i", *existing], check=True)


@contextlib.contextmanager
def immutable(paths: Sequence[Path]) -> Iterator[None]:
    """``paths`` (those that exist) immutable inside the block, mutable again after it."""
    try:
        set_immutable(paths, True)
        yield
    finally:
        set_immutable(paths, False)


def store_paths(db: Path) -> list[Path]:
    """A store's directory, database, WAL and (if any) ``-shm``."""
    return [db.parent, db, Path(f"{db}-wal"), Path(f"{db}-shm")]
