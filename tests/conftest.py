"""Session-wide pytest hooks."""

from __future__ import annotations

from tests.app.browser import SKIP_REASON, chromium_path


def pytest_report_header() -> str:
    """Say up front whether the status page is tested in a real browser (skips are quiet)."""
    path = chromium_path()
    return f"status page browser tests: {path}" if path else f"NOTE: {SKIP_REASON}"


def pytest_terminal_summary(terminalreporter: object) -> None:
    """And at the end, where ``-q`` still shows it, when the browser tests were skipped."""
    if chromium_path() is None:
        terminalreporter.write_line(f"NOTE: {SKIP_REASON}")  # type: ignore[attr-defined]
