"""``solver signer serve``: the key in its own process, behind the policy (issue 28).

One asyncio loop. Each connection's batches are handled in the order they come: the policy is
checked for every request of a batch on the loop (so the hourly book has one writer), the
digests are signed (inline with a key file; on a worker thread with a token, since
python-pkcs11 releases the GIL while the token signs), the batch's audit lines are
written, and one answer frame leaves. A refusal is answered with its rule, logged at ERROR (the
operators' alerting watches the signer's log, not the bot's: the bot may be the attacker), and
counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from solver.errors import SolverError
from solver.protocol.encoding import b58encode, b64decode
from solver.protocol.quote_signing import token_diff_message
from solver.protocol.signing import nep413_digest
from solver.signer.audit import AuditLog
from solver.signer.config import SignerConfig, read_pin
from solver.signer.keys import FileKeyHolder, KeyHolder
from solver.signer.policy import PolicyGuard, Refusal
from solver.signer.wire import frame, read_frame, refused

log = logging.getLogger("solver.signer")
EXPIRED = "expired"
"""Not a policy refusal: the bot had given up on the batch before it was signed."""
INLINE_MAX = 8
"""Token batches up to this size are signed on the loop (~0.3 ms each), larger ones on the
worker thread: measured paced at 500/s on a loaded 2-core machine, one thread hop per batch
made single requests wait ~12 ms at the median."""


def open_key(config: SignerConfig) -> KeyHolder:
    """The key holder the YAML names; errors name the source, never the secret."""
    key = config.key
    if key.pkcs11 is not None:
        from solver.signer.hsm import TokenKeyHolder

        spec = key.pkcs11
        return TokenKeyHolder(str(spec.module), spec.token_label, spec.key_label, read_pin(spec))
    from solver.config.secrets import redact
    from solver.errors import ConfigError
    from solver.io.key_files import load_secret_key

    where = "key.key_env" if key.key_env is not None else "key.key_file"
    try:
        secret = load_secret_key(env=key.key_env, path=key.key_file)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {redact(str(exc))}") from None
    return FileKeyHolder(secret)


class SigningService:
    """The signer without its socket: a batch of requests in, answers out (in order)."""

    def __init__(self, config: SignerConfig, holder: KeyHolder, audit: AuditLog) -> None:
        self.config = config
        self.holder = holder
        self.audit = audit
        self.guard = PolicyGuard(
            config.policy, account=config.account, verifier=config.verifier_contract
        )
        self.public_key = holder.public_key.to_text()
        self.counts: Counter[str] = Counter()
        self._logged: dict[str, float] = {}
        self._pool = None if holder.inline else ThreadPoolExecutor(1, thread_name_prefix="sign")

    def hello(self) -> dict[str, Any]:
        return {
            "account": self.config.account,
            "verifier": self.config.verifier_contract,
            "public_key": self.public_key,
        }

    def _check(self, request: Any, now: datetime) -> tuple[bytes, dict[str, Any]] | Refusal:
        """The digest to sign and its audit entry, or why not."""
        kind = request.get("k") if isinstance(request, dict) else None
        try:
            if kind == "q":
                nonce = b64decode(request["n"])
                deadline = datetime.fromisoformat(request["d"])
                amount_in, amount_out = int(request["a"]), int(request["b"])
                refusal = self.guard.check_quote(
                    recipient=request["r"],
                    nonce=nonce,
                    deadline=deadline,
                    asset_out=request["ao"],
                    amount_out=amount_out,
                    amount_in=amount_in,
                    now=now,
                )
                if refusal is not None:
                    return refusal
                message = token_diff_message(
                    self.config.account,
                    deadline,
                    request["ai"],
                    amount_in,
                    request["ao"],
                    amount_out,
                )
                digest = nep413_digest(message, nonce, request["r"])
                entry = {"quote_id": request.get("q"), "deadline": request["d"]}
                entry["out"] = {request["ao"]: str(amount_out)}
                entry["in"] = {request["ai"]: str(amount_in)}
            elif kind == "m":
                nonce = b64decode(request["n"])
                message = request["m"]
                refusal = self.guard.check_message(
                    message=message, recipient=request["r"], nonce=nonce, now=now
                )
                if refusal is not None:
                    return refusal
                digest = nep413_digest(message, nonce, request["r"])
                entry = {"message": message}
            else:
                return Refusal("request", f"unknown request kind {kind!r}")
        except (KeyError, TypeError, ValueError, SolverError) as exc:
            return Refusal("request", f"malformed request: {type(exc).__name__}")
        entry["nonce"] = request["n"]
        return digest, entry

    async def handle(
        self, requests: list[Any], expires: float | None = None
    ) -> list[dict[str, Any]]:
        """Answers to ``requests``, in their order. ``expires``: when the bot gives up on the
        batch (its ``signer.timeout_ms``, epoch seconds): what is not signed by then is not
        signed at all (``expired``), so a signer that fell behind catches up instead of
        signing answers nobody will send."""
        now = datetime.now(UTC)
        at = now.isoformat(timespec="milliseconds")
        if expires is not None and now.timestamp() > expires:
            self.counts["expired"] += len(requests)
            return [refused(EXPIRED, "the bot gave up on this batch") for _ in requests]
        answers: list[dict[str, Any]] = [{} for _ in requests]
        jobs: list[tuple[int, bytes, dict[str, Any]]] = []
        for index, request in enumerate(requests):
            if isinstance(request, dict) and request.get("k") in ("hello", "stats"):
                answers[index] = self.hello() if request["k"] == "hello" else self.stats()
                continue
            checked = self._check(request, now)
            if isinstance(checked, Refusal):
                self.counts["refused_" + checked.rule] += 1
                what = request.get("q") if isinstance(request, dict) else None
                if self._log_refusal(checked.rule, now.timestamp()):
                    log.error("refused (%s): %s [quote %s]", checked.rule, checked.detail, what)
                self.audit.add(
                    {"at": at, "refused": checked.rule, "detail": checked.detail, "quote_id": what}
                )
                answers[index] = refused(checked.rule, checked.detail)
            else:
                jobs.append((index, *checked))
        signatures = await self._sign([digest for _, digest, _ in jobs], expires)
        for (index, digest, entry), signature in zip(jobs, signatures, strict=True):
            if signature == b"":
                self.counts["expired"] += 1
                answers[index] = refused(EXPIRED, "the bot gave up on this batch")
                continue
            if signature is None:
                self.counts["failed"] += 1
                answers[index] = refused("signer_error", "the key holder failed to sign")
                continue
            self.counts["signed"] += 1
            entry["at"] = at
            entry["hash"] = b58encode(digest)
            self.audit.add(entry)
            answers[index] = {"s": b58encode(signature)}
        self.audit.flush()  # the record precedes the answer
        return answers

    async def _sign(self, digests: list[bytes], expires: float | None = None) -> list[bytes | None]:
        """Inline (a key file; a token's small batch: a thread hop costs more than a few
        signatures on a loaded machine), else the batch on the worker thread. ``b""``: not
        signed, the batch expired meanwhile; None: the key holder failed."""
        if self._pool is None or len(digests) <= INLINE_MAX:
            return self._sign_many(digests, expires)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self._sign_many, digests, expires)

    def _sign_many(self, digests: list[bytes], expires: float | None) -> list[bytes | None]:
        out: list[bytes | None] = []
        for index, digest in enumerate(digests):
            if expires is not None and index % 8 == 0 and time.time() > expires:
                return out + [b""] * (len(digests) - index)
            out.append(self._sign_one(digest))
        return out

    def _sign_one(self, digest: bytes) -> bytes | None:
        try:
            return self.holder.sign(digest)
        except SolverError as exc:
            log.error("the key holder failed to sign: %s", exc)
            return None

    def _log_refusal(self, rule: str, now_s: float) -> bool:
        """At most one ERROR line a second per rule (a cap reached refuses every quote); the
        audit log and the counts keep every refusal."""
        if now_s - self._logged.get(rule, 0.0) < 1.0:
            return False
        self._logged[rule] = now_s
        return True

    def stats(self) -> dict[str, Any]:
        return {"counts": dict(self.counts), "public_key": self.public_key}

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        self.audit.close()
        self.holder.close()


async def _connection(
    service: SigningService, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    try:
        while True:
            try:
                body = await read_frame(reader)
            except SolverError:
                return
            requests = body.get("b") if isinstance(body, dict) else None
            if not isinstance(requests, list):
                return
            expires = body.get("x")
            expires = float(expires) if isinstance(expires, int | float) else None
            writer.write(frame({"b": await service.handle(requests, expires)}))
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


async def _refresh_salts(service: SigningService, config: SignerConfig) -> None:
    """The ledger's current salt, periodically: the nonce rule accepts it and the one before
    (an old salt stays valid until the verifier invalidates it, and the bot's may lag)."""
    from solver.io.ledger_client import LedgerClient

    assert config.chain_rpc_url is not None
    seen: list[bytes] = []
    failing = False
    async with LedgerClient(config.chain_rpc_url, config.verifier_contract) as ledger:
        while True:
            try:
                salt = await ledger.current_salt()
            except SolverError as exc:
                if not failing:
                    log.warning("cannot read the current salt: %s", exc)
                failing = True
            else:
                failing = False
                if not seen or seen[-1] != salt:
                    seen = [*seen[-1:], salt]
                    service.guard.set_salts(frozenset(seen))
            await asyncio.sleep(config.salt_refresh_ms / 1000)


def _listen_path(path: Path) -> None:
    """Remove a stale socket left by a previous run (never another kind of file)."""
    if path.is_socket():
        path.unlink()
    elif path.exists():
        from solver.errors import ConfigError

        raise ConfigError(f"socket: {path} exists and is not a socket")
    path.parent.mkdir(parents=True, exist_ok=True)


async def serve(config: SignerConfig, *, ready: asyncio.Event | None = None) -> None:
    """Run until SIGTERM or SIGINT."""
    holder = open_key(config)
    service = SigningService(config, holder, AuditLog(config.audit_log))
    _listen_path(config.socket)
    old_umask = os.umask(0o177)  # the socket is owner-only from its creation
    try:
        server = await asyncio.start_unix_server(
            lambda r, w: _connection(service, r, w), path=str(config.socket)
        )
    finally:
        os.umask(old_umask)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    salts = None
    if config.chain_rpc_url is not None:
        salts = asyncio.create_task(_refresh_salts(service, config))
    else:
        log.warning("no chain_rpc_url: the nonce salt rule is not enforced")
    log.info(
        "signer for %s (%s) listening on %s", config.account, service.public_key, config.socket
    )
    if ready is not None:
        ready.set()
    print(f"signer ready {service.public_key} {config.socket}", flush=True)
    try:
        await stop.wait()
    finally:
        server.close()
        if salts is not None:
            salts.cancel()
        with contextlib.suppress(Exception):
            config.socket.unlink()
        service.close()
        log.info("signer stopped: %s", dict(service.counts))
