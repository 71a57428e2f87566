"""``solver keys new``: key pairs, 0600 files, secrets kept off the screen (spec 2.11)."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import orjson
import pytest

from solver.cli import main
from solver.io.key_files import load_secret_key
from solver.protocol.keys import PublicKey, SecretKey
from tests.cli.helpers import assert_one_line_error, make_payload, run_solver, write_json


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


def test_new_writes_an_owner_only_key_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_file = tmp_path / "bot.key"
    code, out, err = run(["keys", "new", "--out", str(out_file)], capsys)
    assert (code, err) == (0, "")
    result = one_json_line(out)
    assert set(result) == {"public_key", "account_id", "secret_key_file"}
    assert result["secret_key_file"] == str(out_file)

    assert stat.S_IMODE(out_file.stat().st_mode) == 0o600
    key = load_secret_key(path=out_file)
    assert key.public_key.to_text() == result["public_key"]
    assert PublicKey.from_text(result["public_key"]).implicit_account_id() == result["account_id"]
    assert len(result["account_id"]) == 64
    assert all(c in "0123456789abcdef" for c in result["account_id"])

    secret_body = key.to_text()[len("ed25519:") :]
    assert secret_body not in out
    assert secret_body not in err


def test_new_defaults_to_account_id_dot_key_in_the_working_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, _ = run(["keys", "new"], capsys)
    assert code == 0
    result = one_json_line(out)
    assert result["secret_key_file"] == f"{result['account_id']}.key"
    written = tmp_path / result["secret_key_file"]
    assert stat.S_IMODE(written.stat().st_mode) == 0o600
    assert load_secret_key(path=written).public_key.to_text() == result["public_key"]


def test_new_never_overwrites_a_key_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_file = tmp_path / "bot.key"
    assert run(["keys", "new", "--out", str(out_file)], capsys)[0] == 0
    before = out_file.read_bytes()

    code, out, err = run(["keys", "new", "--out", str(out_file)], capsys)
    assert (code, out) == (2, "")
    assert_one_line_error(err)
    assert "refusing to overwrite" in err
    assert out_file.read_bytes() == before
    assert before.decode().strip()[len("ed25519:") :] not in err


def test_new_show_secret_prints_it_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = run(["keys", "new", "--show-secret"], capsys)
    assert (code, err) == (0, "")
    result = one_json_line(out)
    key = SecretKey.from_text(result["secret_key"])
    assert key.public_key.to_text() == result["public_key"]
    assert key.public_key.implicit_account_id() == result["account_id"]
    assert result["secret_key_file"] is None
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "argv",
    [
        ["keys", "new", "--show-secret", "--out", "x.key"],
        ["keys", "new", "--out"],
        ["keys", "frobnicate"],
        ["keys"],
    ],
)
def test_new_refuses_bad_options(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = run(argv, capsys)
    assert (code, out) == (2, "")
    assert_one_line_error(err)
    assert list(tmp_path.iterdir()) == []


def test_new_reports_an_unwritable_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["keys", "new", "--out", str(tmp_path / "no" / "such" / "k.key")], capsys)
    assert (code, out) == (2, "")
    assert_one_line_error(err)
    assert "cannot write key file" in err


def test_new_key_signs_through_key_file(tmp_path: Path) -> None:
    """End to end in child processes: keys new, then intents sign --key-file, then verify."""
    key_file = tmp_path / "bot.key"
    created = run_solver(["keys", "new", "--out", str(key_file)])
    assert (created.returncode, created.stderr) == (0, "")
    result = orjson.loads(created.stdout)
    assert "secret_key" not in result
    secret = key_file.read_text().strip()
    assert secret[len("ed25519:") :] not in created.stdout

    payload = write_json(tmp_path / "payload.json", make_payload(signer_id=result["account_id"]))
    signed = run_solver(["intents", "sign", "--key-file", str(key_file), str(payload)])
    assert (signed.returncode, signed.stderr) == (0, "")
    checked = run_solver(["intents", "verify"], stdin=signed.stdout)
    assert checked.returncode == 0
    report = orjson.loads(checked.stdout)
    assert report["public_key"] == result["public_key"]
    assert report["signer_is_key_owner"] is True
