"""The interop suite's collection rules and its line in pytest's summary.

``node_modules`` holds third-party packages, never tests of ours. When ``node`` or ``npm`` is
missing the suite is skipped, and the reason is printed in the summary of every run (not only
with ``-rs``), so a green run without it is never mistaken for a run with it.
"""

from __future__ import annotations

import shutil

import pytest

collect_ignore_glob = ["node_modules/*"]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    missing = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
    if missing:
        terminalreporter.write_line(
            f"interop suite (tests/interop) skipped: {' and '.join(missing)} not on PATH; "
            "install Node.js 20+ with npm to run the official clients against the sandbox"
        )
