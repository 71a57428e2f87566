"""The example report checked in under ``docs/example-report/``: it was made by the commands
its README documents (run again here: ``summary.json`` must come out byte for byte the same),
and its ``report.html`` is self-contained, small, and has every section."""

from __future__ import annotations

import base64
import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from backtest.report.html import SECTIONS
from solver.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "example-report"
WORK = "/tmp/example-report"


def _commands() -> list[list[str]]:
    """The ``solver ...`` lines of the README's shell block, as argv."""
    text = (EXAMPLE / "README.md").read_text()
    (block,) = re.findall(r"```sh\n(.*?)```", text, flags=re.S)
    return [shlex.split(line) for line in block.splitlines() if line.strip()]


def test_the_readme_documents_how_the_example_was_made() -> None:
    commands = _commands()
    assert [c[:3] for c in commands] == [
        ["solver", "backtest", "synth"],
        ["solver", "backtest", "run"],
        ["cp", f"{WORK}/report.html", f"{WORK}/summary.json"],
    ]
    assert "docs/example-report" in (ROOT / "docs" / "backtest.md").read_text()


def test_the_example_is_what_the_documented_commands_make(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(ROOT)  # the commands name config files from the repository's root
    for command in _commands()[:2]:
        argv = [arg.replace(WORK, str(tmp_path)) for arg in command]
        assert main(argv[1:]) == 0
    capsys.readouterr()
    made = _figures(json.loads((tmp_path / "summary.json").read_text()))
    checked_in = _figures(json.loads((EXAMPLE / "summary.json").read_text()))
    assert made == checked_in, (
        "docs/example-report is stale: rerun the commands in docs/example-report/README.md"
    )


def _figures(summary: dict[str, Any]) -> dict[str, Any]:
    """Every figure of a summary; the config's digests left out: they change with any new
    default anywhere in the bot's config schema, while the figures need not."""
    summary = dict(summary)
    summary["config"] = {k: v for k, v in summary["config"].items() if "digest" not in k}
    return summary


def test_the_example_report_is_self_contained_and_has_every_section() -> None:
    page = (EXAMPLE / "report.html").read_text()
    assert (EXAMPLE / "report.html").stat().st_size < 1_500_000
    assert re.findall(r"<h2>([^<]+)</h2>", page) == list(SECTIONS)
    assert "http://" not in page and "https://" not in page and "<script" not in page
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(images) == 5 and all(base64.b64decode(i)[:4] == b"\x89PNG" for i in images)
    figures = json.loads((EXAMPLE / "summary.json").read_text())
    assert figures["config"]["digest"] in page and figures["halted"]["reason"] in page.replace(
        "&gt;", ">"
    )
    assert set(figures["pairs"]) == {"wNEAR/USDC", "ETH/USDC"}
