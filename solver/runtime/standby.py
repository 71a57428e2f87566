"""What a standby serves on ``metrics.listen`` while it waits for the lease (docs/operations.md,
"Two instances"): ``/metrics`` (``solver_lease_role``), ``/healthz`` (503: not ready to quote,
so a load balancer or a probe never takes it for the active), and ``/control/status`` with its
role, since when, and who holds the lease.

Nothing here can act: a pause or a resume on a standby is refused (HTTP 400). Either would be a
desk fact for the journal, and a standby holds no lease to commit it with; the operator acts on
the active.
"""

from __future__ import annotations

from typing import Any

from solver.core.view import DeskView
from solver.io.store.schema import StoreError
from solver.runtime.lease_keeper import LeaseKeeper

REFUSED = "this instance is a standby: pause and resume the active instance"


class StandbyTarget:
    """The control API's target while this instance stands by (see the module doc)."""

    def __init__(self, keeper: LeaseKeeper, view: DeskView) -> None:
        self.keeper = keeper
        self.view = view

    def _holder(self) -> dict[str, Any] | None:
        try:
            holder = self.keeper.store.lease_holder()
        except StoreError as exc:
            return {"error": str(exc)}
        if holder is None:
            return None
        return {"holder": holder.holder, "epoch": holder.epoch, "live": holder.live}

    def status(self) -> dict[str, Any]:
        lease = self.keeper.status()
        lease["held_by"] = self._holder()
        return {
            "state": "STANDBY",
            "lease": lease,
            "open_quotes": len(self.view.open_quotes),  # the desk follows the journal
        }

    def pause(self, pair: str | None, reason: str) -> dict[str, Any]:
        raise ValueError(REFUSED)

    async def resume(self, pair: str | None, accept_balances: bool = False) -> dict[str, Any]:
        raise ValueError(REFUSED)

    def health(self) -> tuple[bool, list[str]]:
        held = self._holder()
        who = "nobody" if held is None else held.get("holder", held.get("error"))
        return False, [f"standby: the lease is held by {who}"]
