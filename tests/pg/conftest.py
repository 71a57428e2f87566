"""Fixtures of the PostgreSQL tests: one cluster per session, one database per test."""

from __future__ import annotations

from collections.abc import Iterator

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
