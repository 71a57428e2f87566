"""A desk with one pair and fresh inputs, driven synchronously (time is an argument)."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

from solver.core import events as ev
from solver.core import facts as f
from solver.core.actions import Action, Record
from solver.core.clock import micros, span
from solver.core.desk import Desk, DeskSettings
from solver.core.facts import opened_fact
from solver.core.lifecycle import Quote, QuoteState
from solver.core.market import QuoteRequest
from solver.core.quoting import PipelineSettings, Route
from solver.core.risk import RiskLimits
from strategies.registry import load_strategy

T0 = micros(datetime(2026, 11, 22, 12, 0, tzinfo=UTC))
"""The desk's clock: µs since the epoch (:mod:`solver.core.clock`)."""
USDC, NEAR = "nep141:usdc.sandbox", "nep141:wrap.sandbox"
E6, E24 = 10**6, 10**24
BALANCES = {USDC: 2_000 * E6, NEAR: 1_000 * E24}


def at(seconds: float) -> int:
    return T0 + span(seconds)


def make_desk(
    *,
    limits: RiskLimits | None = None,
    balances: dict[str, int] | None = None,
    shadow: bool = False,
    kill_switch: bool = True,
) -> Desk:
    strategy = load_strategy("spread", {"spread_bps": 20})
    routes = {
        (NEAR, USDC): Route(NEAR, USDC, strategy),
        (USDC, NEAR): Route(USDC, NEAR, strategy),
    }
    settings = DeskSettings(
        pipeline=PipelineSettings(
            balance_max_age_s=1e9, price_max_age_s=1e9, salt_max_age_s=1e9, max_quotes_per_s=1e6
        ),
        limits=limits or RiskLimits(1e9, 1e9, {}),
        shadow=shadow,
        kill_switch=kill_switch,
    )
    desk = Desk(
        settings,
        routes,
        {USDC: 6, NEAR: 24},
        symbols={USDC: "USDC", NEAR: "wNEAR"},
        pairs=[(NEAR, USDC)],
        timer=lambda: 0.0,
    )
    feed(desk, at(0), balances or BALANCES)
    return desk


def feed(desk: Desk, now: int, balances: dict[str, int]) -> list[Action]:
    desk.receive(ev.SaltSeen(b"salt", now), now)
    desk.receive(ev.PriceSeen(USDC, 1.0, now), now)
    desk.receive(ev.PriceSeen(NEAR, 2.0, now), now)
    return desk.receive(ev.BalancesSeen(dict(balances), now), now)


def request(quote_id: str, amount_usdc: int = 100, min_deadline_ms: int = 10_000) -> QuoteRequest:
    """Sell wNEAR for ``amount_usdc`` USDC in: the desk pays wNEAR out."""
    return QuoteRequest(quote_id, USDC, NEAR, True, amount_usdc * E6, min_deadline_ms)


def quote_hash(quote_id: str) -> str:
    return hashlib.sha256(quote_id.encode()).hexdigest()


def answer(desk: Desk, quote_id: str, now: int, amount_usdc: int = 100) -> list[Action]:
    """Request, decide, sign: the quote is OPEN with its reservation. Returns every action."""
    actions = desk.receive(request(quote_id, amount_usdc), now)
    signs = [a for a in actions if isinstance(a, Quote)]
    assert len(signs) == 1, actions
    nonce = hashlib.sha256(b"nonce" + quote_id.encode()).digest()
    quote = signs[0]
    desk.signed(quote, quote_hash(quote_id), nonce, now)
    return [*actions, Record(opened_fact(quote, None))]


def recorded(actions: list[Action]) -> list[f.Fact]:
    return [a.fact for a in actions if isinstance(a, Record)]


def state_of(quote: Quote) -> QuoteState:
    """``quote.state`` read afresh (mypy keeps an attribute narrowed across desk calls)."""
    return quote.state
