"""Pauses: why the bot is not quoting, and where (DESIGN "The shape": one writer).

A pause has a **scope** — ``*`` for everything, or one direction of a pair (``in->out``) — a
**kind** (who or what paused it) and a **reason** a person reads. The desk is the only writer;
the quote path only asks :meth:`Pauses.reason`. Several pauses can hold at once (an operator
pause and a drawdown breach); quoting resumes only when none is left in the scope.

Kinds:

- ``operator``: ``solver pause``; cleared by ``solver resume``.
- ``daily_loss``, ``drawdown``, ``reconciliation``, ``stale_data``: the kill switch (latched:
  the operator must resume; a condition still in force pauses again at once, and ``resume``
  says so). ``reconciliation`` takes ``resume --accept-balances`` (a plain ``resume`` refuses
  while it holds), or lifts itself when verified fills explained its whole gap (issue 24).
- ``store_error``: a quote could not be made durable (or the store failed elsewhere); lifts
  itself once the store commits again with every refused fact in it (``StoreWorks``, issue
  24), or ``resume``.
- ``shutting_down``: the process is stopping.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from solver.core.clock import Micros

GLOBAL = "*"
OPERATOR = "operator"
SHUTTING_DOWN = "shutting_down"
STORE_ERROR = "store_error"
RISK_KINDS = ("daily_loss", "drawdown", "reconciliation", "stale_data")


@dataclass(frozen=True, slots=True)
class Pause:
    scope: str
    kind: str
    reason: str
    at: Micros

    def describe(self) -> str:
        where = "everything" if self.scope == GLOBAL else self.scope
        return f"{where}: {self.kind}: {self.reason}"


class Pauses:
    """The pauses in force, by scope then kind."""

    __slots__ = ("by_scope",)

    def __init__(self) -> None:
        self.by_scope: dict[str, dict[str, Pause]] = {}
        """scope -> kind -> pause; changed only here (the quote pipeline reads whether it is
        empty per request, without a call)."""

    def reason(self, scope: str) -> str | None:
        """Why quoting in ``scope`` is paused (a global pause first), or None. Hot path."""
        by_scope = self.by_scope
        if not by_scope:
            return None
        held = by_scope.get(GLOBAL) or by_scope.get(scope)
        if not held:
            return None
        pause = next(iter(held.values()))
        return f"{pause.kind}: {pause.reason}"

    def get(self, scope: str, kind: str) -> Pause | None:
        return self.by_scope.get(scope, {}).get(kind)

    def add(self, pause: Pause) -> bool:
        """Hold ``pause``; False when one of the same scope and kind already holds (kept)."""
        held = self.by_scope.setdefault(pause.scope, {})
        if pause.kind in held:
            return False
        held[pause.kind] = pause
        return True

    def remove(self, scope: str, kind: str) -> Pause | None:
        held = self.by_scope.get(scope)
        if not held:
            return None
        pause = held.pop(kind, None)
        if not held:
            del self.by_scope[scope]
        return pause

    def __iter__(self) -> Iterator[Pause]:
        for held in list(self.by_scope.values()):
            yield from list(held.values())

    def __bool__(self) -> bool:
        return bool(self.by_scope)

    def globally_paused(self) -> bool:
        return GLOBAL in self.by_scope

    def as_dict(self) -> dict[str, str]:
        """``{scope: "kind: reason; kind: reason"}`` for status pages and logs."""
        return {
            scope: "; ".join(f"{p.kind}: {p.reason}" for p in held.values())
            for scope, held in self.by_scope.items()
        }
