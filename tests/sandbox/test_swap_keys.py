"""Secrets and persistence of the swap service: the service key and JWT secret (generated once,
owner-only, or from the environment), partner tokens, deposit keys, and the SQLite store."""

from __future__ import annotations

import os
import stat
from datetime import UTC, datetime
from pathlib import Path

import pytest

from sandbox.swap.http import ApiError
from sandbox.swap.keys import SwapKeys
from sandbox.swap.store import SwapStore
from solver.errors import ConfigError
from solver.protocol.keys import SecretKey
from tests.sandbox.test_history_api import make_record

NOW = datetime(2026, 3, 1, tzinfo=UTC)


def keys_in(path: Path, **env: str | None) -> SwapKeys:
    keys = SwapKeys(
        path,
        lambda: datetime.now(UTC),
        service_key_env=env.get("key"),
        jwt_secret_env=env.get("jwt"),
    )
    keys.load()
    return keys


def test_generated_secrets_are_private_and_reused(tmp_path: Path) -> None:
    first = keys_in(tmp_path)
    for name in ("swap_service.key", "swap_jwt.secret", "swap_partner.jwt"):
        mode = (tmp_path / name).stat().st_mode
        assert not mode & (stat.S_IRWXG | stat.S_IRWXO), name
    second = keys_in(tmp_path)
    assert second.public_key == first.public_key and second.jwt_secret == first.jwt_secret
    assert second.deposit_key("c", "t").public_key == first.deposit_key("c", "t").public_key
    assert first.deposit_key("c", "t").public_key != first.deposit_key("d", "t").public_key
    token = (tmp_path / "swap_partner.jwt").read_text().strip()
    assert second.authorized(token)


def test_secrets_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = SecretKey.generate()
    monkeypatch.setenv("TEST_SWAP_KEY", key.to_text())
    monkeypatch.setenv("TEST_SWAP_JWT", "s" * 40)
    keys = keys_in(tmp_path, key="TEST_SWAP_KEY", jwt="TEST_SWAP_JWT")
    assert keys.public_key == key.public_key.to_text() and keys.jwt_secret == b"s" * 40
    assert not (tmp_path / "swap_service.key").exists()


def test_tokens(tmp_path: Path) -> None:
    keys = keys_in(tmp_path)
    assert keys.authorized(None) is False
    assert keys.authorized(keys.issue_token("p", ttl_s=60)) is True
    other = keys_in(tmp_path / "other")
    for bad in ("x.y.z", other.issue_token("p"), keys.issue_token("p", ttl_s=-5)):
        with pytest.raises(ApiError) as err:
            keys.authorized(bad)
        assert err.value.status == 401


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_unwritable_state_dir_is_a_config_error(tmp_path: Path) -> None:
    tmp_path.chmod(0o500)
    try:
        with pytest.raises(ConfigError):
            keys_in(tmp_path / "sub")
    finally:
        tmp_path.chmod(0o700)


def test_store_persists_records_and_open_swaps(tmp_path: Path) -> None:
    path = tmp_path / "swaps.sqlite3"
    store = SwapStore(path)
    records = [make_record(i) for i in range(12)]
    for record in records:
        store.save(record)
    record = records[3].model_copy(update={"senders": ["erin.near"]})
    store.save(record)  # an update, not a second row
    store.close()
    reopened = SwapStore(path)
    found = reopened.get(record.deposit_address, record.deposit_memo)
    assert found == record
    open_ids = {r.correlation_id for r in reopened.open_records()}
    assert open_ids == {r.correlation_id for r in records if r.is_open}
    assert reopened.by_account(records[5].deposit_account) == records[5]
    reopened.close()
