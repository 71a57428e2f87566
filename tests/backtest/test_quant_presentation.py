"""Issue 26, point 4: what a person reads says what it means. The markout plot's scale follows
the data, help text prints as written, a run without overrides says nothing about them, the
inventory table names tokens by symbol, a bad ``--set`` is blamed on ``--set``, and a typo in
the backtest settings is called a typo."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from backtest.report.html import inventory_table
from backtest.report.plots import markouts_figure
from backtest.settings import load_settings
from solver.cli import main
from solver.errors import ConfigError
from tests.backtest.replay_helpers import E6, E24, NEAR, USDC
from tests.backtest.test_report import files  # noqa: F401  (the fixture: stream and configs)


def _cell(mean: float, n: int = 400, se: float = 0.05) -> dict[str, Any]:
    return {"n": n, "mean": mean, "se": se}


def test_the_markout_plot_shows_a_small_adverse_move_under_a_large_edge() -> None:
    stats = {
        "realized_bps": _cell(25.0),
        "markouts_bps": {h: _cell(m) for h, m in
                         {"1s": 24.9, "10s": 24.6, "60s": 24.4, "300s": 24.2}.items()},
    }  # fmt: skip
    flat = {
        "realized_bps": _cell(25.0),
        "markouts_bps": {h: _cell(25.0) for h in ("1s", "10s", "60s", "300s")},
    }
    flows = {"observed": flat, "unobserved": stats}
    fig = markouts_figure({"all": stats, "pairs": {"wNEAR/USDC": stats}, "by_competition": flows})
    top, move, by_competition = fig.axes[:3]
    low, high = top.get_ylim()
    assert low > 20 and high < 30  # the scale follows the data: zero is not forced in
    moved = [y for line in move.get_lines() for y in line.get_ydata()]
    assert any(abs(y + 0.8) < 1e-9 for y in moved)  # the +5 min mean, 0.8 bps below the fill
    low, high = move.get_ylim()
    assert high - low < 3  # a 0.8 bps move fills the panel
    # Issue 25: the same move split by whether the competitor was observed, on an axis that
    # shows a 1 bps adverse move even when the data move less.
    lines = by_competition.get_lines()
    split = {round(float(y), 6) for line in lines for y in line.get_ydata()}
    assert -0.8 in split and 0.0 in split
    low, high = by_competition.get_ylim()
    assert low <= -1.0 and high >= 1.0 and high - low < 3


def test_calibrate_help_prints_the_percent_sign_once(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["backtest", "calibrate", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "95 % intervals" in text and "%%" not in text


def test_a_run_without_overrides_warns_of_nothing(
    files: tuple[Path, Path, Path],  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    stream, config, backtest = files
    argv = ["backtest", "run", str(stream), "--config", str(config), "--no-progress"]
    assert main([*argv, "--backtest-config", str(backtest), "--out", str(tmp_path / "a")]) == 0
    # Nothing about overrides; the only line is what the fills rest on (a third of this
    # stream's requests have no competitor: tests/backtest/test_unobserved.py).
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "without an observed competitor" in lines[0], lines
    # A bad --set is the command line's fault, not the file's.
    bad = [*argv, "--out", str(tmp_path / "b"), "--set", "risk.max_stale_s=-1"]
    assert main(bad) == 2
    err = capsys.readouterr().err
    assert err.startswith("solver: error: --set risk.max_stale_s: ")
    assert str(config) not in err


def test_a_typo_in_the_backtest_settings_is_called_one(tmp_path: Path) -> None:
    path = tmp_path / "backtest.yaml"
    path.write_text(yaml.safe_dump({"kill_swtich": False, "fill": {"modle": "always"}}))
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    typo = "unknown key (not allowed here; check its spelling and indentation)"
    assert sorted(str(caught.value).splitlines()) == [
        f"{path}: fill.modle: {typo}",
        f"{path}: kill_swtich: {typo}",
    ]
    assert "Extra inputs" not in str(caught.value)


def test_the_inventory_table_names_tokens_by_symbol() -> None:
    figures = {
        "start_inventory": {USDC: str(5 * E6), NEAR: str(2 * E24)},
        "final_inventory": {USDC: str(7 * E6), NEAR: str(E24)},
    }
    page = inventory_table(figures, {USDC: "USDC", NEAR: "wNEAR"}, {USDC: 6, NEAR: 24})
    assert USDC not in page and NEAR not in page
    assert "<td>wNEAR</td>" in page and "<td>USDC</td>" in page
    assert "-1.00 wNEAR" in page and "2.00 USDC" in page
