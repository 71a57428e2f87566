"""Fixtures of the signer's tests: a SoftHSM2 token (skipped with a printed reason when
SoftHSM2 or python-pkcs11 is missing) and a key file."""

from __future__ import annotations

from pathlib import Path

import pytest

from solver.io.key_files import write_secret_key
from tests.signer.helpers import TEST_KEY, TOKEN_SKIP_REASON, Token, make_token


@pytest.fixture(scope="session")
def token(tmp_path_factory: pytest.TempPathFactory) -> Token:
    if TOKEN_SKIP_REASON is not None:
        pytest.skip(TOKEN_SKIP_REASON)
    return make_token(tmp_path_factory.mktemp("softhsm"))


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    """The test key in an owner-only file."""
    return write_secret_key(TEST_KEY, tmp_path / "signer.key")
