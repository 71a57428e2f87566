"""Fixtures of the CLI tests: a fresh key, held in an environment variable."""

from __future__ import annotations

import pytest

from solver.protocol.keys import SecretKey
from tests.cli.helpers import KEY_VAR


@pytest.fixture
def secret_key() -> SecretKey:
    return SecretKey.generate()


@pytest.fixture
def key_env(monkeypatch: pytest.MonkeyPatch, secret_key: SecretKey) -> str:
    """The name of an environment variable holding ``secret_key``."""
    monkeypatch.setenv(KEY_VAR, secret_key.to_text())
    return KEY_VAR
