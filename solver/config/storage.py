"""The ``storage`` section: the store of quotes and settlements, SQLite or PostgreSQL, and what it
keeps (docs/operations.md, "Two instances", "Lost quotes are sampled", "Disk").

A section of its own because it carries its own validator: a PostgreSQL URL is refused when
it holds a password, a secret that never lives in the YAML.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, Field
from pydantic_core import PydanticCustomError

from solver.config.fields import STRICT


def postgres_url(value: str | None) -> str | None:
    """A ``postgresql://`` URL with no password in it: the password is a secret, and a secret
    never lives in YAML (``storage.password_env`` names the variable that holds it)."""
    if value is None:
        return None
    from urllib.parse import urlsplit

    parts = urlsplit(value)
    if parts.scheme not in ("postgresql", "postgres"):
        raise PydanticCustomError(
            "storage_url", "storage.url must be a postgresql:// URL (SQLite: storage.path)"
        )
    if parts.password is not None:
        raise PydanticCustomError(
            "storage_url",
            "storage.url must not hold a password: put it in an environment variable and "
            "name it in storage.password_env",
        )
    return value


class StorageSpec(BaseModel):
    """The store of quotes and settlements: SQLite (WAL, one instance), or PostgreSQL shared by
    several instances of one account, one active under a lease (docs/operations.md, "Two
    instances")."""

    model_config = STRICT
    path: Path = Path("var/solver.sqlite")
    """The SQLite store; with ``url``, where the instance keeps its local files (its alert
    spool, ``<path>.alerts.json``), one path per instance. Relative paths are relative to the
    working directory."""
    url: Annotated[str | None, AfterValidator(postgres_url)] = None
    """``postgresql://user@host:port/database``: the journal on PostgreSQL (one database per
    account), instead of SQLite. Never with a password in it."""
    password_env: str | None = None
    """The environment variable holding the PostgreSQL password (none: the server's other
    means, e.g. a Unix socket with peer authentication, or ``~/.pgpass``)."""
    lease_s: Annotated[float, Field(ge=1, le=60, allow_inf_nan=False)] = 5.0
    """How long the active instance's lease lasts without a refresh (refreshed every third of
    it); a standby takes over at most about this long after the active dies."""
    sample_requests: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] = 0.0
    """Fraction of quote requests kept with their outcome (0: none, 1: all); sampled by id."""
    lost_quote_sample_rate: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] = 0.01
    """Fraction of the quotes that end LOST (most answers) that keep their row in the query
    tables, sampled by a hash of the quote id, each with its weight (1 / the rate); every
    other quote keeps its row, and ``quote_counts`` counts every quote by minute, pair, size
    and state, so totals and win rates stay exact. 1 keeps every row. The journal holds every
    quote for ``retain_days`` either way (docs/operations.md, "Lost quotes are sampled")."""
    synchronous: Literal["normal", "full"] = "normal"
    """``normal``: a committed quote survives a crash of the bot; ``full``: also a power loss
    (an fsync per quote)."""
    retain_days: Annotated[float | None, Field(gt=0, le=36_500, allow_inf_nan=False)] = 30.0
    """Days after which the store forgets quotes that never became a trade (lost, rejected),
    journal entries the desk no longer needs, old balance snapshots and request samples;
    trades, fills, alerts and rebalances are kept. ``null`` keeps everything (the file then
    grows ~1.1 KB an answer that ends lost, ~2.2 KB one that keeps its row).
    docs/operations.md, "Disk"."""
