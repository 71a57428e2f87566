"""``--set KEY=VALUE`` on ``solver backtest run`` (``solver run`` has it too: see
tests/app/test_cli_run.py): the same parser as ``solver config check``, applied before
validation, and named on the start-up line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from solver.cli import main
from solver.cli.config import describe_overrides
from tests.backtest.test_report import files  # noqa: F401  (the fixture: stream and configs)


def test_describe_overrides_reads_like_the_command_line() -> None:
    assert describe_overrides({}) == "no overrides"
    text = describe_overrides({"pairs.0.enabled": False, "risk.floors": {"a": "1"}, "x": [1, 2]})
    assert text == "overrides: pairs.0.enabled=false, risk.floors={a: '1'}, x=[1, 2]"


def test_backtest_run_applies_set_and_names_it(
    files: tuple[Path, Path, Path],  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    stream, config, backtest = files
    argv = ["backtest", "run", str(stream), "--config", str(config)]
    argv += ["--backtest-config", str(backtest), "--no-progress"]
    assert main([*argv, "--out", str(tmp_path / "plain")]) == 0
    captured = capsys.readouterr()
    plain = json.loads(captured.out)
    assert "overrides" not in captured.err  # nothing to say without them
    pairs = yaml.safe_load(config.read_text())["pairs"]
    disabled = [f"pairs.{i}.enabled=false" for i in range(len(pairs))]
    sets = [arg for item in disabled for arg in ("--set", item)]
    assert main([*argv, "--out", str(tmp_path / "off"), *sets]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["quoted"] == 0 < plain["quoted"]
    assert "solver: note: backtest of" in captured.err
    assert "overrides: pairs.0.enabled=false" in captured.err
    # A bad override is a config error with its path, before anything runs.
    bad = [*argv, "--out", str(tmp_path / "bad"), "--set", "risk.max_stale_s=-1"]
    assert main(bad) == 2
    assert "risk.max_stale_s" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()
