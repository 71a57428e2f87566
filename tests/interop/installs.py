"""The interop suite's two installs (the npm clients' ``node_modules`` and py-near's venv), each
under its own file lock, so they can start in the background when the test run starts and the
tests that need them only wait for what is left.

Why: on CI's clean machine the two installs took 84 s of one xdist worker's time (``npm ci``
56 s, py-near's venv 28 s), nearly all of it waiting on the registry. Started by the root
conftest as a background process when the run begins (:func:`start`), they overlap with the
tests that need CPU, and the suite's wall time drops by about that much (docs/testing.md,
"The time budget").

Either way gives the same result: whoever takes a lock first installs, the other finds the
stamp (the sha256 of the lockfile or requirements file recorded after a successful install) and
does nothing. A failed background install is retried by the fixture, which reports its error.
This module uses only the standard library: the background process starts in a fraction of a
second.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
LOCKFILE = HERE / "package-lock.json"
MODULES = HERE / "node_modules"
NPM_STAMP = MODULES / ".interop-lockfile.sha256"
NPM_CI_TIMEOUT_S = 300

PYNEAR = HERE / "pynear"
REQUIREMENTS = PYNEAR / "requirements.txt"
VENV = PYNEAR / ".venv"
PYNEAR_PYTHON = VENV / "bin" / "python"
PYNEAR_STAMP = VENV / ".interop-requirements.sha256"
PIP_TIMEOUT_S = 600

LOG = HERE / ".installs.log"
"""What the background process printed (gitignored); its timings are quoted by the fixtures."""
LOCK_WAIT_S = PIP_TIMEOUT_S + 60
"""Longest a fixture waits for the other holder of a lock: its own timeouts end it sooner."""


def missing_tools() -> str | None:
    """Why the npm clients cannot run here, or None."""
    missing = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
    return f"{' and '.join(missing)} not on PATH" if missing else None


def covers_interop(args: list[str], cwd: Path) -> bool:
    """Whether a pytest run with these path arguments (relative to ``cwd``; a node id's
    ``::…`` ignored) includes this folder: a whole-suite run does, ``tests/core`` does not."""
    for arg in args:
        path = (cwd / arg.split("::")[0]).resolve()
        if path == HERE or HERE.is_relative_to(path) or path.is_relative_to(HERE):
            return True
    return False


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@contextlib.contextmanager
def held(name: str, wait_s: float = LOCK_WAIT_S) -> Iterator[None]:
    """The lock ``name`` (a file beside this module), waited for at most ``wait_s``."""
    path = HERE / f".{name}.lock"
    with path.open("a") as handle:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"{path} still held after {wait_s} s (another {name} install)"
                    ) from None
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _run(command: list[str], cwd: Path | None, timeout_s: int) -> str | None:
    """None when ``command`` succeeded, else the tail of what it printed."""
    try:
        done = subprocess.run(
            command, cwd=cwd, capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired:
        return f"{' '.join(command[:3])} … ran longer than {timeout_s} s"
    if done.returncode == 0:
        return None
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    return "\n".join(lines[-20:]) if lines else f"exit status {done.returncode}"


def npm_install() -> tuple[str | None, float | None]:
    """``npm ci`` from the lockfile unless the kept node_modules was installed from it:
    (the error or None, the seconds it took or None when nothing was installed)."""
    with held("npm"):
        wanted = _sha256(LOCKFILE)
        installed = NPM_STAMP.read_text().strip() if NPM_STAMP.exists() else None
        if installed == wanted and (MODULES / ".package-lock.json").exists():
            return None, None
        started = time.monotonic()
        command = ["npm", "ci", "--no-audit", "--no-fund", "--ignore-scripts", "--loglevel=error"]
        failure = _run(command, HERE, NPM_CI_TIMEOUT_S)
        if failure is None:
            NPM_STAMP.write_text(wanted + "\n")
        return failure, time.monotonic() - started


def pynear_install() -> tuple[str | None, float | None]:
    """py-near's venv from ``requirements.txt`` unless it was installed from this file:
    (the error or None, the seconds it took or None when nothing was installed)."""
    with held("pynear"):
        wanted = _sha256(REQUIREMENTS)
        stamp = PYNEAR_STAMP.read_text().strip() if PYNEAR_STAMP.exists() else None
        if PYNEAR_PYTHON.exists() and stamp == wanted:
            return None, None
        started = time.monotonic()
        failure = _run([sys.executable, "-m", "venv", "--clear", str(VENV)], None, 120) or _run(
            [
                str(PYNEAR_PYTHON),
                *("-m", "pip", "install", "--quiet", "--no-input"),
                *("--disable-pip-version-check", "-r", str(REQUIREMENTS)),
            ],
            None,
            PIP_TIMEOUT_S,
        )
        if failure is None:
            PYNEAR_STAMP.write_text(wanted + "\n")
        return failure, time.monotonic() - started


def start(log: Path = LOG) -> subprocess.Popen[bytes]:
    """Both installs in a background process (``python -m tests.interop.installs``), its output
    in ``log``; the caller ends it when the run ends (:func:`stop`)."""
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.interop.installs"],
            cwd=HERE.parent.parent,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        )


def stop(process: subprocess.Popen[bytes]) -> None:
    """The background installs ended: waited for when the interop tests ran (they took the
    locks after it), terminated when they did not run (a run that deselected them)."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def main() -> int:
    """Run both installs at once (threads: both wait on the network), printing what each did."""
    results: dict[str, tuple[str | None, float | None]] = {}

    def run(name: str) -> None:
        try:
            results[name] = npm_install() if name == "npm" else pynear_install()
        except Exception as exc:  # reported; the fixture retries and says why
            results[name] = (f"{type(exc).__name__}: {exc}", None)

    names = ["pynear"] if missing_tools() else ["npm", "pynear"]
    threads = [threading.Thread(target=run, args=(name,)) for name in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for name in names:
        failure, seconds = results[name]
        took = "up to date" if seconds is None else f"{seconds:.1f} s"
        print(f"{name}: {'failed: ' + failure if failure else 'installed'} ({took})", flush=True)
    return 0 if all(results[name][0] is None for name in names) else 1


if __name__ == "__main__":
    sys.exit(main())
