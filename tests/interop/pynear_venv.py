"""py-near's own venv beside the project, as the npm clients have their ``node_modules``
(issue 23).

``tests/interop/pynear/requirements.txt`` pins the published py-near and what it needs; it is
installed into ``tests/interop/pynear/.venv`` (gitignored) with that venv's pip, and reinstalled
only when the sha256 of the file recorded after a successful install no longer matches
(:func:`tests.interop.installs.pynear_install`, which the run may have started in the
background already). When it cannot be installed (no registry, a failed build) the tests that
need it are skipped with the reason, printed at once and again in pytest's summary, never
silently.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.interop import installs

SKIPPED = pytest.StashKey[str]()
"""The reason the py-near tests were skipped in this run, for the terminal summary."""


def install() -> Path | str:
    """The venv's interpreter, installing the requirements first if needed; or why not."""
    try:
        failure, seconds = installs.pynear_install()
    except TimeoutError as exc:
        failure, seconds = str(exc), None
    if failure is not None:
        return f"py-near could not be installed from {installs.REQUIREMENTS.name}: {failure}"
    if seconds is not None:
        print(f"\ninterop: py-near venv installed in {seconds:.1f} s", file=sys.stderr)
    return installs.PYNEAR_PYTHON


def python_or_skip(config: pytest.Config) -> Path:
    """For a fixture: the interpreter, or the test skipped with the reason printed."""
    found = install()
    if isinstance(found, Path):
        return found
    config.stash[SKIPPED] = found
    print(f"\npy-near interop tests skipped: {found}", file=sys.stderr)
    pytest.skip(found)
