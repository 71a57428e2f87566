"""The answer's ``QuoteOpened`` is built for whom reads it (issue 29): the journal and the
observers hear the fact the desk's open quote was opened as; with neither (the replay) none
is built, and the quote opens all the same. The executor and journal doubles of
``test_executor``."""

from __future__ import annotations

from typing import Any

import pytest

from solver.core import facts as f
from solver.core.facts import opened_fact
from solver.runtime import executor as executor_module
from tests.runtime.test_executor import Recorder, build, drain, quote


def _counted(monkeypatch: pytest.MonkeyPatch) -> list[f.QuoteOpened]:
    """Every ``QuoteOpened`` the executor builds."""
    built: list[f.QuoteOpened] = []

    def counting(*args: Any) -> f.QuoteOpened:
        built.append(opened_fact(*args))
        return built[-1]

    monkeypatch.setattr(executor_module, "opened_fact", counting)
    return built


async def _one_answer(
    monkeypatch: pytest.MonkeyPatch, *, journal: bool, observed: type[f.Fact]
) -> tuple[list[f.QuoteOpened], list[f.Fact], Recorder, executor_module.Executor]:
    """One request answered by an executor with or without a journal and with an observer of
    ``observed``: the ``QuoteOpened`` facts built, what the observer heard, the recorder and
    the executor."""
    built = _counted(monkeypatch)
    recorder = Recorder()
    executor, _ = build(recorder, journal=journal)
    heard: list[f.Fact] = []
    executor.observe(heard.append, observed)
    quote(executor)
    await drain(executor)
    return built, heard, recorder, executor


async def test_the_journal_and_the_observers_hear_the_quote_the_desk_opened(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    built, heard, recorder, executor = await _one_answer(
        monkeypatch, journal=True, observed=f.QuoteOpened
    )
    (fact,) = built
    assert recorder.facts == [fact] and heard == [fact]
    tracked = executor.desk.book.get("q1")
    assert tracked is not None and type(fact) is f.QuoteOpened
    assert (fact.quote_id, fact.quote_hash, fact.nonce, fact.created_at) == (
        tracked.quote_id, tracked.quote_hash, tracked.nonce, tracked.created_at,
    )  # fmt: skip
    assert (fact.amount_in, fact.amount_out, fact.fee, fact.deadline) == (
        tracked.amount_in, tracked.amount_out, tracked.fee, tracked.deadline,
    )  # fmt: skip
    assert fact.signed_data == recorder.sent[0]["signed_data"]


async def test_an_observer_alone_hears_the_fact_without_a_journal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    built, heard, recorder, _ = await _one_answer(
        monkeypatch, journal=False, observed=f.QuoteOpened
    )
    assert heard == built and len(built) == 1 and recorder.facts == []
    assert [s["quote_id"] for s in recorder.sent] == ["q1"]


async def test_with_no_journal_and_no_observer_no_fact_is_built_and_the_quote_opens(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # an observer of another kind only: not of this one
    built, heard, recorder, executor = await _one_answer(
        monkeypatch, journal=False, observed=f.QuotesLost
    )
    assert built == [] and heard == []
    assert executor.desk.book.get("q1") is not None
    assert [s["quote_id"] for s in recorder.sent] == ["q1"]
