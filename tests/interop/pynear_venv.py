"""py-near's own venv beside the project, as the npm clients have their ``node_modules``
(issue 23).

``tests/interop/pynear/requirements.txt`` pins the published py-near and what it needs; it is
installed into ``tests/interop/pynear/.venv`` (gitignored) with that venv's pip, and reinstalled
only when the sha256 of the file recorded after a successful install no longer matches. When it
cannot be installed (no registry, a failed build) the tests that need it are skipped with the
reason, printed at once and again in pytest's summary, never silently.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent / "pynear"
REQUIREMENTS = HERE / "requirements.txt"
VENV = HERE / ".venv"
PYTHON = VENV / "bin" / "python"
STAMP = VENV / ".interop-requirements.sha256"
INSTALL_TIMEOUT_S = 600
SKIPPED = pytest.StashKey[str]()
"""The reason the py-near tests were skipped in this run, for the terminal summary."""


def _wanted() -> str:
    return hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()


def _run(command: list[str]) -> str | None:
    """None when ``command`` succeeded, else the tail of what it printed."""
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        return f"{' '.join(command[:3])} … ran longer than {INSTALL_TIMEOUT_S} s"
    if done.returncode == 0:
        return None
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    return lines[-1] if lines else f"exit status {done.returncode}"


def install() -> Path | str:
    """The venv's interpreter, installing the requirements first if needed; or why not."""
    wanted = _wanted()
    if PYTHON.exists() and STAMP.exists() and STAMP.read_text().strip() == wanted:
        return PYTHON
    started = time.monotonic()
    failure = _run([sys.executable, "-m", "venv", "--clear", str(VENV)]) or _run(
        [
            str(PYTHON),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-input",
            "--disable-pip-version-check",
            "-r",
            str(REQUIREMENTS),
        ]
    )
    if failure is not None:
        return f"py-near could not be installed from {REQUIREMENTS.name}: {failure}"
    STAMP.write_text(wanted + "\n")
    print(
        f"\ninterop: py-near venv installed in {time.monotonic() - started:.1f} s", file=sys.stderr
    )
    return PYTHON


def python_or_skip(config: pytest.Config) -> Path:
    """For a fixture: the interpreter, or the test skipped with the reason printed."""
    found = install()
    if isinstance(found, Path):
        return found
    config.stash[SKIPPED] = found
    print(f"\npy-near interop tests skipped: {found}", file=sys.stderr)
    pytest.skip(found)
