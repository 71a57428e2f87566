"""The floor under the replay: the same stream through one flat loop that does only the work
every request needs, to show how much of the replay's cost is the work and how much its shape.

Per line: gzip, ``orjson.loads``, the version, kind and timestamp (cached per second, as the
reader does). Per request: its fields checked and its amount parsed, the route, the prices'
age, the notional, the ``spread`` strategy's integer arithmetic (25 bps, the conversion rate
cached per price update), the price guard, the exposure over the reserved assets, the free
inventory, a reservation and its deadline. Per competitor record: a win when the answer beats
the best competitor; a win moves balances. Once a second of stream time: reservations past
their deadline released (LOST).

Left out, by design — they are what the replay is for, and where its cost goes: the desk's
facts and actions, the quote book and its lifecycle, reconciliation, PnL and markouts, the
executor and its ports (the nonce, the stand-in signer, the outbox), the relay's latency and
taker models, the measurements. So this is not a replay; it is the lower bound of any replay
in pure CPython on this machine (issue 29: a compiled core is ruled out), which the replay
benchmark prints beside its own figure: the replay's µs a request less this is what its
structure costs.
"""

from __future__ import annotations

import gzip
import time
from collections import deque
from datetime import UTC, datetime
from typing import Any, NamedTuple

import orjson

from solver.core.clock import span
from solver.core.quoting import QuotePipeline

U128_MAX = 2**128 - 1
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class Limits(NamedTuple):
    """What the floor's decisions read, taken from the replay's own pipeline
    (:func:`limits_of`), so the two decide by the same numbers."""

    routes: frozenset[tuple[str, str]]
    spread_bps: int
    deadline_margin_ms: int
    price_max_age_us: int
    guard: float
    max_exposure_usd: float


def limits_of(pipeline: QuotePipeline) -> Limits:
    """The pipeline's routes (every one ``spread`` with one constant integer spread), its
    deadline margin, price age, price guard and exposure limit."""
    routes = pipeline.routes
    spreads = {route.strategy.config.spread_bps for route in routes.values()}  # type: ignore[attr-defined]
    guards = {route.max_giveaway_bps for route in routes.values()}
    if len(spreads) != 1 or len(guards) != 1 or not float(next(iter(spreads))).is_integer():
        raise ValueError("the floor takes one whole spread and one price guard for every route")
    settings = pipeline.settings
    return Limits(
        frozenset(routes),
        int(spreads.pop()),
        settings.deadline_margin_ms,
        span(settings.price_max_age_s),
        1 + guards.pop() / 10_000,
        settings.max_open_exposure_usd,
    )


def floor_run(path: str, limits: Limits) -> dict[str, Any]:
    """The flat loop over the stream at ``path``; its counts and CPU seconds."""
    started = time.process_time()
    with gzip.open(path, "rb") as file:
        header = orjson.loads(file.readline())
        decimals = {token: int(info["decimals"]) for token, info in header["tokens"].items()}
        counts = _loop(file, decimals, limits)
    counts["cpu_s"] = time.process_time() - started
    return counts


def _loop(file: Any, decimals: dict[str, int], limits: Limits) -> dict[str, Any]:
    routes = limits.routes
    canonical = {token: token for token in decimals}
    unit = {token: 10.0**d for token, d in decimals.items()}
    confirmed = {token: 10**40 for token in decimals}
    reserved = dict.fromkeys(decimals, 0)
    prices: dict[str, float] = {}
    priced_at: dict[str, int] = {}
    rates: dict[tuple[str, str], tuple[int, int]] = {}
    reservations: dict[str, tuple[str, int, str, int]] = {}
    deadlines: deque[tuple[int, str]] = deque()
    answers: dict[str, tuple[int, bool]] = {}
    informed: set[str] = set()
    keep_n, keep_d = 10_000 - limits.spread_bps, 10_000
    requests = quoted = won = lost = 0
    last_text: object = None
    last_us = second_us = next_expiry = 0
    second: object = None
    for line in file:
        obj = orjson.loads(line)
        if obj.get("v") != 1:
            continue
        text, kind, data = obj["ts"], obj["kind"], obj["data"]
        if text == last_text:
            t_us = last_us
        elif text[:19] == second:
            t_us = last_us = second_us + int(text[20:23]) * 1_000
            last_text = text
        else:
            whole = datetime.fromisoformat(text[:19] + "+00:00")
            second, second_us = text[:19], int((whole - EPOCH).total_seconds()) * 1_000_000
            t_us = last_us = second_us + int(text[20:23]) * 1_000
            last_text = text
        if t_us >= next_expiry:
            while deadlines and deadlines[0][0] < t_us:
                quote_id = deadlines.popleft()[1]
                held = reservations.pop(quote_id, None)
                if held is not None:
                    reserved[held[0]] -= held[1]
                    answers.pop(quote_id, None)
                    lost += 1
            next_expiry = t_us + 1_000_000
        if kind == "quote_request":
            requests += 1
            quote_id = data["quote_id"]
            asset_in = canonical.get(data["core_asset_identifier_in"])
            asset_out = canonical.get(data["core_asset_identifier_out"])
            deadline_ms = data["min_deadline_ms"]
            exact_in = "exact_amount_in" in data
            raw = data["exact_amount_in"] if exact_in else data["exact_amount_out"]
            if (
                quote_id.__class__ is not str
                or asset_in is None
                or asset_out is None
                or raw.__class__ is not str
                or not raw.isdigit()
                or deadline_ms.__class__ is not int
            ):
                continue
            amount = int(raw)
            if amount > U128_MAX or (asset_in, asset_out) not in routes or quote_id in reservations:
                continue
            usd_in, usd_out = prices.get(asset_in), prices.get(asset_out)
            if usd_in is None or usd_out is None:
                continue
            if t_us - min(priced_at[asset_in], priced_at[asset_out]) > limits.price_max_age_us:
                continue
            key = (asset_in, asset_out) if exact_in else (asset_out, asset_in)
            rate = rates.get(key)
            if rate is None:
                from_n, from_d = prices[key[0]].as_integer_ratio()
                to_n, to_d = prices[key[1]].as_integer_ratio()
                rate = rates[key] = (
                    from_n * to_d * 10 ** decimals[key[1]],
                    from_d * to_n * 10 ** decimals[key[0]],
                )
            num, den = rate
            if exact_in:
                amount_in, amount_out = amount, (amount * num * keep_n) // (den * keep_d)
                if amount_out <= 0:
                    continue
            else:
                amount_in, amount_out = -((-amount * num * keep_d) // (den * keep_n)), amount
            value_in = amount_in * usd_in / unit[asset_in]
            value_out = amount_out * usd_out / unit[asset_out]
            if value_out > value_in * limits.guard:
                continue
            exposure = 0.0
            for asset, held_out in reserved.items():
                exposure += held_out * prices[asset] / unit[asset]
            if exposure + value_out > limits.max_exposure_usd:
                continue
            if amount_out > confirmed[asset_out] - reserved[asset_out]:
                continue
            deadline = t_us + (deadline_ms + limits.deadline_margin_ms) * 1_000
            reservations[quote_id] = (asset_out, amount_out, asset_in, amount_in)
            reserved[asset_out] += amount_out
            deadlines.append((deadline, quote_id))
            answers[quote_id] = (amount_out if exact_in else amount_in, exact_in)
            quoted += 1
        elif kind == "competitor":
            answer = answers.pop(data["quote_id"], None)
            best = data["best_amount"]
            if answer is None or not best.isdigit():
                continue
            ours, exact_in = answer
            if (ours > int(best)) if exact_in else (ours < int(best)):
                won += 1
                held = reservations.pop(data["quote_id"], None)
                if held is not None:
                    reserved[held[0]] -= held[1]
                    confirmed[held[0]] -= held[1]
                    confirmed[held[2]] += held[3]
        elif kind == "price":
            asset = data["asset"]
            prices[asset], priced_at[asset] = float(data["usd"]), t_us
            rates.clear()
        elif kind == "informed":
            informed.add(data["quote_id"])
    return {"requests": requests, "quoted": quoted, "won": won, "lost": lost}


def floor_us(path: str, pipeline: QuotePipeline, repeats: int = 3) -> dict[str, Any]:
    """The floor's µs a request with ``pipeline``'s limits: the median of ``repeats`` runs,
    with the last run's counts."""
    limits = limits_of(pipeline)
    runs = [floor_run(path, limits) for _ in range(repeats)]
    per_request = sorted(run["cpu_s"] / max(run["requests"], 1) * 1e6 for run in runs)
    return {**runs[-1], "us_per_request": round(per_request[len(per_request) // 2], 2)}
