"""The cost of the lease's fence per group commit of the PostgreSQL journal (issue 27):
``python -m benchmarks.run --only pg_fence [--quick]`` writes pg_fence.json and pg_fence.md.

A throwaway PostgreSQL 15 (the tests' cluster, :mod:`tests.pg.cluster`: ``fsync=off``,
``synchronous_commit=on``, so a commit writes its WAL to the OS without flushing it, as the
SQLite journal's ``synchronous=NORMAL`` does), one database with the store's schema
(:func:`~solver.io.store.migrations.migrate_pg`) and a lease this process holds
(:class:`~solver.io.store.pg.lease.Lease`), one connection made as the bot makes it
(:func:`~solver.io.store.pg.conn.connect`: same session settings). On it, the journal's group
commit of the same batches, timed two ways:

- **fenced**: the statement the bot runs (:data:`~solver.io.store.pg.journal.FENCED_INSERT`):
  the lease row checked and locked ``FOR UPDATE`` and the batch inserted, one statement;
- **unfenced**: the same ``INSERT … SELECT … FROM unnest(…)`` of the same batch without the
  fence (derived from the same text, so nothing else differs).

Batches of 1, 10 and 50 entries of ~1 KB (a ``quote_opened`` entry with its signed answer is
~1 KB). Each kind has a connection of its own (they swap kinds between repeats), and a block is
pairs of commits, one of each kind back to back (which goes first alternates), so both kinds of
a pair see the same moment of a shared, busy machine. Per block: the median and p99 of the
client's wall time per commit (``perf_counter_ns`` around ``execute`` and ``fetchall``: one
round trip on loopback), each kind's backend CPU per commit (``/proc/<backend pid>/stat``
over the block), and the median of the pairs' differences: the fence's cost. Over the repeats
(the journal emptied with ``TRUNCATE`` before each): median [min–max]; the server's CPU (read
in 10 ms clock ticks) as the mean over the blocks.
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path
from typing import Any

import psycopg

from benchmarks.common import (
    cpu_seconds,
    dirty_note,
    machine_info,
    md_table,
    quantile,
    write_json,
)
from solver.io.store.migrations import migrate_pg
from solver.io.store.pg.conn import connect
from solver.io.store.pg.journal import FENCED_INSERT
from solver.io.store.pg.lease import Lease
from tests.pg.cluster import PASSWORD, PASSWORD_ENV, SKIP_REASON, Cluster, running_cluster

NAME = "pg_fence"
BATCHES = (1, 10, 50)
COMMITS = {1: 2000, 10: 1000, 50: 300}
"""Commits per block, by entries per commit (more for the cheap ones: the backend's CPU is read
in clock ticks of 10 ms)."""
BODY_BYTES = 1000
UNFENCED_INSERT = FENCED_INSERT[FENCED_INSERT.index("INSERT INTO") :].replace(
    "FROM fence, unnest", "FROM unnest"
)
assert "fence" not in UNFENCED_INSERT  # the same insert, without the fence
KINDS = ("fenced", "unfenced")


def _batch(size: int, seq: int) -> tuple[list[int], list[str], list[str]]:
    body = '{"quote_id":"%08d","pad":"' + "x" * (BODY_BYTES - 40) + '"}'
    return (
        [1_700_000_000_000_000 + seq + i for i in range(size)],
        ["quote_opened"] * size,
        [body % (seq + i) for i in range(size)],
    )


def _commit(
    conn: psycopg.Connection, kind: str, fence: tuple[str, str, int], size: int, seq: int
) -> float:
    """One group commit of ``size`` entries; its wall time in µs."""
    rows = _batch(size, seq)
    sql, params = (FENCED_INSERT, (*fence, *rows)) if kind == "fenced" else (UNFENCED_INSERT, rows)
    started = time.perf_counter_ns()
    got = conn.execute(sql, params).fetchall()
    took = (time.perf_counter_ns() - started) / 1000
    if len(got) != size:
        raise RuntimeError(f"{kind}: {len(got)} rows written of {size} (the lease lost?)")
    return took


def _block(
    conns: dict[str, psycopg.Connection], fence: tuple[str, str, int], size: int, commits: int
) -> dict[str, Any]:
    """``commits`` pairs of commits of ``size`` entries, a fenced one and an unfenced one back
    to back (which goes first alternates), each kind on its own connection: per kind, wall µs
    per commit (median, p99, mean) and its backend's CPU µs per commit; and the median of the
    pairs' differences (fenced minus unfenced: the same moment's noise in both)."""
    backends = {
        kind: int(c.execute("SELECT pg_backend_pid()").fetchone()[0])  # type: ignore[index]
        for kind, c in conns.items()
    }
    times: dict[str, list[float]] = {kind: [] for kind in KINDS}
    cpu_before = {kind: cpu_seconds(pid) for kind, pid in backends.items()}
    for n in range(commits):
        for kind in KINDS if n % 2 == 0 else KINDS[::-1]:
            times[kind].append(_commit(conns[kind], kind, fence, size, 2 * n * size))
    out: dict[str, Any] = {}
    for kind in KINDS:
        ordered = sorted(times[kind])
        cpu = cpu_seconds(backends[kind]) - cpu_before[kind]
        out[kind] = {
            "median_us": round(statistics.median(ordered), 1),
            "p99_us": round(quantile(ordered, 0.99), 1),
            "mean_us": round(statistics.fmean(ordered), 1),
            "server_cpu_us": round(cpu / commits * 1e6, 1),
        }
    pairs = [f - u for f, u in zip(times["fenced"], times["unfenced"], strict=True)]
    out["paired_cost_us"] = round(statistics.median(pairs), 1)
    return out


def measure(
    url: str, *, batches: tuple[int, ...] = BATCHES, scale: float = 1.0, repeats: int = 7
) -> dict[str, Any]:
    """Time fenced and unfenced group commits on the database at ``url`` (empty, or holding
    the store's schema; the password in ``$SOLVER_TEST_PG_PASSWORD``): :data:`COMMITS` times
    ``scale`` pairs per block, ``repeats`` times, the two connections swapping kinds between
    repeats."""
    commits = {size: max(20, int(COMMITS.get(size, 300) * scale)) for size in batches}
    one, two = (connect(url, PASSWORD_ENV, application_name="bench pg_fence") for _ in "12")
    try:
        migrate_pg(one)
        lease = Lease("bench-fence", duration_s=3600.0)
        if not lease.try_take(one):
            raise RuntimeError("the benchmark's lease is held by someone else")
        fence = lease.fence_params()
        _block({"fenced": one, "unfenced": two}, fence, 10, 50)  # warm: plans, pages
        _block({"fenced": two, "unfenced": one}, fence, 10, 50)
        runs: list[dict[str, Any]] = []
        for rep in range(repeats):
            one.execute("TRUNCATE journal")
            conns = (
                {"fenced": one, "unfenced": two}
                if rep % 2 == 0
                else {"fenced": two, "unfenced": one}
            )
            for size in batches:
                figures = _block(conns, fence, size, commits[size])
                runs.append({"repeat": rep, "batch": size, **figures})
        one.execute("TRUNCATE journal")
    finally:
        one.close()
        two.close()
    return {
        "batches": list(batches),
        "commits_per_block": {str(k): v for k, v in commits.items()},
        "repeats": repeats,
        "body_bytes": BODY_BYTES,
        "runs": runs,
        "summary": summarise(runs, batches),
    }


def _spread(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 1),
        "min": round(min(values), 1),
        "max": round(max(values), 1),
    }


def summarise(runs: list[dict[str, Any]], batches: tuple[int, ...]) -> dict[str, dict[str, Any]]:
    """Per batch size: each kind's figures over the repeats, and the fence's cost (the median
    of each block's paired differences, over the repeats)."""
    out: dict[str, dict[str, Any]] = {}
    for size in batches:
        mine = [r for r in runs if r["batch"] == size]
        row: dict[str, Any] = {
            kind: {k: _spread([r[kind][k] for r in mine]) for k in ("median_us", "p99_us")}
            for kind in KINDS
        }
        row["fence_cost_median_us"] = _spread([r["paired_cost_us"] for r in mine])
        # The backend's CPU is read in 10 ms ticks: over all the blocks of a kind (the same
        # number of commits each), not block by block.
        for kind in KINDS:
            row[kind]["server_cpu_us"] = round(
                statistics.fmean(r[kind]["server_cpu_us"] for r in mine), 1
            )
        row["fence_cost_server_cpu_us"] = round(
            row["fenced"]["server_cpu_us"] - row["unfenced"]["server_cpu_us"], 1
        )
        row["fence_cost_share"] = round(
            row["fence_cost_median_us"]["median"] / row["unfenced"]["median_us"]["median"], 3
        )
        out[str(size)] = row
    return out


def table(summary: dict[str, dict[str, Any]]) -> list[str]:
    """The figures as a markdown table (also in the quote_path report)."""

    def cell(s: dict[str, float]) -> str:
        return f"{s['median']:,.0f} [{s['min']:,.0f}–{s['max']:,.0f}]"

    rows = [
        [
            size,
            cell(row["fenced"]["median_us"]),
            cell(row["unfenced"]["median_us"]),
            cell(row["fence_cost_median_us"]),
            f"{row['fence_cost_share']:.0%}",
            f"{row['fenced']['p99_us']['median']:,.0f} / "
            f"{row['unfenced']['p99_us']['median']:,.0f}",
            f"{row['fenced']['server_cpu_us']:,.0f} / {row['unfenced']['server_cpu_us']:,.0f}",
        ]
        for size, row in summary.items()
    ]
    header = ["entries per commit", "fenced µs (median)", "unfenced µs (median)",
              "fence cost µs", "cost / unfenced", "p99 µs fenced / unfenced",
              "server CPU µs/commit fenced / unfenced"]  # fmt: skip
    return [md_table(header, rows)]


def markdown(doc: dict[str, Any]) -> str:
    m = doc["machine"]
    lines = [
        "# The lease's fence per group commit (PostgreSQL journal, issue 27)",
        "",
        f"Run: `{doc['command']}`, {m['date_utc']}, commit `{m['git_commit']}`{dirty_note(m)}, "
        f"{m['cpu_model']} × {m['cpus']}; other processes used "
        f"{(doc.get('quiet') or {}).get('background_cores_at_start', '-')} cores before it. "
        f"PostgreSQL {doc['server_version']} on loopback (`fsync=off`, `synchronous_commit=on`), "
        f"{doc['repeats']} repeats of a block of pairs of commits per batch size ("
        + ", ".join(f"{n:,} pairs of {b}" for b, n in doc["commits_per_block"].items())
        + "), "
        f"entries of {doc['body_bytes']} B. Cells: the median over the repeats [min–max] of "
        "each block's median; the cost is the median of fenced minus unfenced over pairs of "
        "commits made back to back; the server's CPU is each kind's backend's over all its "
        "blocks, per commit. Method: "
        "`benchmarks/pg_fence.py`.",
        "",
        *table(doc["summary"]),
        "",
        "The fence is the lease row read and locked `FOR UPDATE` in the commit's own statement "
        "(the lock writes the row's lock bits: a small WAL record), and the insert joined to "
        "it. A real server adds its WAL flush and the network's round trip to both kinds "
        "alike; the fence adds no round trip.",
        "",
    ]
    return "\n".join(lines)


def server_version(url: str) -> str:
    conn = connect(url, PASSWORD_ENV, application_name="bench pg_fence")
    try:
        return str(conn.execute("SHOW server_version").fetchone()[0])  # type: ignore[index]
    finally:
        conn.close()


def measure_on(cluster: Cluster, **kwargs: Any) -> dict[str, Any]:
    """:func:`measure` on a fresh database of ``cluster``."""
    os.environ[PASSWORD_ENV] = PASSWORD
    url = cluster.url(cluster.new_database())
    return {**measure(url, **kwargs), "server_version": server_version(url)}


async def run(results: Path, *, quick: bool, command: str, quiet: dict[str, Any]) -> dict[str, Any]:
    if SKIP_REASON is not None:
        raise RuntimeError(SKIP_REASON)
    with running_cluster() as cluster:
        doc = measure_on(cluster, scale=0.1 if quick else 1.0, repeats=2 if quick else 7)
    doc |= {"command": command, "quick": quick, "quiet": quiet, "machine": machine_info()}
    write_json(results / f"{NAME}.json", doc)
    (results / f"{NAME}.md").write_text(markdown(doc), encoding="utf-8")
    return doc
