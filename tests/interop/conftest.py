"""The interop suite's collection rules and its line in pytest's summary.

``node_modules`` holds third-party packages, never tests of ours. When ``node`` or ``npm`` is
missing the suite is skipped, and the reason is printed in the summary of every run (not only
with ``-rs``), so a green run without it is never mistaken for a run with it. The same goes for
py-near when its venv cannot be installed (:mod:`tests.interop.pynear_venv`).
"""

from __future__ import annotations

import shutil

import pytest

from tests.interop import pynear_venv

collect_ignore_glob = ["node_modules/*"]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    missing = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
    if missing:
        terminalreporter.write_line(
            f"interop suite (tests/interop) skipped: {' and '.join(missing)} not on PATH; "
            "install Node.js 20+ with npm to run the official clients against the sandbox"
        )
    pynear = terminalreporter.config.stash.get(pynear_venv.SKIPPED, None)
    if pynear is not None:
        terminalreporter.write_line(f"py-near interop tests (tests/interop) skipped: {pynear}")
