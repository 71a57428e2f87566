"""Where the time goes per answer: py-spy on the live bot and on the minimal solver, by stage.

Extra phases after the measured runs (:func:`profile_runs`): the bot at 500 requests/s (where
the background jobs show) and at saturation (where the per-quote path shows), then the minimal
solver (:mod:`benchmarks.minimal_solver`) at saturation, py-spy sampling the one process
driven.

"By stage" gives each busy sample of the main thread to the first stage, in the order of the
system's list (:data:`STAGES` for the bot, :data:`MINIMAL_STAGES` for the minimal solver),
found anywhere in its stack; what no stage claims is ``other``. Stages are matched mostly by
source file, so they survive renamed functions. The work both systems do (parse the event,
decide the price, sign, send the answer, websockets, asyncio) has one label shared by both
lists, so that the two read side by side.

Shares of busy samples alone do not compare across systems: the same 5 µs is a larger share
of a cheaper process. So each stage is also given in **µs of CPU per answer**: its share of
the busy samples × the phase's measured CPU µs per answer (the process's CPU from /proc over
the sending window, divided by the answers in it; :func:`with_costs`). The stages then add up
to the measured total and a stage's bot − minimal difference is the µs the bot spends there
above the floor (:func:`stage_costs`). This spreads the process's CPU over the stages as its
main thread's busy samples are spread: a busy sample may be off the CPU (waiting for a core
on a shared machine, py-spy's pause, a blocking system call), and other threads are not
sampled — the figures are an attribution of the measured total, not a second measurement.

Without py-spy, the in-process path is profiled with cProfile instead
(:func:`benchmarks.quote_path_inprocess.cprofile_desk_executor`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import (
    Child,
    Measured,
    Progress,
    Stages,
    analyse_collapsed,
    log_tail,
    pyspy_finish,
    pyspy_start,
)
from benchmarks.quote_path_driver import Phase, Relay, phase_figures, run_phase

_JOBS = ("refresh_balances", "refresh_salt", "refresh_fee", "poll_sandbox", "poll_static")
_SENDING = ("send_quote_response", "BusWsClient.send_answer", "QuoteLink.corked")


def _in(*paths: str) -> Callable[[str], bool]:
    """A frame test: the frame's code is in one of these files (robust to renamed functions)."""
    return lambda frame: any(f"({path})" in frame for path in paths)


# Labels shared by both systems' lists: the same work, one row of the comparison.
SEND = "send quote_response (JSON, websockets frame, deflate, socket write)"
SIGN = "sign (message, sha256, ed25519, base58, nonce)"
DECIDE = "desk: decide (filters, strategy, limits, reservation; minimal: fixed price, deadline)"
PARSE = "ws client: parse + validate + dispatch frames (minimal: parse)"
WEBSOCKETS = "websockets: receive (frame parsing, inflate)"
ASYNCIO = "asyncio: event loop, tasks, transports"
OTHER = "other"  # what no stage claims (analyse_collapsed's name)

_sign = _in("solver/protocol/quote_signing.py", "solver/protocol/nonce.py")


def _websockets(frame: str) -> bool:
    return "websockets/" in frame


def _asyncio(frame: str) -> bool:
    """asyncio's own code, not websockets' asyncio flavour, nor the runner at the root of
    every stack (under uvloop too), which would make this stage take whatever is left."""
    return "asyncio/" in frame and not _websockets(frame) and "asyncio/runners.py" not in frame


STAGES: Stages = [
    # The first stage (in this order) found anywhere in a stack gets the sample.
    (
        # The ticker moved from bot.py's _ticker to solver/runtime/upkeep.py: the old test
        # left its GC pass and gauges to the asyncio stage (the runner is in every stack).
        "ticker (upkeep): desk.tick (deadlines -> LOST, polls, markouts, PnL), projection, "
        "checkpoint, GC pass, gauges, and their journal records",
        lambda f: (
            _in("solver/runtime/upkeep.py", "solver/runtime/gc_pacer.py")(f) or "Desk.tick (" in f
        ),
    ),
    (
        "nonce checks (is_nonce_used RPCs for expired quotes)",
        lambda f: "_check_nonce (" in f or "is_nonce_used" in f,
    ),
    (
        "jobs: balance (incl. reconciliation) / salt / fee / price refresh",
        lambda f: f.split(" (")[0].endswith(_JOBS) or "(solver/io/price_feeds.py)" in f,
    ),
    ("operator: metrics gauges, summary line", _in("solver/runtime/operator.py")),
    # send_answer builds the params; the corked block's end is the one socket write of a
    # batch of answers.
    (SEND, lambda f: f.split(" (")[0].endswith(_SENDING)),
    (
        "journal: commit (one transaction per loop turn)",
        lambda f: "commit (solver/io/store/journal.py" in f,
    ),
    ("journal: append (fact and projection rows)", _in("solver/io/store/journal.py")),
    (
        "store: other writes",
        _in(
            "solver/io/store/sqlite_store.py",
            "solver/io/store/checkpoint_handoff.py",
            "solver/io/store/writes.py",
            "solver/io/store/nonce_registry.py",
            "solver/io/store/schema.py",
        ),
    ),
    (SIGN, _sign),
    (
        DECIDE,
        lambda f: (
            _in("solver/core/quoting.py", "solver/core/inventory.py", "solver/core/limits.py")(f)
            or "(strategies/" in f
        ),
    ),
    (
        "desk: the rest (events, facts, book, lifecycle, pauses)",
        lambda f: "(solver/core/" in f,
    ),
    (
        "executor and bot: request, outbox, metrics",
        _in(
            "solver/runtime/executor.py",
            "solver/runtime/outbox.py",
            "solver/runtime/bot.py",
            "solver/runtime/inbound.py",
            "solver/io/metrics.py",
        ),
    ),
    (
        PARSE,
        _in(
            "solver/io/bus_ws.py",
            "solver/io/bus_ws_receive.py",
            "solver/io/bus_frames.py",
            "solver/io/ws_link.py",
        ),
    ),
    (
        "HTTP client of the jobs (httpx, httpcore, anyio, h11), stack cut above it",
        lambda f: any(lib in f for lib in ("httpx/", "httpcore/", "anyio/", "h11/")),
    ),
    (WEBSOCKETS, _websockets),
    (ASYNCIO, _asyncio),
]

MINIMAL_STAGES: Stages = [
    # benchmarks/minimal_solver.py: _read parses and sends, answer prices and signs, response
    # builds the JSON; websockets' Connection.send frames and writes it.
    (
        SEND,
        lambda f: f.startswith(("Minimal.response (", "Connection.send (websockets/")),
    ),
    (SIGN, _sign),
    (DECIDE, lambda f: f.startswith("Minimal.answer (")),
    (WEBSOCKETS, _websockets),
    (PARSE, lambda f: f.startswith("Minimal._read (")),
    (ASYNCIO, _asyncio),
]

SYSTEM_STAGES: dict[str, Stages] = {"bot": STAGES, "minimal": MINIMAL_STAGES}


def profile_runs(quick: bool) -> list[tuple[str, Phase]]:
    """The extra phases with py-spy, as (system, phase): the bot at a sustainable rate (where
    the background jobs show) and at saturation (where the per-quote path shows), then the
    minimal solver at saturation, right after the bot's, for the comparison per stage."""
    s = 4.0 if quick else 8.0
    saturation = Phase("saturation (profiled)", "saturation", s)
    return [
        ("bot", Phase("rate_500 (profiled)", "rate", s, rate=500)),
        ("bot", saturation),
        ("minimal", saturation),
    ]


def profile_key(system: str, phase: Phase) -> str:
    """The name of a profile in the results (``profiles``, ``profiled_phases``)."""
    return f"{system}, {phase.name}"


async def pyspy_profile(
    system: str,
    relay: Relay,
    child: Child,
    scratch: Path,
    progress: Progress,
    phase: Phase,
    pids: dict[str, Measured],
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """py-spy on ``system``'s running process during one more phase: (its profile by stage,
    with µs per answer, and the phase's figures); (None, None) without py-spy, (None,
    figures) when py-spy failed."""
    out = scratch / f"pyspy-{system}-{phase.kind}-{int(phase.rate)}.txt"
    spy = await pyspy_start(child.pid, int(phase.seconds), out)
    if spy is None:
        return None, None
    longer = Phase(phase.name, phase.kind, phase.seconds + 1, phase.rate, phase.inflight)
    data = await run_phase(relay, longer, progress, {**pids, "py-spy": spy.pid})
    figures = phase_figures(data, system)
    text = await pyspy_finish(spy, out)
    if text is None:
        progress.log(f"py-spy failed: {' | '.join(log_tail(spy.log_path, 3))}")
        return None, figures
    stages = SYSTEM_STAGES[system]
    result = analyse_collapsed(text, stages)
    result["tool"] = (
        f"py-spy record --rate 250 --idle --function (pausing it per sample), on the {system}"
    )
    result["system"] = system
    result["stages"] = [label for label, _ in stages]
    return with_costs(result, figures), figures


def with_costs(profile: dict[str, Any], figures: dict[str, Any]) -> dict[str, Any]:
    """``profile`` with each stage's µs of CPU per answer: its share of the busy samples ×
    the phase's CPU µs per answer (``figures``, from /proc over the sending window), so that
    the stages add up to the measured total. None where there was no answer to divide by."""
    cpu = figures.get("cpu_us_per_answer")
    busy = profile.get("samples_busy", 0)
    profile["cpu_us_per_answer"] = cpu
    profile["answers_per_s"] = figures.get("answers_per_s")
    for group in profile.get("groups", []):
        group["us_per_answer"] = (
            round(group["samples"] / busy * cpu, 2) if cpu is not None and busy else None
        )
    return profile


COMPARED = ("bot, saturation (profiled)", "minimal, saturation (profiled)")
BOT_AT_RATE = "bot, rate_500 (profiled)"


def stage_costs(profiles: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """The comparison per stage, in µs of CPU per answer: the bot and the minimal solver at
    saturation, their difference, and the bot at 500/s. A stage missing from a system's list
    is None (it has no such work); a stage of its list that got no sample is 0. Rows (the
    stages with a sample in one of the profiles) in decreasing order of the first column's
    µs. None without a staged profile."""
    columns = [n for n in (*COMPARED, BOT_AT_RATE) if profiles.get(n, {}).get("groups")]
    if not columns:
        return None
    order: list[str] = []
    for name in columns:
        order += [g["group"] for g in profiles[name]["groups"] if g["group"] not in order]
    both = all(n in columns for n in COMPARED)

    def cell(name: str, stage: str, key: str) -> float | None:
        prof = profiles[name]
        found = next((g for g in prof["groups"] if g["group"] == stage), None)
        if found is not None:
            value = found.get(key)
            return None if value is None else float(value)
        if stage not in [*prof.get("stages", []), OTHER]:
            return None  # the system has no such work
        return 0.0 if key == "pct_of_busy" or prof["cpu_us_per_answer"] is not None else None

    rows: list[dict[str, Any]] = []
    for stage in order:
        us = {n: cell(n, stage, "us_per_answer") for n in columns}
        pct = {n: cell(n, stage, "pct_of_busy") for n in columns}
        bot, floor = us.get(COMPARED[0]), us.get(COMPARED[1])
        diff = None  # a stage the minimal has not costs it nothing: all the bot's is extra
        if both and (bot is not None or floor is not None):
            diff = round((bot or 0.0) - (floor or 0.0), 2)
        rows.append(
            {"stage": stage, "us_per_answer": us, "pct_of_busy": pct, "bot_minus_minimal": diff}
        )
    first = columns[0]
    rows.sort(key=lambda r: -(r["us_per_answer"].get(first) or 0.0))
    totals = {
        n: {
            "cpu_us_per_answer": profiles[n]["cpu_us_per_answer"],
            "answers_per_s": profiles[n]["answers_per_s"],
            "busy_share_pct": profiles[n]["busy_share_pct"],
            "samples_busy": profiles[n]["samples_busy"],
        }
        for n in columns
    }
    bot_total = totals.get(COMPARED[0], {}).get("cpu_us_per_answer")
    floor_total = totals.get(COMPARED[1], {}).get("cpu_us_per_answer")
    return {
        "columns": columns,
        "rows": rows,
        "totals": totals,
        "total_bot_minus_minimal": round(bot_total - floor_total, 2)
        if bot_total is not None and floor_total is not None
        else None,
        "method": "a stage's µs of CPU per answer = its share of the main thread's busy "
        "py-spy samples × the phase's CPU µs per answer (the process's CPU from /proc over "
        "the sending window / the answers in it)",
    }
