"""Fixtures of the PostgreSQL tests: one cluster per session (started by the first test that
asks for it), one database per test; and ``store_overrides``, which runs a bot test on either
backend. A plugin of the root conftest, so any test directory can use them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.pg.cluster import PASSWORD, PASSWORD_ENV, SKIP_REASON, Cluster, running_cluster


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[Cluster]:
    if SKIP_REASON is not None:
        print(SKIP_REASON)
        pytest.skip(SKIP_REASON)
    with running_cluster() as cluster:
        yield cluster


@pytest.fixture
def pg_url(pg_cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh database's URL (no password: it is in ``$SOLVER_TEST_PG_PASSWORD``)."""
    monkeypatch.setenv(PASSWORD_ENV, PASSWORD)
    return pg_cluster.url(pg_cluster.new_database())


@pytest.fixture(params=["sqlite", "postgresql"])
def store_overrides(request: pytest.FixtureRequest) -> dict[str, Any]:
    """Config overrides that put the bot's journal on SQLite (none: the default) or on a fresh
    PostgreSQL database (a 2 s lease)."""
    if request.param == "sqlite":
        return {}
    url = request.getfixturevalue("pg_url")
    return {"storage.url": url, "storage.password_env": PASSWORD_ENV, "storage.lease_s": 2.0}
