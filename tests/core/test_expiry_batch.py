"""Expiry in batches (issue 29) leaves what one quote at a time left: the book after
``QuoteBook.lose`` as after ``move(LOST)`` of each, the recently lost rows after ``add_many`` as
after ``add`` of each, the reserved totals after ``release_many`` and ``release_expired`` as
after ``release`` of each, and ``past_deadline`` lists what re-pushing the due entries listed."""

from __future__ import annotations

import heapq
import random
from collections import OrderedDict
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from solver.core.clock import Micros, micros, span
from solver.core.deadlines import DeadlineBuckets
from solver.core.inventory import Inventory, Reservation
from solver.core.lifecycle import IllegalTransition, Quote, QuoteBook, QuoteState
from solver.core.recent_lost import LostRow, RecentLost, lost_row

T0 = micros(datetime(2026, 11, 22, 12, 0, tzinfo=UTC))
ASSETS = ("nep141:a.near", "nep141:b.near", "nep141:c.near")


def quote(rng: random.Random, i: int, deadline: Micros | None = None) -> Quote:
    a_in, a_out = rng.sample(ASSETS, 2)
    when = deadline if deadline is not None else T0 + span(rng.randint(1, 30))
    return Quote(
        f"q{i}", a_in, a_out, rng.randint(0, 50), rng.randint(0, 50), rng.randint(0, 3), when,
        quote_hash=f"h{i}", nonce=bytes(32), created_at=T0,
    )  # fmt: skip


def book_state(book: QuoteBook) -> object:
    return (
        list(book.quotes), list(book.by_hash.items()), list(book.open_outflow.items()),
        list(book.open_inflow.items()), list(book.terminal_counts.items()),
    )  # fmt: skip


@pytest.mark.parametrize("seed", range(20))
def test_lose_leaves_the_book_as_moving_each_quote(seed: int) -> None:
    rng = random.Random(seed)
    one, batch = QuoteBook(), QuoteBook()
    for i in range(40):
        q = quote(rng, i)
        one.add(q)
        batch.add(replace(q))
    for _ in range(4):
        ids = list(dict.fromkeys(f"q{rng.randrange(45)}" for _ in range(rng.randint(0, 15))))
        expected = [quote_id for quote_id in ids if one.get(quote_id) is not None]
        for quote_id in expected:
            one.move(quote_id, QuoteState.LOST, T0 + span(40), reason="r")
        lost: list[Quote] = []
        routes: dict[str, dict[str, list[int]]] = {}
        batch.lose(ids, T0 + span(40), "r", lost, routes)
        assert [q.quote_id for q in lost] == expected
        sums: dict[tuple[str, str], list[int]] = {}
        for q in lost:
            route = sums.setdefault((q.asset_in, q.asset_out), [0, 0, 0])
            route[0] += 1
            route[1] += q.outflow
            route[2] += q.amount_in
        assert {(i, o): s for i, outs in routes.items() for o, s in outs.items()} == sums
        assert all(q.state is QuoteState.LOST and q.updated_at == T0 + span(40) for q in lost)
        assert all(q.reason == "r" for q in lost)
        assert book_state(batch) == book_state(one)


def test_lose_refuses_a_quote_that_is_not_open_after_the_ones_before_it() -> None:
    rng = random.Random(1)
    book = QuoteBook()
    for i in range(3):
        book.add(quote(rng, i))
    book.move("q1", QuoteState.WON, T0)
    q0 = book.quotes["q0"]
    lost: list[Quote] = []
    routes: dict[str, dict[str, list[int]]] = {}
    with pytest.raises(IllegalTransition):
        book.lose(["q0", "q1", "q2"], T0, "r", lost, routes)
    assert [q.quote_id for q in lost] == ["q0"] and book.get("q0") is None
    assert routes == {q0.asset_in: {q0.asset_out: [1, q0.outflow, q0.amount_in]}}
    assert book.terminal_counts == {QuoteState.LOST: 1} and book.get("q2") is not None


@pytest.mark.parametrize("seed", range(30))
def test_add_many_keeps_the_rows_adding_each_kept(seed: int) -> None:
    rng = random.Random(seed)
    one = RecentLost(window_s=5.0, max_kept=rng.randint(1, 12))
    batch = RecentLost(window_s=5.0, max_kept=one.max_kept)
    at = T0
    for _ in range(12):
        at += span(rng.choice((0.5, 1, 3, 6)))
        # ids repeat across facts (a reused id keeps its place), never within one
        ids = rng.sample(range(25), rng.randint(0, 8))
        quotes = [quote(rng, i) for i in ids]
        for q in quotes:
            one.add(q, at)
        batch.add_many(quotes, at)
        assert list(batch.rows.items()) == list(one.rows.items())
        assert batch.by_hash == one.by_hash


class ReferenceLost:
    """RecentLost as it was, on an OrderedDict: one row added and trimmed at a time."""

    def __init__(self, window_s: float, max_kept: int) -> None:
        self.window, self.max_kept = span(window_s), max_kept
        self.rows: OrderedDict[str, LostRow] = OrderedDict()
        self.by_hash: dict[str, str] = {}

    def add(self, q: Quote, at: Micros) -> None:
        self.rows[q.quote_id] = lost_row(q, at)
        self.by_hash[q.quote_hash] = q.quote_id
        while self.rows:
            quote_id, oldest = self.rows.popitem(last=False)
            if at - oldest[-1] <= self.window and len(self.rows) < self.max_kept:
                self.rows[quote_id] = oldest
                self.rows.move_to_end(quote_id, last=False)
                return
            self.by_hash.pop(oldest[1], None)

    def pop(self, quote_id: str) -> None:
        row = self.rows.pop(quote_id, None)
        if row is not None:
            self.by_hash.pop(row[1], None)


@pytest.mark.parametrize("seed", range(40))
def test_recent_lost_keeps_what_the_ordered_dict_kept(seed: int) -> None:
    """Rows in a plain dict with their order in a deque (issue 29): the same rows, in the same
    order, as the OrderedDict kept, through reused ids, rows popped and added again, trims."""
    rng = random.Random(seed)
    ref = ReferenceLost(window_s=5.0, max_kept=rng.randint(1, 12))
    kept = RecentLost(window_s=5.0, max_kept=ref.max_kept)
    at = T0
    for _ in range(40):
        at += span(rng.choice((0, 0.5, 1, 3, 6)))
        if rng.random() < 0.3:
            for i in rng.sample(range(25), rng.randint(0, 4)):
                assert (kept.pop(f"q{i}") is None) == (f"q{i}" not in ref.rows)
                ref.pop(f"q{i}")
        quotes = [quote(rng, i) for i in rng.sample(range(25), rng.randint(0, 8))]
        for q in quotes:
            ref.add(q, at)
        if rng.random() < 0.2:
            for q in quotes:
                kept.add(q, at)
        else:
            kept.add_many(quotes, at)
        assert list(kept.rows.items()) == list(ref.rows.items())
        assert kept.by_hash == ref.by_hash


def reference_release(inv: Inventory, quote_id: str) -> None:
    """Inventory.release as it was: one reservation, its total changed at once."""
    reservation = inv.reservations.pop(quote_id, None)
    if reservation is not None:
        left = inv.reserved.get(reservation.asset_out, 0) - reservation.amount_out
        if left > 0:
            inv.reserved[reservation.asset_out] = left
        else:
            inv.reserved.pop(reservation.asset_out, None)


def reservations(rng: random.Random, n: int) -> list[Reservation]:
    return [
        Reservation(f"q{i}", rng.choice(ASSETS), rng.randint(0, 9), ASSETS[0], 1,
                    T0 + span(rng.randint(1, 20)))
        for i in range(n)
    ]  # fmt: skip


def by_deadline(r: Reservation) -> tuple[Micros, str]:
    return r.deadline, r.quote_id


@pytest.mark.parametrize("seed", range(20))
def test_release_many_and_expired_free_what_releasing_each_freed(seed: int) -> None:
    rng = random.Random(seed)
    one, batch = Inventory(), Inventory()
    made = reservations(rng, 40)
    one.restore(made)
    batch.restore(made)
    if rng.random() < 0.5:  # a total the bookkeeping got wrong stays dropped as before
        one.reserved[ASSETS[1]] = batch.reserved[ASSETS[1]] = 3
    ids = [f"q{rng.randrange(45)}" for _ in range(15)]
    for quote_id in ids:
        reference_release(one, quote_id)
    batch.release_many(ids)
    assert list(batch.reserved.items()) == list(one.reserved.items())
    assert batch.reservations == one.reservations
    snapshot_at = T0 + span(rng.randint(0, 21))
    expired = [
        r for r in sorted(one.reservations.values(), key=by_deadline)
        if r.deadline < snapshot_at
    ]  # fmt: skip
    for r in expired:
        reference_release(one, r.quote_id)
    assert batch.release_expired(snapshot_at) == len(expired)
    assert list(batch.reserved.items()) == list(one.reserved.items())
    assert batch.reservations == one.reservations


@pytest.mark.parametrize("seed", range(30))
def test_release_expired_over_snapshots_releases_what_a_heap_released(seed: int) -> None:
    """Deadlines filed by bucket (issue 29): snapshot after snapshot, within a bucket and across
    several, with ids reserved again (another deadline, or the same), the reservations
    released are those due, as the heap of every entry popped them (in no particular order:
    what is released does not depend on it)."""
    rng = random.Random(seed)
    inv = Inventory()
    inv.set_confirmed(dict.fromkeys(ASSETS, 10**9), T0)
    live: dict[str, Reservation] = {}
    at = T0
    for _ in range(30):
        for _ in range(rng.randint(0, 8)):
            quote_id = f"q{rng.randrange(30)}"
            if quote_id in live and rng.random() < 0.5:
                inv.release(quote_id)
                del live[quote_id]
            deadline = at + rng.randint(-(2**19), 2**22)
            if quote_id in live or rng.random() < 0.1:
                deadline = live[quote_id].deadline if quote_id in live else deadline
                inv.release(quote_id)
                live.pop(quote_id, None)
            r = Reservation(quote_id, rng.choice(ASSETS), rng.randint(0, 9), ASSETS[0], 1, deadline)
            assert inv.reserve(r)
            live[quote_id] = r
        at += rng.choice((0, 1, 2**10, 2**19, 2**20, 2**20 + 1, 3 * 2**20))
        expected = sorted((r for r in live.values() if r.deadline < at), key=by_deadline)
        assert inv.release_expired(at) == len(expected)
        for r in expected:
            del live[r.quote_id]
        assert inv.reservations == live
        assert inv.reservations == live


def reference_past_deadline(
    heap: list[tuple[Micros, str]],
    quotes: dict[str, Quote],
    before: Micros,
    listed: list[tuple[Micros, str]] | None = None,
) -> list[Quote]:
    """QuoteBook.past_deadline as it was: due entries popped and pushed back (and appended to
    ``listed``)."""
    while heap and heap[0][1] not in quotes:
        heapq.heappop(heap)
    due, kept = [], []
    while heap and heap[0][0] < before:
        entry = heapq.heappop(heap)
        q = quotes.get(entry[1])
        if q is not None:
            due.append(q)
            kept.append(entry)
    for entry in kept:
        heapq.heappush(heap, entry)
    if listed is not None:
        listed += kept
    return due


@pytest.mark.parametrize("seed", range(30))
def test_past_deadline_lists_what_pushing_back_listed(seed: int) -> None:
    rng = random.Random(seed)
    book = QuoteBook()
    heap: list[tuple[Micros, str]] = []
    now, n = T0, 0
    for _ in range(60):
        roll = rng.random()
        if roll < 0.4:
            q = quote(
                rng,
                n if rng.random() < 0.9 else rng.randrange(n + 1),
                now + span(rng.randint(0, 8)),
            )
            n += 1
            if q.quote_id not in book.quotes:
                book.add(q)
                heapq.heappush(heap, (q.deadline, q.quote_id))
        elif roll < 0.6 and book.quotes:
            quote_id = rng.choice(list(book.quotes))
            if book.quotes[quote_id].state is QuoteState.OPEN:
                book.move(quote_id, rng.choice((QuoteState.LOST, QuoteState.WON)), now)
            else:
                book.move(quote_id, QuoteState.FAILED, now)
        else:
            now += span(rng.choice((0, 1, 2)))
            before = now - span(rng.choice((0, 3)))  # a later call may look less far
            listed: list[tuple[Micros, str]] = []
            expected = reference_past_deadline(heap, book.quotes, before, listed)
            due = book.past_deadline(before)
            assert due == expected
            if rng.random() < 0.5 and all(q.state is QuoteState.OPEN for q in due):
                for quote_id in dict.fromkeys(q.quote_id for q in due):  # listed twice: once
                    book.move(quote_id, QuoteState.LOST, now)
                # All closed: their entries are dropped, so an id added again is not listed
                # by the entry of the quote closed (the heap kept it, and listed it).
                book.due_closed()
                for entry in listed:
                    heap.remove(entry)
                heapq.heapify(heap)


class _Looking(dict[str, Quote]):
    """A book's quotes that count the membership tests made of them."""

    looked = 0

    def __contains__(self, key: object) -> bool:
        self.looked += 1
        return super().__contains__(key)


def test_quotes_closed_at_their_deadline_are_not_looked_up_again() -> None:
    """Issue 29: after :meth:`QuoteBook.due_closed`, the next ``past_deadline`` looks up none
    of the closed quotes' entries (each was, cold, a tick later); without it, each once."""
    rng = random.Random(3)
    for closed in (True, False):
        book = QuoteBook(quotes=_Looking())
        for i in range(50):
            book.add(quote(rng, i, T0 + span(1)))
        due = book.past_deadline(T0 + span(2))
        assert len(due) == 50
        for q in due:
            book.move(q.quote_id, QuoteState.LOST, T0 + span(2))
        if closed:
            book.due_closed()
        looking = book.quotes
        assert isinstance(looking, _Looking)
        looking.looked = 0
        assert book.past_deadline(T0 + span(3)) == []
        assert looking.looked == (0 if closed else 50)


def test_due_closed_keeps_what_was_after_a_shorter_cut() -> None:
    """A call that looks less far than the one before it returns less; closing those keeps
    the ones between its cut and the further one, listed again by the next call."""
    rng = random.Random(4)
    book = QuoteBook()
    early, late = quote(rng, 0, T0 + span(1)), quote(rng, 1, T0 + span(3))
    book.add(early)
    book.add(late)
    assert book.past_deadline(T0 + span(4)) == [early, late]
    assert book.past_deadline(T0 + span(2)) == [early]
    book.move(early.quote_id, QuoteState.LOST, T0 + span(2))
    book.due_closed()
    assert book.past_deadline(T0 + span(4)) == [late]


def _file_some(
    rng: random.Random, buckets: DeadlineBuckets, heap: list[tuple[Micros, str]], at: Micros
) -> None:
    """Up to ten entries around ``at`` (repeats too), filed in both."""
    for _ in range(rng.randint(0, 10)):
        entry = (at + rng.randint(-(2**20), 2**23), f"k{rng.randrange(20)}")
        buckets.file(*entry)
        heapq.heappush(heap, entry)


def _move_on(
    rng: random.Random, heap: list[tuple[Micros, str]], at: Micros
) -> tuple[Micros, Micros, list[tuple[Micros, str]]]:
    """Time moves on (or not); a cut before it, that may go back; what the heap pops before
    the cut."""
    at += rng.choice((0, 1, 2**19, 2**20, 3 * 2**20))
    before = at - rng.choice((0, 2**21))
    popped = []
    while heap and heap[0][0] < before:
        popped.append(heapq.heappop(heap))
    return at, before, popped


@pytest.mark.parametrize("seed", range(30))
def test_deadline_buckets_take_what_a_heap_popped(seed: int) -> None:
    """DeadlineBuckets (issue 29) against the heap it replaces: entries filed in any order
    (repeats too), taken before times that go back and forth, heads dropped by key."""
    rng = random.Random(seed)
    buckets, heap = DeadlineBuckets(), list[tuple[Micros, str]]()
    at = T0
    for _ in range(40):
        _file_some(rng, buckets, heap, at)
        keys = {f"k{i}" for i in rng.sample(range(20), 10)}
        if rng.random() < 0.3:
            buckets.drop_head_unless_in(keys)
            while heap and heap[0][1] not in keys:
                heapq.heappop(heap)
        at, before, popped = _move_on(rng, heap, at)
        assert buckets.take_before(before) == popped
        assert len(buckets) == len(heap)


@pytest.mark.parametrize("seed", range(30))
def test_deadline_buckets_taken_unordered_are_what_a_heap_popped(seed: int) -> None:
    """``take_before(ordered=False)`` (the inventory's, which sorts what it keeps): the same
    entries as the heap popped, in any order; what stays is taken later as the heap pops it,
    whatever order the buckets were left in."""
    rng = random.Random(seed)
    buckets, heap = DeadlineBuckets(), list[tuple[Micros, str]]()
    at = T0
    for _ in range(40):
        _file_some(rng, buckets, heap, at)
        at, before, popped = _move_on(rng, heap, at)
        ordered = rng.random() < 0.3
        taken = buckets.take_before(before, ordered=ordered)
        assert (taken if ordered else sorted(taken)) == popped
        assert len(buckets) == len(heap)


def test_deadline_buckets_take_below_the_last_cut_and_after_a_long_gap() -> None:
    """The buckets' keys are walked from the last cut (issue 29): an entry filed below it
    (its deadline passed already) is taken at the next take, and a take a day after the last
    one, with few buckets filed between, takes them in order without walking the day's keys."""
    buckets = DeadlineBuckets()
    buckets.file(T0 + 5 * 2**14, "a")
    assert buckets.take_before(T0 + 10 * 2**14) == [(T0 + 5 * 2**14, "a")]
    buckets.file(T0, "late")  # below the last cut
    buckets.file(T0 + 12 * 2**14, "b")
    assert buckets.take_before(T0 + 11 * 2**14) == [(T0, "late")]
    day = span(86_400)
    buckets.file(T0 + day, "c")
    buckets.file(T0 + day // 2, "d")
    assert buckets.take_before(T0 + 2 * day) == [
        (T0 + 12 * 2**14, "b"), (T0 + day // 2, "d"), (T0 + day, "c"),
    ]  # fmt: skip
    assert len(buckets) == 0 and buckets.take_before(T0 + 3 * day) == []


@pytest.mark.parametrize("seed", range(30))
def test_find_hash_finds_the_rows_kept_and_only_them(seed: int) -> None:
    """The hash index is built when asked, not kept at every add and drop (issue 29): asked
    now and then, between batches, pops, rows restored one by one, and past the cap (the index
    then rebuilt whole), it finds every row kept by its hash, and no row dropped or popped."""
    rng = random.Random(seed)
    kept = RecentLost(window_s=5.0, max_kept=rng.randint(1, 12))
    at, made = T0, 0
    issued: list[str] = []
    for _ in range(60):
        at += span(rng.choice((0, 0.5, 1, 3, 6)))
        roll = rng.random()
        if roll < 0.2 and kept.rows:
            kept.pop(rng.choice(list(kept.rows)))
        elif roll < 0.3:
            q = quote(rng, rng.randrange(made + 1))
            q.quote_hash = f"h{made}-{q.quote_id}"  # a reused id comes with another hash
            made += 1
            issued.append(q.quote_hash)
            kept.add_row(lost_row(q, at))
        else:
            quotes = []
            for i in rng.sample(range(made + 8), rng.randint(0, 8)):
                q = quote(rng, i)
                q.quote_hash = f"h{made}-{q.quote_id}"
                made += 1
                issued.append(q.quote_hash)
                quotes.append(q)
            kept.add_many(quotes, at)
        if rng.random() < 0.4:
            expected = {row[1]: quote_id for quote_id, row in kept.rows.items()}
            for quote_hash in issued:
                found = kept.find_hash(quote_hash)
                assert (found.quote_id if found else None) == expected.get(quote_hash)


class _Counted(int):
    """A deadline that counts the comparisons made on it (a tuple compares its first items
    with ``==`` and then ``<``): the work of sorting and searching buckets, as a number."""

    made = 0

    def __eq__(self, other: object) -> bool:
        _Counted.made += 1
        return int.__eq__(self, other)

    def __lt__(self, other: int) -> bool:
        _Counted.made += 1
        return int.__lt__(self, other)

    __hash__ = int.__hash__


def test_a_tick_at_saturation_compares_about_what_falls_due() -> None:
    """At saturation (13,000 answers a second, a tick every 20 ms) each tick looked at the
    whole bucket of the time it cut at, twice (the head's drop, then the cut): with buckets of
    ~1 s, ~13,000 entries sorted fifty times a second, ~10 µs of CPU an answer (issue 29,
    measured in-process). A tick must cost about what falls due in it."""
    buckets = DeadlineBuckets()
    open_keys: set[str] = set()
    step = 1_000_000 // 13_000  # µs between answers
    at, filed, taken = T0, 0, 0
    _Counted.made = 0
    for _tick in range(150):  # 3 s: the deadlines of the first 1.5 s fall due in the last ticks
        for _ in range(20_000 // step):
            at += step
            key = f"q{filed}"
            buckets.file(_Counted(at + 1_500_000), key)  # a 1.5 s deadline, in order
            open_keys.add(key)
            filed += 1
        buckets.drop_head_unless_in(open_keys)
        due = buckets.take_before(at)
        taken += len(due)
        open_keys.difference_update(key for _, key in due)
    assert taken > 10_000  # many fell due in the ticks measured
    assert _Counted.made < 8 * filed, f"{_Counted.made:,} comparisons for {filed:,} entries"


@pytest.mark.parametrize("seed", range(10))
def test_lose_takes_a_repeated_id_once_and_an_empty_reason_keeps_each_quotes(seed: int) -> None:
    """A batch naming an id twice loses it once (as moving each quote does), and no reason
    leaves every quote its own."""
    rng = random.Random(seed)
    one, batch = QuoteBook(), QuoteBook()
    for i in range(20):
        q = replace(quote(rng, i), reason=f"own{i}")
        one.add(q)
        batch.add(replace(q))
    ids = [f"q{rng.randrange(25)}" for _ in range(30)]
    expected = list(dict.fromkeys(i for i in ids if one.get(i) is not None))
    for quote_id in expected:
        one.move(quote_id, QuoteState.LOST, T0, reason="")
    lost: list[Quote] = []
    batch.lose(ids, T0, "", lost, {})
    assert [q.quote_id for q in lost] == expected
    assert [q.reason for q in lost] == [f"own{i[1:]}" for i in expected]
    assert book_state(batch) == book_state(one)
