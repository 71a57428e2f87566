"""The desk's per-pair counters (issue 14): named ``BASE/QUOTE`` as configured, both directions
together, only configured pairs, counted live and rebuilt by the journal's facts."""

from __future__ import annotations

import pytest

from solver.core import events as ev
from solver.core import facts as f
from solver.core.market import QuoteRequest
from solver.core.pair_stats import PairBook
from tests.core.desk_helpers import (
    E6,
    E24,
    NEAR,
    USDC,
    answer,
    at,
    make_desk,
    quote_hash,
    recorded,
)

ETH = "nep141:eth.sandbox"


def test_labels_follow_the_config_and_unknown_pairs_are_not_counted() -> None:
    book = PairBook([(NEAR, USDC)], [(NEAR, USDC), (USDC, NEAR), (ETH, USDC)], {NEAR: "wNEAR"})
    assert book.label(NEAR, USDC) == book.label(USDC, NEAR) == f"wNEAR/{USDC}"
    # A route whose pair the config does not name: its asset ids in sorted order.
    assert book.label(USDC, ETH) == f"{ETH}/{USDC}"
    assert book.of(NEAR, ETH) is None and book.label("x", "y") is None
    assert book.of(NEAR, USDC) is book.of(USDC, NEAR)
    assert list(book.stats) == [f"wNEAR/{USDC}", f"{ETH}/{USDC}"]


def test_requests_quotes_wins_volume_and_pnl_per_pair_and_their_replay() -> None:
    desk = make_desk()
    facts: list[f.Fact] = []
    facts += recorded(answer(desk, "q1", at(1), amount_usdc=100))  # USDC -> wNEAR
    facts += recorded(answer(desk, "q2", at(1), amount_usdc=50))
    desk.receive(QuoteRequest("x", ETH, USDC, True, E24, 10_000), at(1))
    facts += recorded(desk.receive(ev.QuoteStatusSeen(quote_hash("q1"), "i1", "t1"), at(2)))
    facts += recorded(desk.receive(ev.IntentStatusSeen("i1", "SETTLED", "t1"), at(3)))
    stats = desk.stats.pairs
    assert list(stats) == ["wNEAR/USDC"]  # the ETH request counts nowhere per pair
    near = stats["wNEAR/USDC"]
    assert (near.requests, near.quotes, near.won, near.settled) == (2, 2, 1, 1)
    assert near.win_rate == 0.5
    assert near.volume_usd == pytest.approx(100.0)  # 100 USDC in, at 1 USD
    # 100 USDC in for 49.9 wNEAR out at 2 USD: +0.20 USD of edge.
    assert near.realized_usd == pytest.approx(desk.pnl.realized_usd) == pytest.approx(0.2)
    assert near.outcomes == {"WON": 1, "SETTLED": 1}
    assert desk.pair_book.outcome_totals() == {
        ("wNEAR/USDC", "WON"): 1,
        ("wNEAR/USDC", "SETTLED"): 1,
    }
    # The journal's facts rebuild the same counts (requests are not facts).
    rebuilt = make_desk()
    for fact in facts:
        rebuilt.apply(fact)
    again = rebuilt.stats.pairs["wNEAR/USDC"]
    assert (again.requests, again.quotes, again.won, again.settled) == (0, 2, 1, 1)
    assert again.volume_usd == pytest.approx(100.0)
    assert again.realized_usd == pytest.approx(0.2)


def test_shadow_quotes_count_as_quotes() -> None:
    desk = make_desk(shadow=True)
    desk.receive(QuoteRequest("s1", USDC, NEAR, True, 10 * E6, 10_000), at(1))
    near = desk.stats.pairs["wNEAR/USDC"]
    assert (near.requests, near.quotes, near.won) == (1, 1, 0)
    assert near.as_dict()["win_rate"] == 0.0


def test_quotes_lost_unnamed_count_per_pair() -> None:
    desk = make_desk()
    desk.receive(ev.ConnectionRestored(), at(0.5))
    answer(desk, "q1", at(1))
    facts = recorded(desk.tick(at(60)))  # past the deadline, connected throughout, never named
    assert any(isinstance(fact, f.QuotesLost) for fact in facts), facts
    assert desk.stats.pairs["wNEAR/USDC"].outcomes == {"LOST": 1}
    assert desk.pair_book.outcome_totals() == {("wNEAR/USDC", "LOST"): 1}
