"""The frames between the bot and the signer on the Unix socket (issue 28).

A frame is a u32 little-endian length and that many bytes of JSON. The bot sends a batch
``{"b": [request, ...], "x": epoch seconds}`` (``x``, optional: when the bot gives up on it;
what the signer has not signed by then it answers ``expired``, unsigned); the signer answers
``{"b": [answer, ...]}`` with one answer per request, in the same order, and answers a
connection's batches in the order they came, so the bot needs no ids to match them.

Requests:

- ``{"k": "hello"}`` → ``{"account", "verifier", "public_key"}``: the bot checks it talks to the
  signer of its own account and verifier before it sends anything.
- ``{"k": "q", "q": quote_id, "d": deadline (RFC 3339 ms), "n": nonce (base64), "r": recipient,
  "ai": asset_in, "a": amount_in, "ao": asset_out, "b": amount_out}``: a quote; the signer
  builds the ``token_diff`` message itself (the same bytes as the bot's
  :func:`~solver.protocol.quote_signing.token_diff_message`), so what it checks is what it signs.
- ``{"k": "m", "m": message, "n": nonce (base64), "r": recipient}``: any other NEP-413 message.
- ``{"k": "stats"}`` → the signer's counts.

Answers: ``{"s": signature (base58 of 64 bytes)}`` or ``{"e": rule, "m": detail}``.
Amounts travel as decimal strings (u128 does not fit a JSON number everywhere).
"""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import orjson

from solver.errors import ProtocolError, TransportError

MAX_FRAME = 16 << 20
_LEN = struct.Struct("<I")


def frame(body: Any) -> bytes:
    data = orjson.dumps(body)
    return _LEN.pack(len(data)) + data


async def read_frame(reader: asyncio.StreamReader) -> Any:
    """The next frame's JSON, or raise :class:`TransportError` when the peer went away."""
    try:
        head = await reader.readexactly(4)
        (size,) = _LEN.unpack(head)
        if size > MAX_FRAME:
            raise ProtocolError(f"frame of {size} bytes is over {MAX_FRAME}")
        data = await reader.readexactly(size)
    except (asyncio.IncompleteReadError, ConnectionError) as exc:
        raise TransportError("signer connection closed") from exc
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        raise ProtocolError("frame is not JSON") from None


def refused(rule: str, detail: str) -> dict[str, str]:
    return {"e": rule, "m": detail}
