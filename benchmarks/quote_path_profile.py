"""Where the bot's time goes: py-spy on the live bot during extra phases, by stage.

"By stage" gives each busy sample to the first stage, in :data:`STAGES`' order, found anywhere
in its stack: the ticker and the scheduled jobs first, then sending the answer, the journal
commit and append, signing, deciding, the rest of the desk, the executor, the websocket client,
the jobs' HTTP client, websockets, asyncio. Stages are matched mostly by source file, so they
survive renamed functions. Without py-spy, the in-process path is profiled with cProfile
instead (:func:`benchmarks.quote_path_inprocess.cprofile_desk_executor`).
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
from benchmarks.quote_path_driver import Phase, PhaseData, Relay, run_phase

_JOBS = ("refresh_balances", "refresh_salt", "refresh_fee", "poll_sandbox", "poll_static")


def _in(*paths: str) -> Callable[[str], bool]:
    """A frame test: the frame's code is in one of these files (robust to renamed functions)."""
    return lambda frame: any(f"({path})" in frame for path in paths)


STAGES: Stages = [
    # The first stage (in this order) found anywhere in a stack gets the sample.
    (
        "ticker: desk.tick (deadlines -> LOST, polls, markouts, PnL) and its journal records",
        lambda f: "_ticker (solver/runtime/bot.py" in f or "Desk.tick (" in f,
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
    (
        "send quote_response (JSON, websockets frame, deflate, socket write)",
        lambda f: "send_quote_response (" in f,
    ),
    (
        "journal: commit (one transaction per loop turn)",
        lambda f: "commit (solver/io/store/journal.py" in f,
    ),
    ("journal: append (fact and projection rows)", _in("solver/io/store/journal.py")),
    ("store: other writes", _in("solver/io/store/sqlite_store.py", "solver/io/store/schema.py")),
    (
        "sign (message, sha256, ed25519, base58, nonce)",
        _in("solver/protocol/quote_signing.py", "solver/protocol/nonce.py"),
    ),
    (
        "desk: decide (filters, strategy, limits, reservation)",
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
        _in("solver/runtime/executor.py", "solver/runtime/bot.py", "solver/io/metrics.py"),
    ),
    (
        "ws client: parse + validate + dispatch frames",
        _in("solver/io/bus_ws.py", "solver/io/bus_frames.py", "solver/io/ws_link.py"),
    ),
    (
        "HTTP client of the jobs (httpx, httpcore, anyio, h11), stack cut above it",
        lambda f: any(lib in f for lib in ("httpx/", "httpcore/", "anyio/", "h11/")),
    ),
    ("websockets: receive (frame parsing, inflate)", lambda f: "websockets/" in f),
    ("asyncio: event loop, tasks, transports", lambda f: "asyncio/" in f),
]


def profile_phases(quick: bool) -> list[Phase]:
    """Extra phases with py-spy on the bot: a sustainable rate (where the background jobs
    show) and saturation (where the per-quote path shows)."""
    s = 4.0 if quick else 8.0
    return [
        Phase("rate_500 (profiled)", "rate", s, rate=500),
        Phase("saturation (profiled)", "saturation", s),
    ]


async def pyspy_profile(
    relay: Relay,
    bot: Child,
    scratch: Path,
    progress: Progress,
    phase: Phase,
    pids: dict[str, Measured],
) -> tuple[dict[str, Any] | None, PhaseData | None]:
    """py-spy on the running bot during one more phase; (None, None) without py-spy."""
    out = scratch / f"pyspy-bot-{phase.kind}-{int(phase.rate)}.txt"
    spy = await pyspy_start(bot.pid, int(phase.seconds), out)
    if spy is None:
        return None, None
    longer = Phase(phase.name, phase.kind, phase.seconds + 1, phase.rate, phase.inflight)
    data = await run_phase(relay, longer, progress, {**pids, "py-spy": spy.pid})
    text = await pyspy_finish(spy, out)
    if text is None:
        progress.log(f"py-spy failed: {' | '.join(log_tail(spy.log_path, 3))}")
        return None, data
    result = analyse_collapsed(text, STAGES)
    result["tool"] = (
        "py-spy record --rate 250 --idle --function (pausing it per sample), on the bot"
    )
    return result, data
