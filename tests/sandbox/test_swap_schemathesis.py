"""Schemathesis against the live sandbox: every operation of the swap API and of the history API
gets a bounded, deterministic set of generated requests (``MAX_EXAMPLES`` each, derandomized);
no answer may be a 5xx, and every answer must use a documented status code and content type and
match its response schema.

Half of the generated quote bodies are nudged onto known assets and a future deadline so that
requests also reach the bus, the solver and the deposit-address path, not only validation.
The sandbox runs on the test's event loop; the synchronous schemathesis calls run in a thread.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Ok
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.sandbox.scripted import NEAR, USDC
from tests.sandbox.test_swap_harness import E24, swap_world

MAX_EXAMPLES = 30
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


def _nudge(case: Any, valid: bool) -> Any:
    """Make a generated quote body plausible (known assets, future deadline, sane amount)."""
    body = case.body
    if valid and isinstance(body, dict) and "originAsset" in body:
        body.update(
            originAsset=NEAR,
            destinationAsset=USDC,
            amount=str(E24),
            deadline=(datetime.now(UTC) + timedelta(minutes=5)).isoformat(),
            recipient="bob.near",
            refundTo="alice.near",
        )
        for key in (
            "depositMode",
            "customRecipientMsg",
            "virtualChainRecipient",
            "virtualChainRefundRecipient",
            "appFees",
            "referral",
        ):
            body.pop(key, None)
        body.update(slippageTolerance=min(body.get("slippageTolerance", 0), 10_000))
        body["quoteWaitingTimeMs"] = 0
    return case


def _exercise(operation: Any, headers: dict[str, str], seen: Counter[str]) -> None:
    name = f"{operation.method.upper()} {operation.path}"

    @given(case=st.builds(_nudge, operation.as_strategy(), st.booleans()))
    @settings(
        max_examples=MAX_EXAMPLES,
        derandomize=True,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    def check(case: Any) -> None:
        response = case.call_and_validate(headers=headers, checks=CHECKS, timeout=10)
        seen[f"{name} {response.status_code}"] += 1

    check()


def run_schemathesis(url: str, headers: dict[str, str]) -> Counter[str]:
    """Run every operation of the API at ``url``; count ``"METHOD path status"`` answers."""
    schema = schemathesis.openapi.from_url(url + "/openapi.json")
    seen: Counter[str] = Counter()
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), result
        _exercise(result.ok(), headers, seen)
    return seen


# Hypothesis warns when the process-wide ``random`` state moves during a draw, taking it for a
# strategy that uses ``random``. Here the draws run in a thread while the event loop serves the
# sandbox, whose websocket code moves that state itself (``websockets`` and uvicorn draw their
# pings' payloads with ``random.getrandbits``): a busy run failed on that warning with no
# strategy of ours using ``random``.
@pytest.mark.filterwarnings("ignore:Do not use the `random` module inside strategies")
async def test_swap_and_history_apis_conform_to_their_openapi() -> None:
    async with swap_world() as w:
        swap_ops = await asyncio.to_thread(run_schemathesis, w.base, w.auth)
        history_ops = await asyncio.to_thread(run_schemathesis, w.api, w.auth)
        anonymous = await asyncio.to_thread(run_schemathesis, w.api, {})
    assert swap_ops["POST /v0/quote 200"] > 0  # nudged bodies reached the bus and solver
    assert swap_ops["GET /v0/status 404"] > 0 and swap_ops["POST /v0/deposit/submit 404"] > 0
    assert swap_ops["POST /sandbox/deposit 400"] > 0
    assert history_ops["GET /api/v0/transactions 200"] > 0
    assert history_ops["GET /api/v0/transactions-pages 200"] > 0
    assert anonymous == Counter(
        {
            "GET /api/v0/transactions 401": MAX_EXAMPLES,
            "GET /api/v0/transactions-pages 401": MAX_EXAMPLES,
        }
    )
