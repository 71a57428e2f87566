"""The desk layout models (benchmarks/desk_layout.py, issue 29): their costs are compared only
if they do the same work, so every model, driven over the same quotes and ticks, must end in
the same state and lose the same quotes in the same order."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from benchmarks.desk_layout import MODELS, Step, build, main, opcodes_a_quote, record
from benchmarks.desk_layout_models import slots
from benchmarks.desk_layout_models.drive import drive
from benchmarks.replay import make_stream

ASSETS = ("nep141:eth.sandbox", "nep141:usdc.sandbox", "nep141:wrap.sandbox")
START = 1_735_689_600_000_000


def synthetic(quotes: int, seed: int = 7) -> list[Step]:
    """``quotes`` quotes over ~quotes/5 seconds with a tick a second, then three ticks (the
    last quotes still open): leads of 1–8 s (deadlines out of order, some in the bucket a tick
    cuts), amounts in past 64 bits, some fees, and requests that repeat an open quote's id
    (refused by the duplicate check)."""
    rng = random.Random(seed)
    steps: list[Step] = []
    now, tick = START, START
    ids: list[str] = []
    for n in range(quotes):
        now += rng.randrange(1, 400_000)
        while tick <= now:
            steps.append(("t", tick))
            tick += 1_000_000
        asset_in, asset_out = rng.sample(ASSETS, 2)
        quote_id = rng.choice(ids[-5:]) if ids and rng.random() < 0.05 else f"q{n:05d}"
        ids.append(quote_id)
        lead = rng.choice((1_000_000, 3_000_000, 8_000_000)) + rng.randrange(-20_000, 20_000)
        amount_out = rng.randrange(1, 10**12)  # within the exposure limit
        fee = rng.choice((0, 0, amount_out // 1000))
        steps.append(
            (
                "q",
                now,
                now + lead,
                quote_id,
                asset_in,
                asset_out,
                rng.randrange(1, 10**6) * 10**20,
                amount_out,
                fee,
            )
        )
    for _ in range(3):
        steps.append(("t", tick))
        tick += 1_000_000
    return steps


def test_every_model_ends_in_the_same_state_and_loses_in_the_same_order() -> None:
    steps = synthetic(400)
    ends = {}
    for model in MODELS:
        desk, events = build(model, steps)
        drive(desk, events)
        ends[model] = desk.end_state()
    today = ends["today"]
    # a run that tests something: quotes lost at their deadline in batches, some still open
    # and reserved at the end, duplicates refused, every pair used
    assert 300 < today.lost == len(today.rows) < 400
    assert today.open and today.held and today.reserved and today.open_outflow
    assert sum(requests for requests, _, _ in today.pairs.values()) == 400
    assert sum(quotes for _, quotes, _ in today.pairs.values()) < 400
    assert len(today.pairs) == 6
    for model, end in ends.items():
        assert end.rows == today.rows, model  # the same rows, in the same order
        assert end == today, model


def test_quotes_lost_while_still_reserved_release_the_same_amounts() -> None:
    """The ticks release reservations before the book loses their quotes (the grace): a
    ``QuotesLost`` naming open, reserved quotes is the path where the loss releases them."""
    steps = synthetic(300)
    ends = []
    for model in MODELS:
        desk, events = build(model, steps)
        drive(desk, events)
        named = desk.end_state().held
        desk.apply_lost(tuple(named), steps[-1][1], "named lost")
        ends.append((named, desk.end_state()))
    named, end = ends[0]
    assert named and not end.held and not end.reserved
    assert all(other == ends[0] for other in ends)


def test_a_model_that_loses_in_another_order_is_told_apart() -> None:
    steps = synthetic(200)
    desk, events = build("slots", steps)
    assert isinstance(desk, slots.Desk)
    drive(desk, events)
    end = desk.end_state()
    desk.rows = dict(reversed(desk.rows.items()))
    assert desk.end_state() != end


@pytest.mark.parametrize("model", list(MODELS))
def test_opcodes_leave_the_driver_out_and_repeat(model: str) -> None:
    steps = synthetic(200)
    first, desk = opcodes_a_quote(model, steps)
    again, _ = opcodes_a_quote(model, steps)
    assert first == again
    assert 100 < first < 5_000  # the model's work a quote, not the loop's handful
    desk_again, events = build(model, steps)
    drive(desk_again, events)
    assert desk.end_state() == desk_again.end_state()


def test_the_replays_quotes_and_ticks_are_recorded_and_restored(tmp_path: Path) -> None:
    from solver.core.inventory import Inventory
    from solver.core.lifecycle import QuoteBook

    add, release = QuoteBook.add, Inventory.release_expired
    stream = tmp_path / "s.jsonl.gz"
    make_stream(stream, 150)
    steps = record(stream)
    quotes = [s for s in steps if s[0] == "q"]
    ticks = [s for s in steps if s[0] == "t"]
    assert 0 < len(quotes) <= 150 and ticks
    assert all(s[1] < s[2] for s in quotes)  # created before its deadline
    assert QuoteBook.add is add and Inventory.release_expired is release
    ends = []
    for model in MODELS:
        desk, events = build(model, steps)
        drive(desk, events)
        ends.append(desk.end_state())
    assert ends[0].open and all(end == ends[0] for end in ends)  # too short to lose any


def test_a_bad_repeat_count_is_refused_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--callgrind", "--repeats", "0"])
    assert "--repeats must be at least 1" in capsys.readouterr().err
