"""Per-pair counters of the desk (issue 14: "status, metrics and history per pair").

A pair is named in one canonical form everywhere — ``BASE/QUOTE`` by token symbol, as the
config lists it (``wNEAR/USDC``), for both directions — so the desk's status, the ``pair``
label of the metrics (:meth:`solver.io.metrics.Metrics.pair_label`) and ``solver history``
agree. Only configured pairs are counted: a request for any other pair changes nothing here
(its skip is counted by reason), which keeps the set of keys bounded whatever takers ask for.

The quote path pays two dict lookups and an int increment (:meth:`PairBook.of`, inline); the rest
is counted as facts are applied, live and when the journal is replayed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


def pair_label(base: str, quote: str, symbols: Mapping[str, str]) -> str:
    """``wNEAR/USDC``: the symbols of ``base`` and ``quote`` (the asset id where unknown)."""
    return f"{symbols.get(base, base)}/{symbols.get(quote, quote)}"


@dataclass(slots=True)
class PairStats:
    """What one pair did since the desk started (quotes, outcomes and fills also from the
    journal facts replayed at start)."""

    requests: int = 0
    """Quote requests for either direction (live only)."""
    quotes: int = 0
    """Quotes opened (signed), or decided in shadow mode."""
    won: int = 0
    """Quotes a user took (reached WON)."""
    settled: int = 0
    volume_usd: float = 0.0
    """USD value of what settled fills brought in, at the reference prices of the fill."""
    realized_usd: float = 0.0
    """Realized edge of the settled fills, USD."""
    outcomes: Counter[str] = field(default_factory=Counter)
    """State reached -> count (WON, SETTLED, LOST, REJECTED, FAILED, SETTLING)."""

    @property
    def win_rate(self) -> float | None:
        return self.won / self.quotes if self.quotes else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "quotes": self.quotes,
            "won": self.won,
            "win_rate": self.win_rate,
            "settled": self.settled,
            "volume_usd": self.volume_usd,
            "realized_pnl_usd": self.realized_usd,
        }


class PairBook:
    """Pair labels and counters of the configured pairs, found by ``(asset_in, asset_out)``.

    ``pairs``: the configured ``(base, quote)`` pairs; ``routes``: the directions quoted, whose
    pairs are added (asset ids in sorted order) when ``pairs`` does not name them.
    """

    def __init__(
        self,
        pairs: Iterable[tuple[str, str]],
        routes: Iterable[tuple[str, str]],
        symbols: Mapping[str, str],
    ) -> None:
        self.stats: dict[str, PairStats] = {}
        self._labels: dict[str, dict[str, str]] = {}
        self.by_route: dict[str, dict[str, PairStats]] = {}
        """``asset_in -> asset_out ->`` the pair's counters: :meth:`of`'s table (the quote path
        reads it inline). Built here, never changed."""
        known = [tuple(p) for p in pairs]
        for a, b in routes:
            if (a, b) not in known and (b, a) not in known:
                known.append(tuple(sorted((a, b))))
        for base, quote in known:
            label = pair_label(base, quote, symbols)
            stats = self.stats.setdefault(label, PairStats())
            for one, other in ((base, quote), (quote, base)):
                self._labels.setdefault(one, {})[other] = label
                self.by_route.setdefault(one, {})[other] = stats

    def of(self, asset_in: str, asset_out: str) -> PairStats | None:
        """The counters of this direction's pair; None for a pair not configured."""
        by_out = self.by_route.get(asset_in)
        return by_out.get(asset_out) if by_out is not None else None

    def label(self, asset_in: str, asset_out: str) -> str | None:
        by_out = self._labels.get(asset_in)
        return by_out.get(asset_out) if by_out is not None else None

    def outcome_totals(self) -> dict[tuple[str, str], int]:
        """``(pair, state) -> count``, for the metrics to catch up with."""
        return {
            (label, state): count
            for label, stats in self.stats.items()
            for state, count in stats.outcomes.items()
        }
