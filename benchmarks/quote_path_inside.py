"""What the bot says about itself in ``quote_path``: histograms read from its ``/metrics``
before and after each run, and the lines of the report that show them.

- ``solver_loop_lag_seconds`` (and ``_held_seconds``: the lateness less the loop thread's wait
  for a core): how late the bot's 20 ms ticker woke, to tell its own stalls from the driver's
  and the machine's;
- ``solver_response_seconds``: from the request handed to the desk to its answer written to
  the socket, the part of the driver's latency spent inside the bot's quote path (parsing the
  frame before it, the sockets, the kernel and the driver's own loop are the rest). At 500/s
  the bot idles between requests and its path runs with cold caches: this is where that
  shows (docs/performance.md, "p99 at 500/s: a cold path").

Histogram quantiles are interpolated linearly within a bucket, as Prometheus'
``histogram_quantile`` does: a figure, not a measurement finer than the bucket bounds
(:data:`solver.io.metrics.LATENCY_BUCKETS`).
"""

from __future__ import annotations

import statistics
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

LAG = "solver_loop_lag_seconds"
HELD = "solver_loop_lag_held_seconds"
RESPONSE = "solver_response_seconds"
_READ = (LAG, HELD, RESPONSE)

Histograms = dict[str, dict[str, float]]
"""Family name -> ``{upper bound as text: cumulative count}`` (``"+Inf"`` last) with ``"sum"``."""


async def scrape_histograms(url: str) -> Histograms:
    """The bot's histograms of :data:`_READ` from its ``/metrics``; empty when they cannot be
    read."""
    try:
        async with httpx.AsyncClient(timeout=5.0) as client:
            text = (await client.get(url)).text
    except httpx.HTTPError:
        return {}
    out: Histograms = {}
    for family in text_string_to_metric_families(text):
        if family.name not in _READ:
            continue
        buckets = out.setdefault(family.name, {})
        for sample in family.samples:
            if sample.name.endswith("_bucket"):
                buckets[sample.labels["le"]] = sample.value
            elif sample.name.endswith("_sum"):
                buckets["sum"] = sample.value
    return out


def _counts(before: dict[str, float], after: dict[str, float]) -> dict[str, float] | None:
    """The cumulative counts of the observations between two scrapes (without ``sum``)."""
    if not after or "+Inf" not in after:
        return None
    return {le: after[le] - before.get(le, 0.0) for le in after if le != "sum"}


def loop_lag_figures(before: Histograms, after: Histograms) -> dict[str, Any] | None:
    """How late the bot's 20 ms ticker woke between two scrapes (:func:`_lag_figures`), with
    ``held``: the same figures for the lateness less the thread's wait for a core."""
    lag = _lag_figures(before.get(LAG, {}), after.get(LAG, {}))
    if lag is None:
        return None
    lag["held"] = _lag_figures(before.get(HELD, {}), after.get(HELD, {}))
    return lag


def _lag_figures(before: dict[str, float], after: dict[str, float]) -> dict[str, Any] | None:
    """Ticks, how many over 5 ms, and the bucket of the latest (``worst_le_ms``: its upper
    bound; None past the last bound)."""
    counts = _counts(before, after)
    if counts is None:
        return None
    ticks = counts["+Inf"]
    bounds = sorted((float(le), n) for le, n in counts.items() if le != "+Inf")
    worst = next((le for le, n in bounds if n >= ticks), None)
    over_5ms = ticks - next((n for le, n in bounds if le >= 0.005), ticks)
    return {
        "ticks": int(ticks),
        "over_5ms": int(over_5ms),
        "worst_le_ms": None if worst is None else round(worst * 1000, 1),
        "mean_ms": round((after["sum"] - before.get("sum", 0.0)) / ticks * 1000, 3)
        if ticks
        else None,
    }


def response_figures(before: Histograms, after: Histograms) -> dict[str, Any] | None:
    """The answers written between two scrapes and the p50 and p99 of their time inside the
    bot (ms, interpolated within a bucket; None past the last bound)."""
    old, new = before.get(RESPONSE, {}), after.get(RESPONSE, {})
    counts = _counts(old, new)
    if counts is None or not counts["+Inf"]:
        return None
    total = counts["+Inf"]
    return {
        "answers": int(total),
        "p50_ms": _quantile_ms(counts, 0.5),
        "p99_ms": _quantile_ms(counts, 0.99),
        "mean_ms": round((new["sum"] - old.get("sum", 0.0)) / total * 1000, 3),
    }


def _quantile_ms(counts: dict[str, float], q: float) -> float | None:
    """``histogram_quantile``: the bucket where the ``q`` rank falls, linear within it (from 0
    for the first bucket); None when it falls past the last finite bound."""
    rank = q * counts["+Inf"]
    lower, below = 0.0, 0.0
    for bound, cumulative in sorted((float(le), n) for le, n in counts.items() if le != "+Inf"):
        if cumulative >= rank:
            inside = cumulative - below
            share = (rank - below) / inside if inside else 1.0
            return round((lower + (bound - lower) * share) * 1000, 3)
        lower, below = bound, cumulative
    return None


# ---------------------------------------------------------------------------- the report


def own_lag(runs: list[dict[str, Any]]) -> str:
    """The bot's own measure (``solver_loop_lag_seconds``, its 20 ms ticker) over the runs at
    500 and 2,000/s and their after-work: it sees a stall only when a tick falls due inside it
    (one of 8 ms, with a 40 % chance), so it attributes gaps rather than proving their absence.
    ``held``: the lateness less the loop thread's wait for a core (Linux schedstat), the part
    the bot's own work or blocking held the loop, at least."""
    lags = [
        run["loop_lag"]
        for run in runs
        if run["system"] == "bot" and run["phase"].startswith("rate_") and run.get("loop_lag")
    ]
    if not lags:
        return "The bot's own ticker lateness was not read."
    text = (
        f"Inside the bot (`solver_loop_lag_seconds`, how late its 20 ms ticker woke, in those "
        f"runs and their after-work): {_late(lags)}; a tick sees a stall only when it falls "
        f"due inside it."
    )
    held = [lag["held"] for lag in lags if lag.get("held")]
    if len(held) == len(lags):
        text += (
            f" Less the time the loop's thread waited for a core meanwhile "
            f"(`solver_loop_lag_held_seconds`: what the bot held the loop itself, at least; "
            f"the wait is counted over the whole sleep): {_late(held)}."
        )
    return text


def _late(lags: list[dict[str, Any]]) -> str:
    ticks = sum(lag["ticks"] for lag in lags)
    over = sum(lag["over_5ms"] for lag in lags)
    bounds = [lag["worst_le_ms"] for lag in lags]
    worst = "over 5,000" if None in bounds else f"≤ {max(b for b in bounds if b is not None):g}"
    return f"{over:,} of {ticks:,} ticks late by more than 5 ms, the latest {worst} ms"


def inside_share(runs: list[dict[str, Any]]) -> str:
    """How much of the driver's latency the bot's own quote path took, per rate phase: the
    medians over the repeats of ``solver_response_seconds``' p50 and p99 beside the driver's
    (the two p99s are of different populations' tails, so they are compared, not
    subtracted)."""
    lines = []
    for phase in ("rate_500", "rate_2000"):
        mine = [r for r in runs if r["system"] == "bot" and r["phase"] == phase]
        inside = [r["inside"] for r in mine if r.get("inside")]
        if not inside or len(inside) != len(mine):
            continue
        cells = []
        for key in ("p50", "p99"):
            own = [i[f"{key}_ms"] for i in inside if i[f"{key}_ms"] is not None]
            seen = [r["latency_ms"][key] for r in mine]
            if len(own) != len(inside):
                cells.append(f"{key} past the last bucket")
                continue
            cells.append(f"{key} {statistics.median(own):.2f} of {statistics.median(seen):.2f} ms")
        rate = phase.removeprefix("rate_")
        lines.append(f"at {int(rate):,}/s {', '.join(cells)}")
    if not lines:
        return "The bot's own response time was not read."
    return (
        "`solver_response_seconds` (from the request handed to the desk to its answer "
        "written; medians over the repeats, beside the driver's): "
        + "; ".join(lines)
        + ". The rest is the frame's parsing before the desk, the sockets, the kernel and "
        "the driver."
    )
