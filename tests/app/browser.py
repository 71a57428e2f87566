"""A real headless browser for the status page: Debian's ``chromium``, when installed.

``.ci/run`` installs it, so CI always runs the browser tests; elsewhere they are skipped with
the reason (also shown in pytest's header, see ``tests/conftest.py``). Chromium runs as an
asyncio subprocess, so the bot under test keeps serving on the same event loop while the page
loads; ``--virtual-time-budget`` lets the page's fetches and timers run before the DOM is
dumped or the screenshot taken. Every run gets its own profile directory and a timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest

CHROMIUM_NAMES = ("chromium", "chromium-browser")
TIMEOUT_S = 90.0
FLAGS = (
    "--headless",
    "--no-sandbox",  # CI runs as root, where chromium's sandbox refuses to start
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--virtual-time-budget=5000",
)


def chromium_path() -> str | None:
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


SKIP_REASON = (
    "chromium is not installed: the status page is not tested in a browser "
    "(apt-get install chromium; .ci/run installs it)"
)


def require_chromium() -> str:
    path = chromium_path()
    if path is None:
        pytest.skip(SKIP_REASON)
    return path


async def run_chromium(profile: Path, *args: str) -> str:
    """Run chromium with the test flags and ``args``; its stdout. Fails on a non-zero exit."""
    exe = require_chromium()
    process = await asyncio.create_subprocess_exec(
        exe,
        *FLAGS,
        f"--user-data-dir={profile}",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), TIMEOUT_S)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
        raise AssertionError(f"chromium did not finish within {TIMEOUT_S} s") from None
    assert process.returncode == 0, err.decode(errors="replace")[-2000:]
    return out.decode("utf-8", errors="replace")


async def dump_dom(url: str, profile: Path) -> str:
    return await run_chromium(profile, "--dump-dom", url)


async def screenshot(url: str, png: Path, profile: Path) -> Path:
    await run_chromium(profile, f"--screenshot={png}", "--window-size=1280,900", url)
    return png


class Dom(HTMLParser):
    """What the tests read from a dumped page: text by element id, body attributes, and each
    table's body rows as ``{data-col: text}``."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.text: dict[str, str] = {}
        self.body: dict[str, str | None] = {}
        self.tables: dict[str, list[dict[str, str]]] = {}
        self.hidden: set[str] = set()
        self._open: list[tuple[str, str | None]] = []  # (tag, id)
        self._table: str | None = None
        self._in_tbody = False
        self._cell: str | None = None
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "body":
            self.body = a
        ident = a.get("id")
        if ident is not None and "hidden" in a:
            self.hidden.add(ident)
        if tag == "table" and ident is not None:
            self._table = ident
            self.tables[ident] = []
        elif tag == "tbody":
            self._in_tbody = True
        elif tag == "tr" and self._table is not None and self._in_tbody:
            self.tables[self._table].append({})
        elif tag == "td" and self._table is not None and self._in_tbody:
            self._cell = a.get("data-col")
        if tag not in ("br", "input", "meta", "link", "img"):
            self._open.append((tag, ident))
            if ident is not None:
                self.text.setdefault(ident, "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self._table = None
        elif tag == "tbody":
            self._in_tbody = False
        elif tag == "td":
            self._cell = None
        while self._open:
            open_tag, _ = self._open.pop()
            if open_tag == tag:
                break

    def handle_data(self, data: str) -> None:
        for _, ident in self._open:
            if ident is not None:
                self.text[ident] += data
        if self._cell is not None and self._table is not None and self.tables[self._table]:
            row = self.tables[self._table][-1]
            row[self._cell] = row.get(self._cell, "") + data

    def rows(self, table: str) -> list[dict[str, str]]:
        return [{k: v.strip() for k, v in row.items()} for row in self.tables.get(table, [])]

    def get(self, ident: str) -> str:
        return " ".join(self.text.get(ident, "").split())
