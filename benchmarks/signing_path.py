"""Issue 29's signing path, stage by stage: the code of a baseline commit against this tree's.

``python -m benchmarks.signing_path [--repeats N] [--batch N] [--base REV] [--results DIR]``

What one quote's signature costs, per stage (message with its deadline text, NEP-413 preimage
and sha256, ed25519, base58 of the signature and of the digest, base64 of the nonce, the nonce)
and whole (``QuoteSigner.sign``), for two implementations in one process:

- **old**: ``solver/protocol`` of ``--base`` (default ``2331a8e``, the commit this work started
  from), taken from a ``git archive`` into the scratch folder and imported as ``solver_base``
  (its ``solver.`` imports rewritten), so the old code is the old code, not a copy;
- **new**: this tree's ``solver.protocol``.

The machine is shared and noisy, so the two are interleaved: every repeat times a batch of each
stage for old and new back to back (which goes first alternates), on the same inputs, in the
thread's CPU time (not wall time: waiting for a core is not counted), and the figures are
medians and p90 over the repeats of the per-call time, with the ratio new / old of
the medians and the median of the per-repeat ratios (paired, the steadier of the two). The
preimage is inline in both ``sign`` methods: its two stage functions here are copies, checked
at the start to give the signers' own digests. Inputs are what the bot signs: deadlines at
2,000 quotes/s moving on from batch to batch, amounts up to 10^24, the benchmark's assets.
Each call's time includes the loop that makes it (``empty loop``, ~0.03 µs).

``alternatives``: other ways to do a stage, timed the same way (base58: the ``base58`` package,
a pure-Python version in 58**4 chunks, gmpy2 with ``str.translate``, ``based58`` when installed;
ed25519: PyNaCl's ``SigningKey`` and ``nacl.bindings.crypto_sign``; random bytes for a nonce:
``os.urandom``, ``secrets.token_bytes``, ``random.SystemRandom().randbytes``).

Writes ``signing_path.json`` (every figure) and ``signing_path.md`` into the results folder.
"""

from __future__ import annotations

import argparse
import base64
import gc
import hashlib
import importlib
import io
import os
import random
import re
import secrets
import struct
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import nacl.bindings
import nacl.signing
import orjson

from benchmarks.common import (
    RESULTS_DIR,
    ROOT,
    machine_info,
    md_table,
    quantile,
    scratch_dir,
    summarize,
    write_json,
)
from solver.core.clock import micros
from solver.protocol import encoding, intents, keys, nonce, quote_signing
from solver.protocol.signing import NEP413_TAG

NAME = "signing_path"
DEFAULT_BASE = "2331a8e"
SEED = bytes(range(32))
SIGNER_ID = "solver.near"
CONTRACT = "intents.near"
ASSETS = (
    "nep141:usdc.sandbox",
    "nep141:wrap.sandbox",
    "nep141:eth.sandbox",
    "nep245:v2_1.omni.hot.tg:56_11111111111111111111",
)
QUOTES_PER_S = 2000
_IMPORT = re.compile(r"^(\s*)(from|import) solver(?=[.\s])", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Quote:
    """One quote's inputs, and its digest and signature for the stages that take them."""

    deadline: datetime
    deadline_ns: int
    nonce: bytes
    asset_in: str
    amount_in: int
    asset_out: str
    amount_out: int
    raw: bytes  # the message's UTF-8
    digest: bytes
    signature: bytes


Stage = Callable[[Sequence[Quote]], object]


# ---------------------------------------------------------------------------- the old code


def _git(*args: str) -> bytes:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, check=True).stdout


def load_base(rev: str, scratch: Path) -> tuple[dict[str, ModuleType], str]:
    """``solver/protocol`` of ``rev`` as the package ``solver_base.protocol``; its modules by
    name, and the commit's full hash."""
    sha = _git("rev-parse", "--verify", f"{rev}^{{commit}}").decode().strip()
    root = scratch / f"base-{sha[:10]}"
    if not (root / ".exported").exists():
        archive = _git("archive", sha, "solver/__init__.py", "solver/protocol")
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            for member in tar.getmembers():
                source = tar.extractfile(member) if member.isfile() else None
                if source is None or not member.name.endswith(".py"):
                    continue
                text = _IMPORT.sub(r"\1\2 solver_base", source.read().decode("utf-8"))
                target = root / ("solver_base" + member.name.removeprefix("solver"))
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text, encoding="utf-8")
        (root / ".exported").write_text(sha + "\n")
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    names = ("encoding", "intents", "keys", "nonce", "quote_signing")
    return {n: importlib.import_module(f"solver_base.protocol.{n}") for n in names}, sha


# ---------------------------------------------------------------------------- inputs


class Inputs:
    """Quotes as the bot signs them: deadlines 60 s ahead at ``QUOTES_PER_S``, moving on."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.at = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
        self.signer = quote_signing.QuoteSigner(keys.SecretKey(SEED), SIGNER_ID, CONTRACT)
        self.sequence = nonce.NonceSequence(bytes(7))
        self.salt = bytes.fromhex("252812b3")

    def batch(self, size: int) -> list[Quote]:
        out = []
        for _ in range(size):
            self.at += timedelta(microseconds=1_000_000 // QUOTES_PER_S)
            deadline = self.at + timedelta(seconds=60, microseconds=self.rng.randrange(1000))
            asset_in, asset_out = self.rng.sample(ASSETS, 2)
            amount_in = self.rng.randrange(10**5, 10**24)
            amount_out = self.rng.randrange(10**5, 10**24)
            quote_nonce = self.salt + self.sequence.take(28)
            signed = self.signer.sign(
                deadline=micros(deadline),
                nonce=quote_nonce,
                asset_in=asset_in,
                amount_in=amount_in,
                asset_out=asset_out,
                amount_out=amount_out,
            )
            delta = deadline - datetime(1970, 1, 1, tzinfo=UTC)
            ns = ((delta.days * 86400 + delta.seconds) * 10**6 + delta.microseconds) * 1000
            out.append(
                Quote(
                    deadline,
                    ns,
                    quote_nonce,
                    asset_in,
                    amount_in,
                    asset_out,
                    amount_out,
                    signed.message.encode("utf-8"),
                    encoding.b58decode(signed.quote_hash),
                    keys.parse_signature(signed.signed_data["signature"]),
                )
            )
        return out


# ---------------------------------------------------------------------------- stages


def _suffix() -> bytes:
    recipient = CONTRACT.encode("utf-8")
    return struct.pack("<I", len(recipient)) + recipient + b"\x00"


def old_digest(raw: bytes, nonce_bytes: bytes, suffix: bytes) -> bytes:
    """The preimage and sha256 as the base commit's ``QuoteSigner.sign`` has them inline."""
    return hashlib.sha256(
        NEP413_TAG + struct.pack("<I", len(raw)) + raw + nonce_bytes + suffix
    ).digest()


_HEAD = struct.Struct("<II").pack
_TAG = struct.unpack("<I", NEP413_TAG)[0]


def new_digest(raw: bytes, nonce_bytes: bytes, suffix: bytes) -> bytes:
    """The preimage and sha256 as this tree's ``QuoteSigner.sign`` has them inline."""
    return hashlib.sha256(b"".join((_HEAD(_TAG, len(raw)), raw, nonce_bytes, suffix))).digest()


def _pairs_for(alphabet: str) -> list[str]:
    return [a + b for a in alphabet for b in alphabet]


_B58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
_PAIRS = _pairs_for(_B58)


def b58_python_quads(data: bytes) -> str:
    """The fastest pure-Python base58 found (four digits per step; issue 29's first commit)."""
    number = int.from_bytes(data, "big")
    pairs = _PAIRS
    digits: list[str] = []
    add = digits.append
    while number:
        chunk = number % 11316496
        number //= 11316496
        add(pairs[chunk % 3364])
        add(pairs[chunk // 3364])
    text = "".join(digits[::-1]).lstrip("1")
    if data[:1] != b"\0":
        return text
    return "1" * (len(data) - len(data.lstrip(b"\0"))) + text


def _gmpy2_str_translate() -> Callable[[bytes], str]:
    import gmpy2

    table = str.maketrans("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuv", _B58)
    mpz = gmpy2.mpz

    def encode(data: bytes) -> str:
        text: str = mpz(int.from_bytes(data, "big")).digits(58).translate(table)
        return text

    return encode


def _based58() -> Callable[[bytes], str] | None:
    try:
        import based58  # type: ignore[import-not-found]
    except ImportError:
        return None

    def encode(data: bytes) -> str:
        text: str = based58.b58encode(data).decode("ascii")
        return text

    return encode


def stages(base: dict[str, ModuleType]) -> dict[str, tuple[Stage, Stage]]:
    """Each stage as (old, new): a function that does it once per quote of a batch."""
    old_qs: Any = base["quote_signing"]
    old_enc: Any = base["encoding"]
    old_intents: Any = base["intents"]
    old_nonce: Any = base["nonce"]
    old_key: Any = base["keys"].SecretKey(SEED)
    old_signer: Any = old_qs.QuoteSigner(old_key, SIGNER_ID, CONTRACT)
    new_key = keys.SecretKey(SEED)
    new_signer = quote_signing.QuoteSigner(new_key, SIGNER_ID, CONTRACT)
    tail = quote_signing._tail(SIGNER_ID)
    suffix = _suffix()
    salt = bytes.fromhex("252812b3")
    old_nonces = old_nonce.QuoteNonces("salted", old_nonce.NonceSequence(bytes(7)))
    new_nonces = nonce.QuoteNonces("salted", nonce.NonceSequence(bytes(7)))

    def deadline(fn: Callable[[datetime], str]) -> Stage:
        def run(batch: Sequence[Quote]) -> None:
            for q in batch:
                fn(q.deadline)

        return run

    def old_message(batch: Sequence[Quote]) -> None:
        message = old_qs.token_diff_message
        for q in batch:
            message(SIGNER_ID, q.deadline, q.asset_in, q.amount_in, q.asset_out, q.amount_out)

    def new_message(batch: Sequence[Quote]) -> None:
        # What QuoteSigner.sign does: the template with the signer's tail made once.
        message, text = quote_signing._message, intents.format_deadline
        for q in batch:
            message(text(q.deadline), q.asset_in, q.amount_in, q.asset_out, q.amount_out, tail)

    def digest(fn: Callable[[bytes, bytes, bytes], bytes]) -> Stage:
        def run(batch: Sequence[Quote]) -> None:
            for q in batch:
                fn(q.raw, q.nonce, suffix)

        return run

    def ed25519(sign: Callable[[bytes], bytes]) -> Stage:
        def run(batch: Sequence[Quote]) -> None:
            for q in batch:
                sign(q.digest)

        return run

    def b58(fn: Callable[[bytes], str], field: str) -> Stage:
        def run(batch: Sequence[Quote]) -> None:
            for q in batch:
                fn(q.signature if field == "signature" else q.digest)

        return run

    def b64(fn: Callable[[bytes], str]) -> Stage:
        def run(batch: Sequence[Quote]) -> None:
            for q in batch:
                fn(q.nonce)

        return run

    def quote_nonce(source: Any) -> Stage:
        def run(batch: Sequence[Quote]) -> None:
            take = source.next
            for q in batch:
                take(salt, q.deadline)

        return run

    def salted(fn: Callable[[bytes], bytes]) -> Stage:
        def run(batch: Sequence[Quote]) -> None:
            for _ in batch:
                fn(salt)

        return run

    def sign(signer: Any) -> Stage:
        def run(batch: Sequence[Quote]) -> None:
            fn = signer.sign
            for q in batch:
                fn(
                    deadline=q.deadline,
                    nonce=q.nonce,
                    asset_in=q.asset_in,
                    amount_in=q.amount_in,
                    asset_out=q.asset_out,
                    amount_out=q.amount_out,
                )

        return run

    def empty(batch: Sequence[Quote]) -> None:
        for q in batch:
            len(q.raw)

    return {
        "empty loop (a len() per quote)": (empty, empty),
        "deadline text (format_deadline)": (
            deadline(old_intents.format_deadline),
            deadline(intents.format_deadline),
        ),
        "message, its deadline text included": (old_message, new_message),
        "NEP-413 preimage + sha256": (digest(old_digest), digest(new_digest)),
        "ed25519 sign (SecretKey.sign)": (ed25519(old_key.sign), ed25519(new_key.sign)),
        "base58 of the 64-byte signature": (
            b58(old_enc.b58encode, "signature"),
            b58(encoding.b58encode, "signature"),
        ),
        "base58 of the 32-byte digest (quote_hash)": (
            b58(old_enc.b58encode, "digest"),
            b58(encoding.b58encode, "digest"),
        ),
        "base64 of the nonce": (b64(old_enc.b64encode), b64(encoding.b64encode)),
        "nonce: the bot's (QuoteNonces.next, registered prefix + counter)": (
            quote_nonce(old_nonces),
            quote_nonce(new_nonces),
        ),
        "nonce: salted_nonce with random bytes (the minimal solver's)": (
            salted(old_nonce.salted_nonce),
            salted(nonce.salted_nonce),
        ),
        "whole QuoteSigner.sign": (sign(old_signer), sign(new_signer)),
    }


def alternatives() -> dict[str, Stage]:
    """Other ways to do a stage, for the record (one implementation each)."""
    import base58
    from nacl._sodium import ffi, lib

    signing_key = nacl.signing.SigningKey(SEED)
    secret = SEED + bytes(signing_key.verify_key)
    system = random.SystemRandom()
    gmpy2_str = _gmpy2_str_translate()
    new, buffer, crypto_sign, null = ffi.new, ffi.buffer, lib.crypto_sign, ffi.NULL

    def on_signature(fn: Callable[[bytes], object]) -> Stage:
        def run(batch: Sequence[Quote]) -> None:
            for q in batch:
                fn(q.signature)

        return run

    def on_digest(fn: Callable[[bytes], object]) -> Stage:
        def run(batch: Sequence[Quote]) -> None:
            for q in batch:
                fn(q.digest)

        return run

    def random_bytes(fn: Callable[[int], bytes]) -> Stage:
        def run(batch: Sequence[Quote]) -> None:
            for _ in batch:
                fn(28)

        return run

    def deadline_us(batch: Sequence[Quote]) -> None:
        text = intents.format_deadline_us
        for q in batch:
            text(q.deadline_ns // 1000)

    def isoformat(batch: Sequence[Quote]) -> None:
        for q in batch:
            q.deadline.isoformat(timespec="milliseconds")

    def lib_sign(digest: bytes) -> bytes:
        out = new("unsigned char[]", 96)
        crypto_sign(out, null, digest, 32, secret)
        return buffer(out, 64)[:]  # type: ignore[no-any-return]

    found: dict[str, Stage] = {
        "base58 64 B: the base58 package": on_signature(base58.b58encode),
        "base58 64 B: pure Python, 58**4 chunks": on_signature(b58_python_quads),
        "base58 64 B: gmpy2 digits(58) + str.translate": on_signature(gmpy2_str),
        "base58 64 B: gmpy2 digits(58) + bytes.translate (this tree)": on_signature(
            encoding.b58encode
        ),
        "base58 32 B: pure Python, 58**4 chunks": on_digest(b58_python_quads),
        "ed25519: nacl.signing.SigningKey.sign": on_digest(
            lambda d: bytes(signing_key.sign(d).signature)
        ),
        "ed25519: nacl.bindings.crypto_sign(...)[:64]": on_digest(
            lambda d: nacl.bindings.crypto_sign(d, secret)[:64]
        ),
        "ed25519: libsodium crypto_sign via PyNaCl's cffi module": on_digest(lib_sign),
        "random 28 B: os.urandom": random_bytes(os.urandom),
        "random 28 B: secrets.token_bytes": random_bytes(secrets.token_bytes),
        "random 28 B: random.SystemRandom().randbytes": random_bytes(system.randbytes),
        "deadline: datetime.isoformat(timespec='milliseconds') alone": isoformat,
        "deadline: format_deadline_us (integer µs, the desk's clock)": deadline_us,
    }
    compiled = _based58()
    if compiled is not None:
        found["base58 64 B: based58 (Rust)"] = on_signature(compiled)
    return found


# ---------------------------------------------------------------------------- checks


def check_identical(base: dict[str, ModuleType], batch: Sequence[Quote]) -> int:
    """Old and new sign the same inputs to the same bytes; the preimage copies agree with the
    signers. Returns how many quotes were compared."""
    old_signer: Any = base["quote_signing"].QuoteSigner(
        base["keys"].SecretKey(SEED), SIGNER_ID, CONTRACT
    )
    new_signer = quote_signing.QuoteSigner(keys.SecretKey(SEED), SIGNER_ID, CONTRACT)
    suffix = _suffix()
    for q in batch:
        args: dict[str, Any] = {
            "deadline": q.deadline,
            "nonce": q.nonce,
            "asset_in": q.asset_in,
            "amount_in": q.amount_in,
            "asset_out": q.asset_out,
            "amount_out": q.amount_out,
        }
        old, new = old_signer.sign(**args), new_signer.sign(**args)
        if orjson.dumps(old.signed_data) != orjson.dumps(new.signed_data):
            raise AssertionError(f"signed payloads differ: {old.signed_data} / {new.signed_data}")
        if (old.quote_hash, old.message) != (new.quote_hash, new.message):
            raise AssertionError("quote hashes or messages differ")
        raw = new.message.encode("utf-8")
        if not old_digest(raw, q.nonce, suffix) == new_digest(raw, q.nonce, suffix) == q.digest:
            raise AssertionError("a preimage copy does not give the signer's digest")
        if base64.b64encode(q.nonce).decode() != encoding.b64encode(q.nonce):
            raise AssertionError("base64 differs")
    return len(batch)


# ---------------------------------------------------------------------------- timing


def _time(stage: Stage, batch: Sequence[Quote]) -> float:
    """µs of this thread's CPU per quote for one batch (time spent waiting for a core on a busy
    machine is not counted, as wall time would)."""
    start = time.thread_time_ns()
    stage(batch)
    return (time.thread_time_ns() - start) / len(batch) / 1000


def run(
    repeats: int, batch_size: int, base_rev: str, scratch: Path, progress: bool = True
) -> dict[str, Any]:
    base, sha = load_base(base_rev, scratch)
    inputs = Inputs(seed=29)
    compared = check_identical(base, inputs.batch(500))
    pairs = stages(base)
    others = alternatives()
    old_times: dict[str, list[float]] = {name: [] for name in pairs}
    new_times: dict[str, list[float]] = {name: [] for name in pairs}
    other_times: dict[str, list[float]] = {name: [] for name in others}
    load_before = os.getloadavg()
    started = time.perf_counter()
    for repeat in range(repeats):
        batch = inputs.batch(batch_size)
        gc.collect()
        gc.disable()
        try:
            for name, (old, new) in pairs.items():
                if repeat % 2:
                    new_times[name].append(_time(new, batch))
                    old_times[name].append(_time(old, batch))
                else:
                    old_times[name].append(_time(old, batch))
                    new_times[name].append(_time(new, batch))
            for name, stage in others.items():
                other_times[name].append(_time(stage, batch))
        finally:
            gc.enable()
        if progress and (repeat + 1) % max(1, repeats // 10) == 0:
            print(f"{NAME}: {repeat + 1}/{repeats} repeats", file=sys.stderr, flush=True)
    seconds = time.perf_counter() - started
    result_stages = {}
    for name in pairs:
        old_t, new_t = old_times[name], new_times[name]
        paired = sorted(n / o for n, o in zip(new_t, old_t, strict=True) if o > 0)
        old_s, new_s = summarize(old_t), summarize(new_t)
        result_stages[name] = {
            "old_us": old_s,
            "new_us": new_s,
            "ratio_new_to_old_of_medians": round(new_s["p50"] / old_s["p50"], 3),
            "paired_ratio": {
                "p10": round(quantile(paired, 0.1), 3),
                "p50": round(quantile(paired, 0.5), 3),
                "p90": round(quantile(paired, 0.9), 3),
            },
        }
    return {
        "machine": machine_info(),
        "command": "python -m benchmarks.signing_path "
        f"--repeats {repeats} --batch {batch_size} --base {base_rev}",
        "base_commit": sha,
        "repeats": repeats,
        "batch": batch_size,
        "seconds": round(seconds, 1),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "identical_signatures_checked": compared,
        "stages": result_stages,
        "alternatives_us": {name: summarize(t) for name, t in other_times.items()},
    }


# ---------------------------------------------------------------------------- report


def report(result: dict[str, Any]) -> str:
    stage_rows = []
    for name, s in result["stages"].items():
        paired = s["paired_ratio"]
        stage_rows.append(
            [
                name,
                s["old_us"]["p50"],
                s["old_us"]["p90"],
                s["new_us"]["p50"],
                s["new_us"]["p90"],
                s["ratio_new_to_old_of_medians"],
                f"{paired['p50']:.3f} ({paired['p10']:.2f}–{paired['p90']:.2f})",
            ]
        )
    alt_rows = [[name, s["p50"], s["p90"]] for name, s in result["alternatives_us"].items()]
    machine = result["machine"]
    return "\n".join(
        [
            "# Signing path, stage by stage (issue 29)",
            "",
            f"`{result['command']}` — {result['repeats']} repeats of {result['batch']} quotes, "
            f"{result['seconds']} s; old = `solver/protocol` at `{result['base_commit'][:10]}` "
            f"(a `git archive`), new = this tree (`{machine['git_commit']}`), interleaved in "
            f"one process. {machine['cpu_model']}, {machine['cpus']} CPUs, Python "
            f"{machine['python']}; load average {result['load_average_before'][0]} before, "
            f"{result['load_average_after'][0]} after (a shared machine: read the ratios). "
            f"Old and new signed {result['identical_signatures_checked']} quotes to the same "
            "bytes before the timing.",
            "",
            "µs of CPU per quote (the thread's CPU time; medians and p90 over the repeats); "
            "`new/old`: the ratio of the medians; `paired`: the median of the per-repeat "
            "ratios (p10–p90).",
            "",
            md_table(
                [
                    "stage",
                    "old p50",
                    "old p90",
                    "new p50",
                    "new p90",
                    "new/old",
                    "paired new/old (p10–p90)",
                ],
                stage_rows,
            ),
            "",
            "The message includes its deadline text; `whole QuoteSigner.sign` includes the "
            "message, preimage, ed25519, both base58, base64 and the dicts and `SignedQuote`, "
            "not the nonce (the caller's). The two nonce rows run the same code in old and "
            "new: the bot's nonces take no random bytes (a registered prefix and a counter); "
            "the minimal solver's `salted_nonce` takes 28 from `os.urandom`.",
            "",
            "## Alternatives (µs of CPU per quote, same run)",
            "",
            md_table(["way", "p50", "p90"], alt_rows),
            "",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.signing_path")
    parser.add_argument("--repeats", type=int, default=500)
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--base", default=DEFAULT_BASE, help="baseline git revision")
    parser.add_argument("--results", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    scratch = scratch_dir(args.results, NAME)
    result = run(args.repeats, args.batch, args.base, scratch)
    write_json(args.results / f"{NAME}.json", result)
    (args.results / f"{NAME}.md").write_text(report(result), encoding="utf-8")
    print(report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
