"""The lines of a recorded stream's open part as the replay's records (format version 1).

:class:`LineParser` turns the lines of one open file into records: the per-line hot loop and,
for a line it cannot take the short way, the checks one at a time (the envelope's in
:mod:`backtest.stream.envelope`) and the problems they report (malformed, truncated, unsorted),
with the state that outlives a part (line numbers, the last time read, the stats). A
:class:`~backtest.stream.read.StreamReader` has one: the reader finds and opens the parts, reads
their headers and hands the records out (as events or batches); the parser never opens a file.
The reading rules are described in :mod:`backtest.stream.read`.

The hot path parses with orjson and checks fields by hand with the rules of
:class:`solver.protocol.bus.QuoteRequestEvent` read with ``context=WIRE`` (amounts are u128
decimal strings, never JSON numbers), which is several times faster than a pydantic model per
line. Timestamps in the writer's own form are read without a ``datetime``
(:class:`~backtest.stream.records.Timestamps`; the one before, or its second, is reused without
a call, since events share them); any other is read by the ISO 8601 parser (the long way). The
common request, competitor and price lines are checked inline (a call per line is a good part of
a line's cost); any line those checks do not pass is checked again field by field
(:mod:`backtest.stream.envelope`, :class:`~solver.protocol.quote_request.QuoteRequestParser`,
:mod:`backtest.stream.kinds`), so it gets the same reason as before. A request's asset ids are
the header's own strings.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator, Sequence
from io import BufferedReader, BytesIO
from pathlib import Path
from typing import Any

import orjson

from backtest.stream.envelope import read_envelope
from backtest.stream.events import FORMAT_VERSION, TokenInfo
from backtest.stream.files import StreamStats
from backtest.stream.format import (
    MAX_MALFORMED_KEPT,
    MAX_QUOTE_ID_LEN,
    Malformed,
    StreamError,
    format_ts,
)
from backtest.stream.kinds import PARSERS, competitor, partner_of, price
from backtest.stream.records import (
    KIND_TAGS,
    REC_COMPETITOR,
    REC_PRICE,
    REC_REQUEST,
    TAILS,
    Record,
    Timestamps,
)
from solver.core.clock import from_micros
from solver.protocol.amounts import U128_DIGITS, U128_MAX
from solver.protocol.quote_request import (
    MAX_MIN_DEADLINE_MS,
    BadQuoteRequest,
    QuoteRequest,
    QuoteRequestParser,
)
from solver.protocol.quote_request import MAX_QUOTE_ID_LEN as MAX_REQUEST_ID_LEN

__all__ = ["CHUNK", "LineParser"]

new_tuple = tuple.__new__  # a QuoteRequest built without its __new__'s Python frame

CHUNK = 1 << 16
"""Bytes read at a time, and so the lines of a batch: enough that a batch's own cost is nothing
per record, few enough that reading ahead costs no memory (the buffered reader's own 64 KiB)."""
_SHORT_WAY = dict(KIND_TAGS)
"""The kinds whose lines may take the short way (a test empties it to compare with the long)."""
_NO_TIME = -(2**63)


class LineParser:
    """Reads the lines of the part its reader gave it (:meth:`start_part`) into records and
    reports bad ones.

    The state the per-line loop reads (the open file, the line number in it, the lines of the
    parts before, the last time read) is this object's own, so the loop binds it to locals once
    per part and a part's end or the reader's close is a call here, not a reach into it.
    """

    def __init__(
        self, paths: Sequence[Path], tokens: dict[str, TokenInfo], *, strict: bool
    ) -> None:
        self.strict = strict
        self.stats = StreamStats()
        self._tokens = tokens
        self._requests = QuoteRequestParser(assets=tokens)
        self._timestamps = Timestamps()
        self._current = str(paths[0])
        self._prefix = len(paths) > 1
        self._last_us = _NO_TIME
        self._file: BufferedReader | None = None
        self._number = 0  # line number in the open part
        self._base = 0  # lines of the parts already read
        self._done = False

    @property
    def done(self) -> bool:
        """Closed, or every part read: nothing more comes."""
        return self._done

    @property
    def in_part(self) -> bool:
        """A part is open (its lines are read by :meth:`part_batches`)."""
        return self._file is not None

    def start_part(self, file: BufferedReader, path: str, number: int) -> None:
        """Read ``file`` next: the part at ``path``, positioned after its header (line
        ``number``); the parser owns it from now on and closes it."""
        self._file, self._current, self._number = file, path, number
        self.stats.lines = self._base + number

    def end_part(self) -> None:
        """The open part is read: close it; its lines count before the next part's."""
        if self._file is not None:
            self._file.close()
            self._file = None
        self._base += self._number
        self._number = 0

    def part_batches(self) -> Iterator[list[Record]]:
        """The open part's records, a batch per chunk of its bytes (:data:`CHUNK`).

        The lines are cut from chunks of the part's bytes (issue 29: a ``readline`` per line
        over the gzip reader cost more than the cut; each chunk is the 64 KiB read the
        buffered reader's ``readline`` made, so a gzip part cut short loses what it lost).
        A line of the usual shape (an object with a known kind, ``"v": 1``, a timestamp in
        the writer's form, a data object) takes the short way to its kind's checks; any other
        goes through :meth:`_fields`, the checks one at a time, which name what is wrong. A
        timestamp whose second is the last one read costs a slice, a compare and a lookup of
        its ``.mmmZ`` tail (:data:`~backtest.stream.records.TAILS`)."""
        file = self._file
        assert file is not None
        # The buffered reader's bytes left after the header first, then straight from the file
        # under it in reads of the buffered reader's own size (a copy less a chunk).
        read = file.read1
        stats = self.stats
        loads, json_error = orjson.loads, orjson.JSONDecodeError
        kinds = _SHORT_WAY
        parse_request = self._requests.parse
        # Each asset id as the header's own str: a request holds one object per asset, whose
        # hash is computed once, and the replay's lookups by asset compare it by identity.
        canonical = {token: token for token in self._tokens}
        parsers, tokens = PARSERS, self._tokens
        seconds, tails = self._timestamps.second, TAILS
        version_1 = FORMAT_VERSION
        index: int | None
        batch: list[Record] = []
        append = batch.append
        last = self._last_us
        last_text: object = None  # the last timestamp read and its µs
        last_t = 0
        second: object = None  # the last second read (the first 19 characters) and its µs
        second_us = 0
        number = self._number
        carry = b""  # the chunk's last line, cut by the chunk's end
        unended = False  # the lines are the part's last line, which has no line end
        try:
            try:
                while True:
                    chunk = read(CHUNK)
                    read = file.raw.read
                    if chunk:
                        lines = BytesIO(chunk).readlines()  # memchr: bytes.split is slower
                        if carry:
                            lines[0] = carry + lines[0]
                        carry = lines.pop() if lines[-1][-1:] != b"\n" else b""
                    elif carry:
                        lines, carry, unended = [carry], b"", True
                    else:
                        break
                    for line in lines:
                        number += 1
                        try:
                            try:
                                obj = loads(line)
                                version, text, data = obj["v"], obj["ts"], obj["data"]
                                index = kinds[obj["kind"]]
                                if text == last_text:  # half the lines: the time before
                                    t_us = last_t
                                elif text[:19] == second:
                                    t_us = last_t = second_us + tails[text[19:]]
                                    last_text = text
                                else:
                                    read_us = seconds(text) if text.__class__ is str else None
                                    if read_us is None:
                                        index = None
                                    else:
                                        second, second_us = text[:19], read_us
                                        t_us = last_t = read_us + tails[text[19:]]
                                        last_text = text
                            except (json_error, KeyError, TypeError):
                                index = None
                            # ``is``: orjson's 1 is the interpreter's one small int (any
                            # other 1 takes the long way, which reads it the same).
                            if (
                                index is None
                                or version is not version_1
                                or data.__class__ is not dict
                            ):
                                self._last_us = last
                                fields = self._fields(line, number)
                                last = self._last_us
                                if fields is None:
                                    continue
                                index, t_us, obj, data = fields
                            else:
                                if t_us < last:
                                    self._unsorted(number, t_us, last)
                                last = t_us
                            if index == REC_REQUEST:
                                meta = obj.get("meta")
                                if meta.__class__ is dict:
                                    partner = meta.get("partner_id")
                                    if partner is not None and partner.__class__ is not str:
                                        partner = partner_of(meta)  # says what is wrong
                                else:
                                    partner = None if meta is None else partner_of(meta)
                                # QuoteRequestParser.parse's fast path, inline (a call and a
                                # frame less), on the writer's shape: every field there, one exact
                                # amount. Anything it does not pass is parsed by parse.
                                try:
                                    quote_id = data["quote_id"]
                                    asset_in = data["core_asset_identifier_in"]
                                    asset_out = data["core_asset_identifier_out"]
                                    deadline = data["min_deadline_ms"]
                                    if "exact_amount_in" in data:
                                        exact_in = True
                                        raw = (
                                            None
                                            if "exact_amount_out" in data
                                            else data["exact_amount_in"]
                                        )
                                    else:
                                        exact_in = False
                                        raw = data["exact_amount_out"]
                                except KeyError:
                                    quote_id = None
                                if (
                                    quote_id.__class__ is str
                                    and 0 < len(quote_id) <= MAX_REQUEST_ID_LEN
                                    and asset_in.__class__ is str
                                    and asset_out.__class__ is str
                                    and (asset_in := canonical.get(asset_in)) is not None
                                    and (asset_out := canonical.get(asset_out)) is not None
                                    and asset_in is not asset_out
                                    and raw.__class__ is str
                                    and 0 < len(raw) <= U128_DIGITS
                                    and raw[0] != "0"
                                    and raw.isdigit()
                                    and raw.isascii()
                                    and deadline.__class__ is int
                                    and 0 <= deadline <= MAX_MIN_DEADLINE_MS
                                    and (amount := int(raw)) <= U128_MAX
                                ):
                                    request = new_tuple(
                                        QuoteRequest,
                                        (quote_id, asset_in, asset_out, exact_in, amount, deadline,
                                         partner),
                                    )  # fmt: skip
                                else:
                                    try:
                                        request = parse_request(data, partner)
                                    except BadQuoteRequest as exc:
                                        raise Malformed(str(exc)) from None
                                record: Record = (REC_REQUEST, t_us, request)
                            elif index == REC_COMPETITOR:
                                try:
                                    quote_id, best = data["quote_id"], data["best_amount"]
                                except KeyError:
                                    quote_id = None
                                if (
                                    quote_id.__class__ is str
                                    and 0 < len(quote_id) <= MAX_QUOTE_ID_LEN
                                    and best.__class__ is str
                                    and 0 < len(best) <= U128_DIGITS
                                    and best.isdigit()
                                    and best.isascii()
                                    and (best[0] != "0" or len(best) == 1)
                                    and (amount := int(best)) <= U128_MAX
                                ):
                                    record = (REC_COMPETITOR, t_us, quote_id, amount)
                                else:
                                    record = competitor(t_us, data)
                            elif index == REC_PRICE:
                                # kinds.price's rules on the usual line, by str methods in place
                                # of its regular expression; anything else is read by it.
                                try:
                                    asset_id, usd = data["asset"], data["usd"]
                                except KeyError:
                                    asset_id = None
                                if (
                                    asset_id.__class__ is str
                                    and (asset_id := canonical.get(asset_id)) is not None
                                    and usd.__class__ is str
                                    and 0 < len(usd) <= 64
                                    and (digits := usd.replace(".", "", 1)).isdigit()
                                    and digits.isascii()
                                    and usd[0] != "."
                                    and usd[-1] != "."
                                    and (usd[0] != "0" or len(usd) == 1 or usd[1] == ".")
                                    and usd.strip("0.")  # a digit other than 0
                                ):
                                    record = (REC_PRICE, t_us, asset_id, usd)
                                else:
                                    record = price(t_us, data, tokens)
                            else:
                                record = parsers[index](t_us, data, tokens)
                        except Malformed as bad:
                            if unended:  # the last line, cut short mid-write
                                self._truncated(number, f"the last line ({number}) is cut short")
                            self._number = number
                            self._malformed(number, bad)
                            continue
                        append(record)
                    if batch:
                        self._number, self._last_us = number, last
                        stats.lines = self._base + number
                        stats.count(batch)
                        yield batch
                        if self._done:
                            return
                        batch = []
                        append = batch.append
            except EOFError:
                # A gzip part cut short (a recorder killed mid-write): keep what was read.
                self._truncated(number, f"the gzip stream is cut short after line {number}")
                self._malformed(number + 1, Malformed("truncated gzip stream: the file ends here"))
            except (OSError, gzip.BadGzipFile, zlib.error) as exc:
                path = self._current
                stats.lines = self._base + number
                self.close()
                raise StreamError(
                    f"cannot read stream after line {number}: {exc}", path=path, line=number
                ) from None
        except StreamError:
            if batch:
                stats.count(batch)
                yield batch  # what came before the error, then the error
            raise
        self._number, self._last_us = number, last
        stats.lines = self._base + number

    def _fields(self, line: bytes, number: int) -> tuple[int, int, dict[str, Any], Any] | None:
        """A line's kind, time, object and data, checked one at a time (:func:`read_envelope`;
        the first problem raises :class:`Malformed` naming it); None for a line to skip (blank,
        unknown kind). Reads and sets :attr:`_last_us`: a line with a valid time moves it even
        when its data turns out malformed."""
        fields = read_envelope(line, self.stats, self._timestamps)
        if fields is None:
            return None
        index, t_us, obj = fields
        if t_us < self._last_us:
            self._unsorted(number, t_us, self._last_us)
        self._last_us = t_us
        data = obj.get("data")
        if type(data) is not dict:
            raise Malformed(f"{obj['kind']}: data must be an object")
        return index, t_us, obj, data

    # ------------------------------------------------------------------ problems

    def _malformed(self, number: int, bad: Malformed) -> None:
        stats = self.stats
        if self.strict:
            path = self._current
            stats.lines = self._base + number
            self.close()
            raise StreamError(f"malformed line {number}: {bad}", path=path, line=number) from None
        stats.malformed_total += 1
        if len(stats.malformed) < MAX_MALFORMED_KEPT:
            reason = f"{self._current}: {bad}" if self._prefix else str(bad)
            stats.malformed.append((number, reason))

    def _truncated(self, number: int, why: str) -> None:
        stats = self.stats
        if stats.truncated is None:
            where = f"{self._current}: " if self._prefix else ""
            stats.truncated = f"{where}{why}"

    def _unsorted(self, number: int, t_us: int, last_us: int) -> None:
        path = self._current
        self.stats.lines = self._base + number
        self.close()
        raise StreamError(
            f"unsorted timestamps at line {number}: {format_ts(from_micros(t_us))} is earlier "
            f"than the previous event's {format_ts(from_micros(last_us))} (sort the stream by ts)",
            path=path,
            line=number,
        )

    # ------------------------------------------------------------------ closing

    def close(self) -> None:
        """Stop reading and close the file (idempotent)."""
        self._done = True
        file, self._file = self._file, None
        if file is not None:
            file.close()
