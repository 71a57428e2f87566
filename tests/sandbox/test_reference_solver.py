"""The reference solver's quickstart settings against the sandbox (issues 13 and 23).

A solver that signs like the reference TypeScript AMM solver (a legacy nonce derived from its
reserves and reused until they change, reserves re-read on ``quote_status`` and every 15 s, the
``defuse_`` field prefix; :mod:`tests.sandbox.reference_solver`) answers the simulated takers of
a sandbox with ``nonces: deployed``, ``bus.asset_field_prefix: defuse`` and the default
settlement delay: no answer signed after the re-read that followed the last ``quote_status``
(a *settled-view* answer, :mod:`tests.sandbox.reference_solver`) is refused for its nonce, and
at least 80 % of them are accepted, because ``quote_status`` arrives after the batch executed
and the re-read reserves give a fresh nonce. With the relay's old order (notify at broadcast,
execute after) about 9 % of all answers were. The other answers race a notification or a
re-read: their share grows with the machine's load (27-28 of 30 answers were accepted on a
quiet machine, 63-73 % with four test suites running at once), so the test judges the
settled-view ones and prints the rest. Under the default ``nonces: spec`` the same answers
are refused with ``invalid salt``.

The run lasts ``REFERENCE_SOLVER_SECONDS`` (default 20 s: past the first 15 s reserves timer,
which is what let the old order settle at all; the issue's figure is for 60 s).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx

from sandbox.config import SandboxConfig, TokenSpec
from sandbox.server import Sandbox
from solver.protocol.keys import SecretKey
from tests.sandbox.reference_solver import ReferenceStyleSolver
from tests.sandbox.scripted import rpc

USDC = "nep141:usdc.sandbox"
NEAR = "nep141:wrap.sandbox"
E6, E24 = 10**6, 10**24
# Reserves in the reference price ratio (3 USDC per wNEAR): the curve's mid price is the
# takers' reference price, so the 0.3 % margin stays inside their 0.6 % tolerance.
RESERVES = {USDC: 300_000 * E6, NEAR: 100_000 * E24}


def config(tmp_path: Path, *, nonces: str, takers: bool) -> SandboxConfig:
    return SandboxConfig.model_validate(
        {
            "state_dir": tmp_path / "sandbox",
            "nonces": nonces,
            "tokens": {
                USDC: TokenSpec(symbol="USDC", decimals=6, usd=1.0),
                NEAR: TokenSpec(symbol="wNEAR", decimals=24, usd=3.0),
            },
            "bus": {
                "asset_field_prefix": "defuse",
                # The longest wait: it ends when the one solver answered, so a busy machine
                # delays an answer but does not turn it into a late one.
                "solver_wait_ms": 3000,
                "settlement_delay_ms": 300,  # the sandbox's default
            },
            "prices": {"tick_ms": 100},
            "takers": {
                "enabled": takers,
                "count": 4,
                "requests_per_s": 4.0,
                "size_usd_median": 40.0,
                "size_usd_sigma": 0.5,
                "tolerance_bps": 60.0,
                "wait_ms": 3000,
                "funding_usd": 10_000.0,
                "pairs": [{"base": NEAR, "quote": USDC}],
            },
        }
    )


@contextlib.asynccontextmanager
async def reference_solver_on(
    tmp_path: Path, *, nonces: str, takers: bool
) -> AsyncIterator[tuple[Sandbox, ReferenceStyleSolver]]:
    async with Sandbox(config(tmp_path, nonces=nonces, takers=takers)) as sb:
        key = SecretKey.generate()
        for asset, amount in RESERVES.items():
            sb.ledger.deposit(key.public_key.implicit_account_id(), asset, amount)
        urls = sb.urls()
        solver = ReferenceStyleSolver(
            urls["relay_ws"], urls["chain_rpc"], sb.ledger.contract_id, key, [USDC, NEAR]
        )
        await solver.start()
        try:
            yield sb, solver
        finally:
            await solver.stop()


async def eventually(predicate: Callable[[], bool], what: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for: {what}")
        await asyncio.sleep(0.05)


RUN_SECONDS = os.environ.get("REFERENCE_SOLVER_SECONDS")
"""Set: a soak of that many seconds. Unset (the suite): the run lasts until it has shown enough
(:data:`ENOUGH_ANSWERS` answers, :data:`ENOUGH_SETTLED_VIEW` of them settled-view,
:data:`ENOUGH_SETTLED` settled, five statuses; ~8 s here, at most :data:`RUN_LIMIT_S`), not a
fixed 20 s (docs/testing.md, "The time budget")."""
ENOUGH_ANSWERS, ENOUGH_SETTLED_VIEW, ENOUGH_SETTLED, RUN_LIMIT_S = 30, 20, 10, 60.0


def refused_settled_view(solver: ReferenceStyleSolver) -> list[str]:
    """The settled-view answers refused for their nonce: none under the relay's order (the
    run stops at the first, the old order's symptom)."""
    return [r for view, r in solver.answers if view and r is not None and "nonce" in r]


async def test_reference_quickstart_answers_are_accepted_and_settle_with_takers_on(
    tmp_path: Path,
) -> None:
    async with reference_solver_on(tmp_path, nonces="deployed", takers=True) as (sb, solver):
        started = time.monotonic()
        if RUN_SECONDS is not None:
            await asyncio.sleep(float(RUN_SECONDS))  # a soak of fixed length
        else:
            await eventually(
                lambda: (
                    bool(refused_settled_view(solver))
                    or (
                        solver.answered >= ENOUGH_ANSWERS
                        and sum(view for view, _ in solver.answers) >= ENOUGH_SETTLED_VIEW
                        and sb.bus.stats.settled >= ENOUGH_SETTLED
                        and len(solver.statuses) >= 5
                    )
                ),
                f"{ENOUGH_ANSWERS} answers ({ENOUGH_SETTLED_VIEW} settled-view) and "
                f"{ENOUGH_SETTLED} settled",
                RUN_LIMIT_S,
            )
        assert sb.takers is not None
        stats = sb.takers.stats
        settled_view = [refusal for view, refusal in solver.answers if view]
        summary = (
            f"{solver.accepted} of {solver.answered} answers accepted in "
            f"{time.monotonic() - started:.0f} s ({settled_view.count(None)} of "
            f"{len(settled_view)} settled-view), {sb.bus.stats.settled} settled; "
            f"refusals {sorted(set(solver.errors))}"
        )
        print(summary)
        assert solver.answered >= 10 and len(settled_view) >= 10, summary
        assert not refused_settled_view(solver), summary
        assert settled_view.count(None) >= 0.8 * len(settled_view), summary
        assert sb.bus.stats.settled >= 5, summary
        # The takers read offers in the bus's own (defuse_) spelling: none is thrown away.
        assert "quote:bad_offer" not in stats.errors, stats.as_dict()
        assert not [e for e in solver.errors if "salt" in e]
        # Its quote_status events arrived and it re-read its reserves from the RPC each time.
        assert len(solver.statuses) >= 5 and solver.reserve_reads > len(solver.statuses) // 2
        balances = sb.ledger.mt_batch_balance_of(solver.account, [USDC, NEAR])
        assert balances != [RESERVES[USDC], RESERVES[NEAR]]


async def test_legacy_nonces_are_refused_under_the_spec_policy(tmp_path: Path) -> None:
    async with (
        reference_solver_on(tmp_path, nonces="spec", takers=False) as (sb, solver),
        httpx.AsyncClient(timeout=10) as client,
    ):
        params: dict[str, Any] = {
            "defuse_asset_identifier_in": NEAR,
            "defuse_asset_identifier_out": USDC,
            "exact_amount_in": str(2 * E24),
        }
        body = await rpc(client, sb.urls()["relay_rpc"], "quote", params)
        assert body["result"] == []
        await eventually(lambda: bool(solver.errors), "the refusal of the answer", 5)
        assert solver.errors == ["simulation failed: invalid salt"]
