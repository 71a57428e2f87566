"""A fault knob for tests: drop or delay the ``quote_status`` notifications of chosen quotes.

The real relay's ``quote_status`` is a best-effort websocket push (protocol-notes 6): a solver
that was disconnected, or a relay that restarted, never sends it, and a busy relay sends it late.
A solver must still reconcile such a quote through ``get_status`` and its balances, and the
tests of that path need a sandbox that executes a batch and then stays silent (or speaks late)
on purpose. The knob holds rules, first match wins; each rule chooses quotes by solver account
and/or quote hash and applies to a number of notifications (all when ``count`` is None)::

    sandbox.bus.notify_faults.drop(solver="abc…", count=1)     # the next one of that solver
    sandbox.bus.notify_faults.delay(2.0)                       # every one, two seconds late
    sandbox.bus.notify_faults.clear()

A dropped notification is counted in ``BusStats.quote_status_dropped``; the batch itself
executes and ``get_status`` answers SETTLED as usual — only the push is lost.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

FaultAction = Literal["drop", "delay"]


@dataclass
class NotifyRule:
    """One rule: what to do with the notifications it matches, and how many are left."""

    action: FaultAction
    delay_s: float = 0.0
    solver: str | None = None
    quote_hash: str | None = None
    count: int | None = None
    applied: int = 0

    def matches(self, solver: str, quote_hash: str) -> bool:
        if self.count is not None and self.applied >= self.count:
            return False
        if self.solver is not None and self.solver != solver:
            return False
        return self.quote_hash is None or self.quote_hash == quote_hash


@dataclass
class NotifyFaults:
    """The rules in force; :meth:`verdict` is asked once per notification about to be sent."""

    rules: list[NotifyRule] = field(default_factory=list)

    def drop(
        self, *, solver: str | None = None, quote_hash: str | None = None, count: int | None = None
    ) -> NotifyRule:
        """Never send the matching notifications (the batch still executes)."""
        return self._add(NotifyRule("drop", 0.0, solver, quote_hash, _count(count)))

    def delay(
        self,
        seconds: float,
        *,
        solver: str | None = None,
        quote_hash: str | None = None,
        count: int | None = None,
    ) -> NotifyRule:
        """Send the matching notifications ``seconds`` after the batch executed."""
        if not seconds >= 0:
            raise ValueError(f"notify_faults.delay: seconds must be >= 0, got {seconds!r}")
        return self._add(NotifyRule("delay", float(seconds), solver, quote_hash, _count(count)))

    def clear(self) -> None:
        self.rules.clear()

    def verdict(self, solver: str, quote_hash: str) -> NotifyRule | None:
        """The first rule matching this notification (counted as applied), or None: send now."""
        for rule in self.rules:
            if rule.matches(solver, quote_hash):
                rule.applied += 1
                return rule
        return None

    def _add(self, rule: NotifyRule) -> NotifyRule:
        self.rules.append(rule)
        return rule


def _count(count: int | None) -> int | None:
    if count is not None and count < 1:
        raise ValueError(f"notify_faults: count must be >= 1 or None, got {count!r}")
    return count
