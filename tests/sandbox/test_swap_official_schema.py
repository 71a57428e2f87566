"""The sandbox swap API held to the official 1Click OpenAPI sections (protocol-notes 7, issue 23).

``test_swap_schemathesis.py`` checks the sandbox against the document the sandbox itself serves,
so it cannot notice where that document parts from the real API. Here schemathesis reads the
published ``POST /v0/quote`` and ``GET /v0/tokens`` sections (``schemas/README.md`` says where
they come from) and sends positive and negative requests to the sandbox, every default check of
the installed schemathesis running on each answer, with three settings taken from what the
official API does beyond its schema:

- ``positive_data_acceptance`` also takes a 400 (besides its default 2xx and 401): the schema
  cannot say which asset ids exist or that a deadline lies ahead, and the official API answers
  such schema-valid bodies 400.
- ``negative_data_rejection`` takes only 400 (the official ``BadRequestResponse``) or a 401:
  a sandbox 422, 404 or 405 for a malformed body is the divergence this test is here to catch.
- ``ignored_auth`` is off: the official schema lists ``X-API-Key`` or ``JWT-auth`` for the quote
  with no anonymous alternative, but spec 5.1.3 makes the token optional (the platform fee
  applies without one), as the sandbox does. What the check would see besides, that an invalid
  credential in either carrier is a 401, is asserted in ``test_swap_api.py``.

Requests carry a valid token in both carriers (schemathesis would otherwise make up an
``X-API-Key``). Some positive quote bodies (a drawn boolean) are rebuilt around a valid request
so that they reach the bus and the solver. Methods the official document does not list on its
paths get a 405 with an ``Allow`` header (RFC 9110 15.5.6), checked outside schemathesis, whose
own ``unsupported_method`` and ``allow_header_conformance`` checks act only on requests of its
coverage phase and on OPTIONS requests, which this run does not make.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis.config import SchemathesisConfig
from schemathesis.core.result import Ok
from schemathesis.generation import GenerationMode

from tests.sandbox.test_swap_harness import E6, quote_body, swap_world

OFFICIAL_SCHEMA = Path(__file__).parent / "schemas" / "oneclick-openapi-0.1.10-quote-tokens.json"
MAX_EXAMPLES = 25
CONFIG = {
    "checks": {
        "positive_data_acceptance": {"expected-statuses": ["2xx", "400", "401"]},
        "negative_data_rejection": {"expected-statuses": ["400", "401"]},
        "ignored_auth": {"enabled": False},
    }
}
PROBED_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "TRACE", "OPTIONS")


def _nudge(case: Any, valid: bool) -> Any:
    """Make a generated quote body one the sandbox can price: a valid request keeping the
    generated ``dry``, ``swapType`` and, when in range, ``slippageTolerance`` and
    ``quoteWaitingTimeMs`` (capped: the solver answers at once)."""
    body = case.body
    if valid and isinstance(body, dict) and "originAsset" in body:
        kept = {"dry": body["dry"], "swapType": body["swapType"]}
        if 0 <= body["slippageTolerance"] <= 10_000:
            kept["slippageTolerance"] = body["slippageTolerance"]
        if 0 <= body.get("quoteWaitingTimeMs", 0) <= 1_000:
            kept["quoteWaitingTimeMs"] = int(body.get("quoteWaitingTimeMs", 0))
        if body["swapType"] == "EXACT_OUTPUT":
            kept["amount"] = str(E6)
        body.clear()
        body.update(quote_body(**kept))
    return case


def _exercise(
    operation: Any, mode: GenerationMode, headers: dict[str, str], seen: Counter[str]
) -> None:
    name = f"{mode.value} {operation.method.upper()} {operation.path}"
    nudged = st.booleans() if mode is GenerationMode.POSITIVE else st.just(False)
    cases = st.builds(_nudge, operation.as_strategy(generation_mode=mode), nudged)

    @given(case=cases)
    @settings(
        max_examples=MAX_EXAMPLES,
        derandomize=True,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    def check(case: Any) -> None:
        response = case.call_and_validate(headers=headers, timeout=10)
        seen[f"{name} {response.status_code}"] += 1

    check()


def run_official_schema(base: str, headers: dict[str, str]) -> Counter[str]:
    """Every operation of the official sections, positive then negative requests, against
    ``base``; count ``"mode METHOD path status"`` answers."""
    schema = schemathesis.openapi.from_path(
        OFFICIAL_SCHEMA, config=SchemathesisConfig.from_dict(CONFIG)
    )
    schema.config.update(base_url=base)
    seen: Counter[str] = Counter()
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), result
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            _exercise(result.ok(), mode, headers, seen)
    return seen


# Hypothesis warns when the process-wide ``random`` state moves during a draw, taking it for a
# strategy that uses ``random``. Here the draws run in a thread while the event loop serves the
# sandbox, whose websocket code moves that state itself (``websockets`` and uvicorn draw their
# pings' payloads with ``random.getrandbits``): a busy run failed on that warning with no
# strategy of ours using ``random``.
@pytest.mark.filterwarnings("ignore:Do not use the `random` module inside strategies")
async def test_swap_api_conforms_to_the_official_schema() -> None:
    async with swap_world() as w:
        credentials = {**w.auth, "X-API-Key": w.token}
        seen = await asyncio.to_thread(run_official_schema, w.base, credentials)
    assert seen["positive POST /v0/quote 200"] > 0  # nudged bodies reached the bus and solver
    assert seen["negative POST /v0/quote 400"] > 0
    assert seen["positive GET /v0/tokens 200"] > 0
    assert not [key for key in seen if key.split()[-1] not in ("200", "400")], seen


def _official_paths() -> dict[str, set[str]]:
    paths: dict[str, Any] = orjson.loads(OFFICIAL_SCHEMA.read_bytes())["paths"]
    return {path: {m.upper() for m in ops} for path, ops in paths.items()}


def assert_405(response: Any, allowed: set[str]) -> None:
    """A 405 naming the method, with ``Allow`` listing the served methods."""
    assert response.status_code == 405, response.text
    assert {m.strip() for m in response.headers["allow"].split(",")} == allowed
    assert response.headers["content-type"] == "application/json"
    assert response.request.method in response.json()["message"]


async def test_methods_the_official_paths_do_not_list_are_405_with_allow() -> None:
    async with swap_world() as w:
        for path, declared in _official_paths().items():
            for method in sorted(set(PROBED_METHODS) - declared):
                assert_405(await w.client.request(method, w.base + path, headers=w.auth), declared)
