"""Failover of two instances of one account on the shared PostgreSQL journal (issue 27):
``python -m benchmarks.run --only failover [--quick]`` writes failover.json and failover.md.

A real PostgreSQL 15 (the tests' cluster: /usr/lib/postgresql/15/bin, run as the ``postgres``
user when root), the sandbox, and two ``solver run`` processes of one key with ``lease_s: 2``,
a user asking for quotes without a pause. Each round stops the active — alternately SIGTERM
(a clean stop: the lease is released) and ``kill -9`` (it expires) — measures the time from
the signal to the first answer the relay receives from the other instance, and starts the
stopped one again as the new standby. At the end the relay's record is judged as the tests
judge it: every answer it received is in the journal, no nonce repeats, never two instances
answering at once.
"""

from __future__ import annotations

import asyncio
import os
import signal
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import Progress, machine_info, scratch_dir, write_json
from tests.app.harness import running_sandbox
from tests.pg.cluster import PASSWORD, PASSWORD_ENV, SKIP_REASON, running_cluster
from tests.pg.two_instances import LEASE_S, Instance, active_and_standby, two_instances

NAME = "failover"


async def rounds(scratch: Path, count: int, progress: Progress) -> dict[str, Any]:
    with running_cluster() as cluster:
        os.environ[PASSWORD_ENV] = PASSWORD
        url = cluster.url(cluster.new_database())
        async with (
            running_sandbox(scratch) as sandbox,
            two_instances(sandbox, url, scratch) as pair,
        ):
            times: dict[str, list[float]] = {"sigterm": [], "kill_9": []}
            runs = {"a": 1, "b": 1}
            async with active_and_standby(pair, 60) as (first, second, _):
                active, standby = first, second
                for index in range(count):
                    how = "sigterm" if index % 2 == 0 else "kill_9"
                    sent = time.monotonic()
                    active.process.send_signal(
                        signal.SIGTERM if how == "sigterm" else signal.SIGKILL
                    )
                    took = await pair.new_answer(sent, "the standby to answer", LEASE_S + 20)
                    times[how].append(took - sent)
                    progress.update(f"round {index + 1}/{count}: {how} {took - sent:.2f} s")
                    await asyncio.wait_for(active.process.wait(), 30)
                    name = active.name
                    runs[name] += 1
                    restarted: Instance = await pair.start(name, run=runs[name])
                    await restarted.said("standby for", 60)
                    active, standby = standby, restarted
            spans = pair.judge()
            answers = sum(count for _, _, count in spans.values())
    return {"lease_s": LEASE_S, "times_s": times, "instances_answering": len(spans),
            "answers_judged": answers}  # fmt: skip


def summary(times: list[float]) -> dict[str, float] | None:
    if not times:
        return None
    return {"n": len(times), "median_s": statistics.median(times), "max_s": max(times),
            "min_s": min(times)}  # fmt: skip


def markdown(doc: dict[str, Any]) -> str:
    lines = [
        "# Failover (two instances, PostgreSQL journal)",
        "",
        f"`{doc['command']}` — lease {doc['lease_s']} s; time from the signal to the relay's "
        "first answer from the other instance.",
        "",
        "| stop | rounds | median | min | max |",
        "|---|---|---|---|---|",
    ]
    for how, row in doc["summary"].items():
        if row is not None:
            lines.append(
                f"| {how} | {row['n']} | {row['median_s']:.2f} s | {row['min_s']:.2f} s | "
                f"{row['max_s']:.2f} s |"
            )
    lines += [
        "",
        f"Judged from the relay: {doc['answers_judged']} answers from "
        f"{doc['instances_answering']} instance runs, every one in the journal, no nonce "
        "repeated, never two answering at once.",
        "",
    ]
    return "\n".join(lines)


async def run(results: Path, *, quick: bool, command: str, quiet: dict[str, Any]) -> dict[str, Any]:
    if SKIP_REASON is not None:
        raise RuntimeError(SKIP_REASON)
    scratch = Path(tempfile.mkdtemp(prefix="run-", dir=scratch_dir(results, NAME)))
    doc = await rounds(scratch, 4 if quick else 10, Progress(NAME, every_s=0.0))
    doc["summary"] = {how: summary(values) for how, values in doc["times_s"].items()}
    doc |= {"command": command, "quiet": quiet, "machine": machine_info()}
    write_json(results / f"{NAME}.json", doc)
    (results / f"{NAME}.md").write_text(markdown(doc), encoding="utf-8")
    return doc
