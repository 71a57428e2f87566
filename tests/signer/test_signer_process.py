"""``solver signer serve`` as a child process with a key file (issue 28): the bot's clients
get signatures that verify, and refusals that name the rule, with nothing signed; the socket
is owner-only; every signature is in the audit log."""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson
import pytest

from solver.core.clock import MINUTE, SECOND, now_micros
from solver.errors import RemoteError
from solver.protocol.intents import format_deadline
from solver.protocol.keys import PublicKey
from solver.protocol.nonce import salted_nonce
from solver.protocol.quote_signing import SignedQuote
from solver.protocol.signing import nep413_digest, parse_signed, verify_signed
from solver.signer.client import RemoteIntentSigner, RemoteQuoteSigner
from tests.signer.helpers import TEST_KEY, SignerProcess, running_signer, signer_yaml

ACCOUNT, VERIFIER = "solver.sandbox", "intents.sandbox"
USDC, NEAR = "nep141:usdc.sandbox", "nep141:wrap.sandbox"
SALT = bytes.fromhex("0badf00d")


@pytest.fixture
def signer(tmp_path: Path, key_file: Path) -> Iterator[SignerProcess]:
    config = signer_yaml(
        tmp_path / "signer.yaml",
        account=ACCOUNT,
        verifier=VERIFIER,
        key={"key_file": str(key_file)},
        quote_caps={USDC: {"per_request": 1_000, "per_hour": 10_000}},
        quote_max_deadline_ms=60_000,
    )
    with running_signer(config, os.environ) as process:
        yield process


async def ask(signer: SignerProcess, *quotes: Mapping[str, object]) -> list[SignedQuote | str]:
    """Quotes through the bot's deferred signer, all in one loop turn (one batch)."""
    client = RemoteQuoteSigner(signer.socket, ACCOUNT, VERIFIER, timeout_s=10)
    await client.start()
    results: list[SignedQuote | str] = []
    done = asyncio.Event()
    now = now_micros()
    for index, changes in enumerate(quotes):
        args: dict[str, object] = {
            "quote_id": f"q{index}",
            "deadline": now + 20 * SECOND,
            "nonce": salted_nonce(SALT),
            "asset_in": NEAR,
            "amount_in": 3,
            "asset_out": USDC,
            "amount_out": 10,
            **changes,
        }

        def reply(result: SignedQuote | str) -> None:
            results.append(result)
            if len(results) == len(quotes):
                done.set()

        client.sign_later(reply=reply, **args)  # type: ignore[arg-type]
    await asyncio.wait_for(done.wait(), 10)
    await client.close()
    return results


async def test_quotes_are_signed_in_order_and_verify(signer: SignerProcess) -> None:
    assert signer.public_key == TEST_KEY.public_key.to_text()
    mode = stat.S_IMODE(signer.socket.stat().st_mode)
    assert mode & 0o077 == 0, oct(mode)  # owner-only
    results = await ask(signer, *({"amount_out": n} for n in range(1, 41)))
    assert all(isinstance(r, SignedQuote) for r in results), results
    for amount, result in enumerate(results, 1):
        assert isinstance(result, SignedQuote)
        verified = verify_signed(parse_signed(result.signed_data))
        assert verified.public_key == signer.public_key
        assert f'"-{amount}"' in result.message  # answers in the order asked
    signed = [line for line in signer.audit_lines() if "hash" in line]
    assert [line["quote_id"] for line in signed] == [f"q{i}" for i in range(40)]
    assert signed[0]["hash"] == results[0].quote_hash  # type: ignore[union-attr]


async def test_a_quote_beyond_the_rules_is_refused_by_name_and_not_signed(
    signer: SignerProcess,
) -> None:
    now = now_micros()
    results = await ask(
        signer,
        {"amount_out": 1_001},
        {"deadline": now + 5 * MINUTE},
        {"asset_out": NEAR, "asset_in": USDC},
    )
    assert [r.split(":")[1] for r in results if isinstance(r, str)] == [
        "cap_per_request",
        "deadline_too_far",
        "token_not_allowed",
    ], results
    lines = signer.audit_lines()
    assert [line["refused"] for line in lines] == [
        "cap_per_request",
        "deadline_too_far",
        "token_not_allowed",
    ]
    assert not any("hash" in line for line in lines)  # nothing signed


async def test_a_transfer_or_another_recipient_is_refused_and_nothing_signed(
    signer: SignerProcess,
) -> None:
    client = RemoteIntentSigner(signer.socket, ACCOUNT, VERIFIER)
    deadline = format_deadline(datetime.now(UTC) + timedelta(seconds=30))
    transfer = {"intent": "transfer", "receiver_id": "thief.sandbox", "tokens": {USDC: "5"}}
    message = orjson.dumps(
        {"deadline": deadline, "intents": [transfer], "signer_id": ACCOUNT}
    ).decode()
    with pytest.raises(RemoteError, match=r"intent_not_allowed"):
        await client.sign_message(message, salted_nonce(SALT), VERIFIER)
    diff = {"intent": "token_diff", "diff": {USDC: "-5", NEAR: "1"}}
    quote_like = orjson.dumps({"deadline": deadline, "intents": [diff], "signer_id": ACCOUNT})
    with pytest.raises(RemoteError, match=r"intent_not_allowed"):
        await client.sign_message(quote_like.decode(), salted_nonce(SALT), "other.sandbox")
    lines = signer.audit_lines()
    assert [line["refused"] for line in lines] == ["intent_not_allowed", "intent_not_allowed"]
    assert not any("hash" in line for line in lines)


async def test_a_quote_to_another_recipient_is_refused(signer: SignerProcess) -> None:
    client = RemoteQuoteSigner(signer.socket, ACCOUNT, VERIFIER, timeout_s=10)
    await client.start()
    client.verifier = "other.sandbox"  # a compromised bot can send anything on the socket
    got: list[SignedQuote | str] = []
    client.sign_later(
        quote_id="q",
        deadline=now_micros() + 20 * SECOND,
        nonce=salted_nonce(SALT),
        asset_in=NEAR,
        amount_in=3,
        asset_out=USDC,
        amount_out=10,
        reply=got.append,
    )
    for _ in range(500):
        if got:
            break
        await asyncio.sleep(0.01)
    await client.close()
    assert got and isinstance(got[0], str) and got[0].startswith("signer_refused:recipient"), got
    assert [line.get("refused") for line in signer.audit_lines()] == ["recipient"]


def test_the_digest_the_signer_signs_is_the_bots() -> None:
    """The signer builds the quote's message itself; the bot rebuilds the same bytes."""
    message = '{"a":1}'
    nonce = salted_nonce(SALT)
    digest = nep413_digest(message, nonce, VERIFIER)
    assert PublicKey(TEST_KEY.public_key.raw).verify(digest, TEST_KEY.sign(digest))


async def test_a_batch_the_bot_gave_up_on_is_not_signed(signer: SignerProcess) -> None:
    """A signer that fell behind skips what the bot no longer waits for (``x`` passed)."""
    import time

    from solver.signer.client import open_link
    from solver.signer.wire import frame, read_frame

    reader, writer, _ = await open_link(signer.socket, ACCOUNT, VERIFIER)
    request = {
        "k": "q",
        "q": "late",
        "d": format_deadline(datetime.now(UTC) + timedelta(seconds=20)),
        "n": "AQIDBA" + "A" * 38,
        "r": VERIFIER,
        "ai": NEAR,
        "a": "3",
        "ao": USDC,
        "b": "10",
    }
    writer.write(frame({"b": [request, request], "x": time.time() - 1}))
    answers = (await read_frame(reader))["b"]
    writer.close()
    await writer.wait_closed()
    assert [a.get("e") for a in answers] == ["expired", "expired"]
    assert not [line for line in signer.audit_lines() if "hash" in line]
