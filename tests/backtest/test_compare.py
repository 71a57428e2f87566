"""Issue 26: ``solver backtest compare RUN_A RUN_B …`` shows runs side by side: the summary,
per pair, the equity curves on one plot and the settings that differ, as a table and a page."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pytest
import yaml

from backtest.stream.write import write_stream
from solver.cli import main
from tests.backtest.replay_helpers import HEADER, bot_config_data
from tests.backtest.test_quant_report import SETTINGS, trending


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    tmp = tmp_path_factory.mktemp("compare")
    stream = write_stream(tmp / "s.jsonl", HEADER, trending(120))
    config = tmp / "bot.yaml"
    config.write_text(yaml.safe_dump(bot_config_data()))
    backtest = tmp / "backtest.yaml"
    backtest.write_text(yaml.safe_dump(SETTINGS))
    runs = []
    for spread in (10, 40):
        out = tmp / f"spread{spread}"
        argv = ["backtest", "run", str(stream), "--config", str(config), "--out", str(out)]
        argv += ["--backtest-config", str(backtest), "--no-progress"]
        assert main([*argv, "--set", f"pairs.0.params.spread_bps={spread}"]) == 0
        runs.append(out)
    return runs[0], runs[1], tmp


def test_compare_two_runs_side_by_side(
    two_runs: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    a, b, tmp = two_runs
    capsys.readouterr()
    out = tmp / "cmp"
    assert main(["backtest", "compare", str(a), str(b), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    summaries = [json.loads((run / "summary.json").read_text()) for run in (a, b)]
    header = text.splitlines()[0].split()
    assert header == ["figure", "spread10", "spread40"]
    over = next(line for line in text.splitlines() if line.startswith("PnL over hold USD"))
    assert over.split()[-2:] == [f"{s['pnl_over_hold_usd']:,.2f}" for s in summaries]
    sharpe = next(line for line in text.splitlines() if line.startswith("Sharpe"))
    assert sharpe.split()[-2:] == ["withheld", "withheld"]  # two minutes of data
    assert "wNEAR/USDC won" in text
    # The only setting that differs is the spread.
    diff = text.split("setting that differs")[1].split("written:")[0].splitlines()
    assert [line.split() for line in diff[2:] if line.strip()] == [
        ["pairs.0.params.spread_bps", "10", "40"]
    ]
    data = json.loads((out / "compare.json").read_text())
    assert [r["name"] for r in data["runs"]] == ["spread10", "spread40"]
    assert data["config_differences"] == {
        "pairs.0.params.spread_bps": {"spread10": "10", "spread40": "40"}
    }
    page = (out / "compare.html").read_text()
    assert re.findall(r"<h2>([^<]+)</h2>", page) == [
        "Summary", "Per pair", "Equity curves", "Configuration differences"
    ]  # fmt: skip
    (image,) = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert base64.b64decode(image)[:4] == b"\x89PNG"


def test_compare_refuses_what_is_not_a_run(
    two_runs: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    a, _, tmp = two_runs
    out = str(tmp / "x")
    assert main(["backtest", "compare", str(a), "--out", out]) == 2
    assert "compare needs at least two run directories" in capsys.readouterr().err
    assert main(["backtest", "compare", str(a), str(tmp), "--out", out]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"solver: error: {tmp}: no summary.json (give the --out directory of "
        "'solver backtest run')\n"
    )
