"""``solver config check``: resolved JSON and exit 0, or every error with its path and exit 2."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from solver.cli import main
from solver.protocol.keys import SecretKey
from tests.cli.helpers import KEY_VAR, assert_one_line_error, run_solver
from tests.config.helpers import DEFAULT_YAML, EXAMPLES, USDC, minimal, write_yaml


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def one_json_line(out: str) -> dict[str, Any]:
    lines = out.splitlines()
    assert len(lines) == 1, out
    value = orjson.loads(lines[0])
    assert isinstance(value, dict)
    return value


@pytest.fixture
def key_text(monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh secret key, held in the variable the ``minimal()`` config names."""
    text = SecretKey.generate().to_text()
    monkeypatch.setenv(KEY_VAR, text)
    return text


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    return write_yaml(tmp_path / "bot.yaml", minimal())


def test_check_prints_the_resolved_config(
    config_file: Path, key_text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(["config", "check", str(config_file)], capsys)
    assert (code, err) == (0, "")
    resolved = one_json_line(out)
    assert resolved["account"]["key_env"] == f"${KEY_VAR}"
    assert resolved["bus"]["wait_ms"] == 3000  # defaults filled in
    assert resolved["quote"]["response_budget_ms"] == 2500
    assert key_text.removeprefix("ed25519:") not in out


@pytest.mark.parametrize("path", [DEFAULT_YAML, *EXAMPLES], ids=lambda p: p.name)
def test_shipped_configs_check_without_a_key(
    path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(["config", "check", "--no-key-check", str(path)], capsys)
    assert (code, err) == (0, "")
    assert one_json_line(out)["verifier_contract"] == "intents.sandbox"


def test_check_applies_overrides(
    config_file: Path, key_text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [
        "config",
        "check",
        str(config_file),
        "--set",
        "pairs.0.enabled=false",
        "--set",
        "bus.ws_url=ws://127.0.0.1:9999/ws",
        "--set",
        f'risk.floors[{USDC}]="42"',
    ]
    code, out, _ = run(argv, capsys)
    assert code == 0
    resolved = one_json_line(out)
    assert resolved["pairs"][0]["enabled"] is False
    assert resolved["bus"]["ws_url"] == "ws://127.0.0.1:9999/ws"
    assert resolved["risk"]["floors"] == {USDC: "42"}


def test_bad_override_is_a_usage_error(
    config_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(["config", "check", str(config_file), "--set", "novalue"], capsys)
    assert (code, out) == (2, "")
    assert_one_line_error(err)


def test_missing_key_variable_is_named(
    config_file: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv(KEY_VAR, raising=False)
    code, out, err = run(["config", "check", str(config_file)], capsys)
    assert (code, out) == (2, "")
    assert_one_line_error(err)
    assert f"account.key_env: environment variable {KEY_VAR} is not set" in err

    code, out, err = run(["config", "check", "--no-key-check", str(config_file)], capsys)
    assert (code, err) == (0, "")


def test_invalid_key_is_reported_without_its_value(
    config_file: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    almost = SecretKey.generate().to_text()[:-3] + "abc"  # public half no longer matches
    monkeypatch.setenv(KEY_VAR, almost)
    code, out, err = run(["config", "check", str(config_file)], capsys)
    assert (code, out) == (2, "")
    assert_one_line_error(err)
    assert KEY_VAR in err
    assert almost.removeprefix("ed25519:")[:20] not in err


def test_every_error_is_a_line_with_its_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = minimal()
    data["colour"] = "blue"
    data["nonce"] = {"layout": "random"}
    data["risk"] = {"floors": {USDC: 1000.5}}
    data["pairs"].append(dict(data["pairs"][0]))
    path = write_yaml(tmp_path / "bad.yaml", data)
    code, out, err = run(["config", "check", str(path)], capsys)
    assert (code, out) == (2, "")
    lines = err.splitlines()
    assert all(line.startswith(f"solver: error: {path}: ") for line in lines), err
    paths = sorted(line.removeprefix(f"solver: error: {path}: ").split(": ")[0] for line in lines)
    assert paths == sorted(["colour", "nonce.layout", f"risk.floors.{USDC}", "pairs.1"])


def test_secret_in_yaml_is_refused_and_never_printed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = SecretKey.generate().to_text()
    data = minimal()
    data["account"]["private_key"] = secret
    data["pairs"][0]["params"]["key"] = secret.removeprefix("ed25519:")
    path = write_yaml(tmp_path / "leaky.yaml", data)
    code, out, err = run(["config", "check", "--no-key-check", str(path)], capsys)
    assert (code, out) == (2, "")
    assert "account.private_key: looks like a secret key" in err
    assert "pairs.0.params.key: looks like a secret key" in err
    body = secret.removeprefix("ed25519:")
    assert body[:16] not in err


def test_missing_file_is_one_error_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["config", "check", str(tmp_path / "nope.yaml")], capsys)
    assert (code, out) == (2, "")
    assert_one_line_error(err)
    assert "cannot read" in err


def test_check_in_a_child_process(tmp_path: Path) -> None:
    good = write_yaml(tmp_path / "bot.yaml", minimal())
    key = SecretKey.generate().to_text()
    done = run_solver(["config", "check", str(good)], env={KEY_VAR: key})
    assert (done.returncode, done.stderr) == (0, "")
    assert one_json_line(done.stdout)["account"]["key_env"] == f"${KEY_VAR}"

    secret_data = minimal()
    secret_data["account"]["secret"] = key
    leaky = write_yaml(tmp_path / "leaky.yaml", secret_data)
    done = run_solver(["config", "check", str(leaky)], env={KEY_VAR: key})
    assert (done.returncode, done.stdout) == (2, "")
    assert "account.secret: looks like a secret key" in done.stderr
    assert key.removeprefix("ed25519:")[:16] not in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("command", [["config", "check", "--no-key-check"], ["run", "--config"]])
def test_a_bad_strategy_parameter_is_named_by_its_path(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``solver config check`` and ``solver run`` refuse the same file the same way: exit 2, the
    YAML path of the bad parameter, no traceback (``run`` stops before it touches the network)."""
    data = minimal()
    data["pairs"][0]["params"] = {"spread_bps": -3}
    path = write_yaml(tmp_path / "bad-params.yaml", data)
    code, out, err = run([*command, str(path)], capsys)
    assert (code, out) == (2, "")
    assert_one_line_error(err)
    assert f"solver: error: {path}: pairs.0.params.spread_bps: " in err
    assert "internal error" not in err


@pytest.mark.parametrize("listen", ["0.0.0.0:9464", "[::]:9464", "10.1.2.3:9464"])
def test_check_refuses_a_metrics_listen_that_run_refuses(
    tmp_path: Path, key_text: str, listen: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """One rule for both (issue 24): ``run`` refuses to serve the control API off loopback,
    so ``config check`` must not call such a file valid."""
    doc = minimal()
    doc["metrics"] = {"listen": listen}
    code, out, err = run(["config", "check", str(write_yaml(tmp_path / "bot.yaml", doc))], capsys)
    assert code == 2 and out == "", out
    assert "metrics.listen" in err and "loopback" in err, err


@pytest.mark.parametrize("listen", ["127.0.0.1:0", "[::1]:9464", "localhost:9464", None])
def test_check_takes_a_loopback_metrics_listen(
    tmp_path: Path, key_text: str, listen: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = minimal()
    doc["metrics"] = {"listen": listen}
    code, _, err = run(["config", "check", str(write_yaml(tmp_path / "bot.yaml", doc))], capsys)
    assert (code, err) == (0, ""), err
