"""The quote-path benchmark's PostgreSQL system (issue 27): the bot with its journal on
PostgreSQL beside the bot on SQLite, in the same run.

- **bot_pg**: the bot's command with ``storage.url: postgresql://…`` (the password from the
  environment, as deployed; ``lease_s`` 5, the default) on a throwaway PostgreSQL 15 cluster
  the benchmark starts for it (:func:`tests.pg.cluster.running_cluster`, the tests' own code:
  ``fsync=off`` with ``synchronous_commit=on``, so a commit reaches the OS without a flush, as
  SQLite's ``synchronous=NORMAL`` does). It is the only client of that server, so the server's
  CPU is its: the postmaster and its children, counted together
  (:class:`~benchmarks.common.ProcessTree`) as ``bot_pg_postgres`` in ``cpu_utilisation`` and as
  ``cpu_us_per_answer_postgres`` per answer. Left out, with a note, without the PostgreSQL
  binaries (``--no-pg`` leaves it out anyway).

Before the systems start, the fence's cost per group commit is measured on the same server
(:mod:`benchmarks.pg_fence`, a shorter run than ``--only pg_fence``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from statistics import median
from typing import Any

from benchmarks.common import ProcessTree, md_table
from benchmarks.pg_fence import measure_on
from benchmarks.pg_fence import table as fence_table
from tests.pg.cluster import PASSWORD, PASSWORD_ENV, SKIP_REASON, Cluster

PG_SYSTEM = "bot_pg"


def pg_names() -> tuple[list[str], list[str]]:
    """The PostgreSQL system if it can run here, and a note if it cannot."""
    return ([], [SKIP_REASON.replace("tests", "bot_pg")]) if SKIP_REASON else ([PG_SYSTEM], [])


def overrides(cluster: Cluster, local: Path) -> dict[str, Any]:
    """Config overrides that put a bot's journal on a fresh database of ``cluster``."""
    os.environ[PASSWORD_ENV] = PASSWORD  # the children inherit it
    return {
        "storage.url": cluster.url(cluster.new_database()),
        "storage.password_env": PASSWORD_ENV,
        "storage.path": str(local),
    }


def pg_server(cluster: Cluster) -> ProcessTree:
    """The cluster's server processes (the postmaster's pid is the first line of its pid
    file)."""
    pid = int((cluster.home / "data" / "postmaster.pid").read_text().split()[0])
    return ProcessTree(pid)


def fence_cost(cluster: Cluster, quick: bool) -> dict[str, Any]:
    """The fence's cost per group commit on this run's server (batches of 1 and 10)."""
    return measure_on(cluster, batches=(1, 10), scale=0.1 if quick else 0.25, repeats=5)


# ---------------------------------------------------------------------------- the report


def figures(runs: Sequence[dict[str, Any]], systems: Sequence[str]) -> dict[str, dict[str, Any]]:
    """system -> the medians over the repeats that issue 27 asks for."""

    def med(phase: str, system: str, pick: Callable[[dict[str, Any]], Any]) -> float | None:
        values = [pick(r) for r in runs if r["phase"] == phase and r["system"] == system]
        present = [v for v in values if v is not None]
        return round(median(present), 2) if present else None

    out: dict[str, dict[str, Any]] = {}
    for s in systems:
        bot = med("saturation", s, lambda r: r["cpu_us_per_answer"])
        server_cpu = med("saturation", s, lambda r: r.get("cpu_us_per_answer_postgres"))
        out[s] = {
            "saturation_answers_per_s": med("saturation", s, lambda r: r["answers_per_s"]),
            "p99_ms_at_2000": med("rate_2000", s, lambda r: r["latency_ms"].get("p99")),
            "cpu_us_per_answer_bot": bot,
            "cpu_us_per_answer_postgres": server_cpu,
            "cpu_us_per_answer_bot_and_postgres": None
            if bot is None
            else round(bot + (server_cpu or 0.0), 2),
            "cpu_us_per_answer_bot_at_2000": med("rate_2000", s, lambda r: r["cpu_us_per_answer"]),
            "cpu_us_per_answer_postgres_at_2000": med(
                "rate_2000", s, lambda r: r.get("cpu_us_per_answer_postgres")
            ),
        }
    return out


def section(r: dict[str, Any]) -> list[str]:
    doc = r.get("issue27_pg")
    if not doc:
        notes = r["setup"].get("pg_notes") or []
        return (
            ["## Issue 27: the PostgreSQL journal", "", *[f"- {n}" for n in notes], ""]
            if (notes)
            else []
        )
    table = doc["figures"]
    rows = [[s, *[_fmt(v) for v in table[s].values()]] for s in table]
    header = ["system", "saturation answers/s", "p99 ms at 2,000/s", "CPU µs/answer (bot)",
              "CPU µs/answer (PostgreSQL)", "CPU µs/answer (both)", "bot at 2,000/s",
              "PostgreSQL at 2,000/s"]  # fmt: skip
    fence = doc.get("fence")
    lines = [
        "## Issue 27: the PostgreSQL journal beside SQLite's",
        "",
        md_table(header, rows),
        "",
        "Medians over the repeats; CPU per answer at saturation unless said. `bot_pg`: the same "
        "bot with `storage.url: postgresql://…` (lease 5 s) on a PostgreSQL 15 of its own on "
        "loopback (`fsync=off`, `synchronous_commit=on`: a commit reaches the OS unflushed, as "
        "SQLite's `synchronous=NORMAL` does); the server's CPU is the postmaster's and its "
        "children's (`/proc`), all of it this bot's.",
        "",
    ]
    if fence:
        row = fence["summary"]["1"]
        one = row["fence_cost_median_us"]
        lines += [
            "**The fence per group commit**, on the same server before the systems started "
            f"({fence['repeats']} repeats; method and a longer run: `benchmarks/pg_fence.md`): "
            f"median {one['median']:,.0f} µs [{one['min']:,.0f}–{one['max']:,.0f}] of wall time "
            f"for a commit of one entry ({row['fence_cost_share']:.0%} of the unfenced insert), "
            f"{row['fence_cost_server_cpu_us']:,.0f} µs of the server's CPU.",
            "",
            *fence_table(fence["summary"]),
            "",
        ]
    return lines


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:,.2f}" if isinstance(value, float) and value < 10 else f"{value:,.0f}"
