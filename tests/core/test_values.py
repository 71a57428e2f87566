"""``solver.protocol.values.value``: value objects are read-only to the type checker
(``mypy --strict`` refuses an assignment) and plain at run time; what user code receives
stays frozen at run time."""

from __future__ import annotations

import dataclasses
import textwrap
from datetime import UTC, datetime
from pathlib import Path

import pytest
from mypy import api as mypy_api

from solver.core import facts as f
from solver.core.clock import micros
from solver.core.market import QuoteRequest

REPO = Path(__file__).resolve().parents[2]
T0 = micros(datetime(2026, 1, 2, tzinfo=UTC))


def test_the_type_checker_refuses_an_assignment_to_a_value_field(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        textwrap.dedent(
            """
            from solver.core.facts import QuoteOpened
            from solver.core.events import QuoteNotSent
            from solver.protocol.quote_signing import SignedQuote

            def change(fact: QuoteOpened, event: QuoteNotSent, signed: SignedQuote) -> None:
                fact.amount_out = 0
                event.reason = ""
                signed.quote_hash = ""
            """
        )
    )
    out, _, status = mypy_api.run(
        ["--strict", "--config-file", str(REPO / "pyproject.toml"), str(probe)]
    )
    assert status == 1, out
    assert 'Property "amount_out" defined in "QuoteOpened" is read-only' in out
    assert 'Property "reason" defined in "QuoteNotSent" is read-only' in out
    assert 'Property "quote_hash" defined in "SignedQuote" is read-only' in out


def test_values_compare_and_hash_by_value_and_carry_no_dict() -> None:
    one = f.QuotesLost(("a", "b"), T0, "expired")
    same = f.QuotesLost(("a", "b"), T0, "expired")
    assert one == same and hash(one) == hash(same) and len({one, same}) == 1
    assert one != dataclasses.replace(one, reason="other")
    assert not hasattr(one, "__dict__")  # slotted


def test_what_a_strategy_receives_stays_frozen_at_run_time() -> None:
    request = QuoteRequest("q", "nep141:a", "nep141:b", True, 10, 1000)
    for name in QuoteRequest._fields:  # a named tuple (issue 29): no field can be set
        with pytest.raises(AttributeError):
            setattr(request, name, None)
    assert request._replace(amount=11).amount == 11 and request.amount == 10
