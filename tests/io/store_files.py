"""Unusable stores made for real on disk: damaged, truncated, not a database, read-only.

Read-only needs care: the tests run as root, and root writes a 0444 file in a 0555 directory
as if the bits were not there. :func:`make_read_only` therefore also sets the immutable
attribute (``chattr +i``), which stops root too; where neither works (root on a filesystem
without ``chattr``) it skips, since a test that cannot make the file unwritable proves nothing.
Whatever it made unwritable is made writable again by :func:`writable_again`, so ``tmp_path``
can be cleaned up.
"""

from __future__ import annotations

import contextlib
import random
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from solver.io.store.sqlite_store import Store
from tests.io.store_helpers import record, signed_quote

KINDS = ("damaged", "truncated", "text", "read-only", "read-only directory")
WORDS = {
    "damaged": "is damaged (integrity check: ",
    "truncated": "is damaged (integrity check: ",
    "text": "is not a SQLite database",
    "read-only": "is read-only",
    "read-only directory": "is read-only",
}
"""What the error line says about each kind of store, after ``the store PATH ``."""


def good_store(path: Path, quotes: int = 300) -> Path:
    """A store with enough quotes to span many pages (so damage lands on a used b-tree page)."""
    with Store(path, checkpoint_every_s=None) as store:
        record(store, *(signed_quote(f"q{i:04d}") for i in range(quotes)))
    return path


def garble(path: Path) -> None:
    """Overwrite one page in the middle of the file with fixed noise: SQLite still opens and
    reads the file, and only the integrity check finds the damage."""
    size = path.stat().st_size
    assert size > 16 * 4096, "too small a store to damage in the middle"
    with path.open("r+b") as file:
        file.seek(size // 2 // 4096 * 4096)
        file.write(random.Random(10).randbytes(4096))


def truncate(path: Path) -> None:
    size = path.stat().st_size
    with path.open("r+b") as file:
        file.truncate(size // 2)


def _chattr(flag: str, path: Path) -> bool:
    if shutil.which("chattr") is None:
        return False
    done = subprocess.run(["chattr", flag, str(path)], capture_output=True, check=False)
    return done.returncode == 0


def _unwritable_file(path: Path) -> bool:
    try:
        with path.open("r+b"):
            return False
    except PermissionError:
        return True


def _unwritable_directory(directory: Path) -> bool:
    probe = directory / ".write-probe"
    try:
        probe.touch()
    except PermissionError:
        return True
    probe.unlink()
    return False


def make_read_only(path: Path, *, directory_only: bool = False) -> list[Path]:
    """chmod 0444 the file (unless ``directory_only``) and 0555 its directory, then ``chattr +i``
    what is still writable (root); skip when that cannot be done. Returns what was made
    immutable, for :func:`writable_again`."""
    immutable: list[Path] = []
    directory = path.parent
    targets: list[tuple[Path, Callable[[Path], bool]]] = [(directory, _unwritable_directory)]
    if not directory_only:
        targets.insert(0, (path, _unwritable_file))
    for target, unwritable in targets:
        target.chmod(0o555 if target.is_dir() else 0o444)
        if not unwritable(target):
            if _chattr("+i", target):
                immutable.append(target)
            if not unwritable(target):
                writable_again(immutable, path)
                pytest.skip(f"cannot make {target} unwritable here (root, and no chattr +i)")
    return immutable


def writable_again(immutable: list[Path], path: Path) -> None:
    for target in immutable:
        _chattr("-i", target)
    path.parent.chmod(0o755)
    if path.exists():
        path.chmod(0o644)


@contextlib.contextmanager
def unusable_store(kind: str, directory: Path) -> Iterator[Path]:
    """A store file of ``kind`` (one of :data:`KINDS`) in ``directory``, undone on exit."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "bot.db"
    immutable: list[Path] = []
    if kind == "text":
        path.write_text("timestamp,quote_id\n2025-01-01,q1\n" * 200, encoding="utf-8")
    else:
        good_store(path)
        if kind == "damaged":
            garble(path)
        elif kind == "truncated":
            truncate(path)
        elif kind in ("read-only", "read-only directory"):
            immutable = make_read_only(path, directory_only=kind == "read-only directory")
        else:
            raise AssertionError(kind)
    try:
        yield path
    finally:
        writable_again(immutable, path)
