"""Reading and writing secret keys: environment variables and owner-only files (protocol-notes 4).
Real files under ``tmp_path``, real permission bits."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import base58
import pytest

from solver.errors import ConfigError
from solver.io.key_files import load_secret_key, write_secret_key
from solver.protocol.keys import SecretKey

ENV_VAR = "SOLVER_TEST_SECRET_KEY"


def _b58(data: bytes) -> str:
    return base58.b58encode(data).decode("ascii")


def _secret_fragments(key: SecretKey) -> list[str]:
    """Every text form of the secret that must never leak."""
    text = key.to_text()
    body = text.removeprefix("ed25519:")
    seed = base58.b58decode(body)[:32]
    return [text, body, seed.hex(), _b58(seed)]


def _write_key_file(path: Path, key: SecretKey, mode: int) -> Path:
    path.write_text(key.to_text() + "\n", encoding="utf-8")
    path.chmod(mode)
    return path


def test_load_secret_key_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    key = SecretKey(b"\x05" * 32)
    monkeypatch.setenv(ENV_VAR, key.to_text())
    loaded = load_secret_key(env=ENV_VAR)
    assert loaded.public_key == key.public_key
    assert loaded.sign(b"x") == key.sign(b"x")


def test_load_secret_key_env_missing_or_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    with pytest.raises(ConfigError, match=ENV_VAR):
        load_secret_key(env=ENV_VAR)
    monkeypatch.setenv(ENV_VAR, "")
    with pytest.raises(ConfigError, match="not set or empty"):
        load_secret_key(env=ENV_VAR)


def test_load_secret_key_env_malformed_does_not_leak(monkeypatch: pytest.MonkeyPatch) -> None:
    seed = b"\x06" * 32
    wrong = "ed25519:" + _b58(seed + SecretKey(b"\x07" * 32).public_key.raw)
    monkeypatch.setenv(ENV_VAR, wrong)
    with pytest.raises(ConfigError) as exc_info:
        load_secret_key(env=ENV_VAR)
    message = str(exc_info.value)
    assert ENV_VAR in message
    assert wrong.removeprefix("ed25519:") not in message
    assert _b58(seed) not in message
    assert exc_info.value.__cause__ is None


def test_load_secret_key_from_0600_file(tmp_path: Path) -> None:
    key = SecretKey(b"\x08" * 32)
    path = _write_key_file(tmp_path / "key", key, 0o600)
    loaded = load_secret_key(path=path)
    assert loaded.public_key == key.public_key
    assert load_secret_key(path=str(path)).public_key == key.public_key


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660, 0o610])
def test_load_secret_key_refuses_group_or_world_access(tmp_path: Path, mode: int) -> None:
    key = SecretKey(b"\x09" * 32)
    path = _write_key_file(tmp_path / "key", key, mode)
    with pytest.raises(ConfigError, match="chmod 600") as exc_info:
        load_secret_key(path=path)
    for fragment in _secret_fragments(key):
        assert fragment not in str(exc_info.value)


def test_load_secret_key_file_malformed_does_not_leak(tmp_path: Path) -> None:
    seed = b"\x0a" * 32
    wrong = "ed25519:" + _b58(seed + SecretKey(b"\x0b" * 32).public_key.raw)
    path = tmp_path / "key"
    path.write_text(wrong, encoding="utf-8")
    path.chmod(0o600)
    with pytest.raises(ConfigError, match="public half") as exc_info:
        load_secret_key(path=path)
    message = str(exc_info.value)
    assert wrong.removeprefix("ed25519:") not in message
    assert _b58(seed) not in message


def test_load_secret_key_missing_file_and_no_source(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read key file"):
        load_secret_key(path=tmp_path / "absent")
    with pytest.raises(ConfigError, match="no key source"):
        load_secret_key()


def test_write_secret_key_is_owner_only_and_loads_back(tmp_path: Path) -> None:
    key = SecretKey(b"\x0c" * 32)
    old_umask = os.umask(0)  # even with a permissive umask the file is created 0600
    try:
        path = write_secret_key(key, tmp_path / "new.key")
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text(encoding="utf-8") == key.to_text() + "\n"
    assert load_secret_key(path=path).public_key == key.public_key
