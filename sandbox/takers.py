"""Simulated takers: users who ask the bus for quotes and publish their own signed intents.

They give a running sandbox real flow for the bot to serve (DESIGN "Sandbox"), through the
public surface only: JSON-RPC ``quote`` and ``publish_intent`` at ``{relay}/rpc`` (spec 4.7,
2.13). A taker's signed ``token_diff`` is the mirror of the solver's (protocol-notes 6):
``{asset_in: -amount_in, asset_out: +amount_out}``, signed with NEP-413 (protocol-notes 1-2)
and a salted nonce with the ledger's current salt (spec 5.3).

Flow shape: arrivals are Poisson (exponential gaps), sizes lognormal in USD, pairs by weight,
direction by a coin, exact-out with probability ``exact_out_share``. Every random draw happens
in the arrival loop (:meth:`TakerPopulation.draw`), so a seed fixes the sequence of requests;
the network work of each request is its own task, so a slow bus never delays arrivals. At most
``max_in_flight`` requests run at once; an arrival beyond that is dropped and counted rather
than queued, so a stalled bus cannot grow memory without bound.

Acceptance: the best quote is taken when the reference value of what the user receives is at
least ``1 - tolerance_bps/1e4`` of the value of what it gives, at the reference prices of
:class:`~sandbox.prices.PriceProcess` at that moment.

Field names: requests and offers use the bus's ``asset_field_prefix`` (``core_…`` by default,
``defuse_…`` for the vendor spelling), so takers trade with any prefix (protocol-notes 6).

Robustness: nothing a peer sends can crash the loop; every outcome is counted by reason in
:attr:`TakerPopulation.stats`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import httpx
from pydantic import ValidationError

from sandbox.chain import SandboxChain
from sandbox.config import TakersSpec, TokenSpec
from sandbox.prices import PriceProcess, amount_to_usd, seeded_rng, to_decimal, usd_to_amount
from solver.protocol.bus import (
    PublishResult,
    PublishStatus,
    QuoteResultItem,
    rename_asset_fields,
    rpc_request,
)
from solver.protocol.intents import TokenDiff, parse_deadline
from solver.protocol.keys import SecretKey
from solver.protocol.nonce import parse_salt, salted_nonce
from solver.protocol.signing import sign_nep413

log = logging.getLogger(__name__)

USER_DEADLINE = timedelta(seconds=60)
MAX_IN_FLIGHT = 64
HTTP_MARGIN_S = 5.0  # beyond the bus's own wait, before a quote call counts as a timeout
MAX_LAG_S = 1.0  # how far the arrival schedule may fall behind a busy event loop
MAX_REASON_LEN = 80  # verifier reasons can quote keys and accounts: keep the counter bounded


@dataclass
class TakerStats:
    """Counts of every outcome. ``quotes_received`` counts requests with at least one usable
    offer; ``offers`` counts the offers themselves."""

    requests: int = 0
    quotes_received: int = 0
    offers: int = 0
    no_quote: int = 0
    rejected_price: int = 0
    insufficient_funds: int = 0
    published_ok: int = 0
    publish_failed: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)

    def as_dict(self) -> dict[str, Any]:
        return {k: dict(v) if isinstance(v, Counter) else v for k, v in vars(self).items()}


@dataclass(frozen=True, slots=True)
class TakerRequest:
    """One drawn arrival: who asks, what, and the exact side's amount in smallest units."""

    user: int
    asset_in: str
    asset_out: str
    size_usd: float
    exact_out: bool
    amount: int


class _RpcFailure(Exception):
    """A bus call that gave no usable result; ``reason`` is the counter key."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


async def _wait(stop: asyncio.Event, delay: float) -> None:
    """Sleep ``delay`` seconds or until ``stop``; always yields to the loop at least once."""
    if delay <= 0:
        await asyncio.sleep(0)
        return
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=delay)


class TakerPopulation:
    def __init__(
        self,
        spec: TakersSpec,
        tokens: dict[str, TokenSpec],
        chain: SandboxChain,
        prices: PriceProcess,
        relay_rpc_url: str,
        seed: int,
        *,
        max_in_flight: int = MAX_IN_FLIGHT,
        asset_field_prefix: str = "core",
    ) -> None:
        for pair in spec.pairs:
            if pair.base == pair.quote or not {pair.base, pair.quote} <= tokens.keys():
                raise ValueError(f"takers.pairs: {pair.base}/{pair.quote} is not a pair of tokens")
        self.spec = spec
        self.tokens = tokens
        self.chain = chain
        self.prices = prices
        self.relay_rpc_url = relay_rpc_url
        self.seed = seed
        self.max_in_flight = max_in_flight
        # The bus spells the asset fields with this prefix (``bus.asset_field_prefix``): takers
        # ask and read offers in the bus's own spelling, like any other client of that relay.
        self.asset_field_prefix = asset_field_prefix
        self.stats = TakerStats()
        self._rng = seeded_rng(seed, "takers")
        self._keys = [
            SecretKey(hashlib.sha256(f"sandbox-taker:{seed}:{i}".encode()).digest())
            for i in range(spec.count)
        ]
        self.users = [k.public_key.implicit_account_id() for k in self._keys]
        weights = [p.weight for p in spec.pairs]
        self._pair_p = [w / sum(weights) for w in weights]
        self._reserved: Counter[tuple[int, str]] = Counter()  # in-flight amount_in per user
        self._tasks: set[asyncio.Task[None]] = set()
        self._next_id = 0

    def pair_assets(self) -> list[str]:
        return sorted({a for p in self.spec.pairs for a in (p.base, p.quote)})

    def fund(self) -> None:
        """Deposit ``funding_usd`` worth of every traded token to every user (adds up if
        called twice). Implicit accounts own their key, so no key registration is needed."""
        for asset in self.pair_assets():
            amount = usd_to_amount(
                self.spec.funding_usd, self.prices.usd(asset), self.tokens[asset].decimals
            )
            for user in self.users:
                self.chain.ledger.deposit(user, asset, amount)

    def draw(self) -> TakerRequest | None:
        """The next arrival's request (all randomness is here); None when nothing trades."""
        if not self.users or not self.spec.pairs:
            return None
        rng = self._rng
        user = int(rng.integers(len(self.users)))
        pair = self.spec.pairs[int(rng.choice(len(self.spec.pairs), p=self._pair_p))]
        flip = bool(rng.random() < 0.5)
        asset_in, asset_out = (pair.quote, pair.base) if flip else (pair.base, pair.quote)
        size_usd = float(self.spec.size_usd_median * rng.lognormal(0.0, self.spec.size_usd_sigma))
        exact_out = bool(rng.random() < self.spec.exact_out_share)
        exact_asset = asset_out if exact_out else asset_in
        amount = usd_to_amount(
            size_usd, self.prices.usd(exact_asset), self.tokens[exact_asset].decimals
        )
        return TakerRequest(user, asset_in, asset_out, size_usd, exact_out, amount)

    async def run(self, stop: asyncio.Event, client: httpx.AsyncClient | None = None) -> None:
        """Poisson arrivals until ``stop``; then cancel the requests still in flight."""
        rate = self.spec.requests_per_s
        if not self.spec.enabled or rate <= 0 or not self.users or not self.spec.pairs:
            await stop.wait()
            return
        own = client is None
        http = client or httpx.AsyncClient(timeout=self.spec.wait_ms / 1000 + HTTP_MARGIN_S)
        try:
            loop = asyncio.get_running_loop()
            due = loop.time()
            while True:
                # Arrivals follow an absolute schedule, so a busy loop delays them but keeps
                # the rate; a backlog longer than MAX_LAG_S is forgotten, not replayed.
                due = max(due, loop.time() - MAX_LAG_S) + float(self._rng.exponential(1 / rate))
                await _wait(stop, due - loop.time())
                if stop.is_set():
                    break
                request = self.draw()
                if request is None:
                    continue
                self.stats.requests += 1
                if len(self._tasks) >= self.max_in_flight:
                    self.stats.errors["overloaded"] += 1
                    continue
                task = asyncio.create_task(self._guarded(request, http))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        finally:
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            if own:
                await http.aclose()

    async def _guarded(self, request: TakerRequest, client: httpx.AsyncClient) -> None:
        try:
            await self.handle(request, client)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug must not kill the population: count and log it
            self.stats.errors[f"internal:{type(exc).__name__}"] += 1
            log.exception("taker request failed")

    async def handle(self, request: TakerRequest, client: httpx.AsyncClient) -> None:
        """Quote, judge, sign and publish one request; every exit is counted once."""
        stats = self.stats
        if request.amount <= 0:
            stats.errors["zero_amount"] += 1
            return
        if not request.exact_out and not self._affordable(request, request.amount):
            stats.insufficient_funds += 1
            return
        side = "exact_amount_out" if request.exact_out else "exact_amount_in"
        params = rename_asset_fields(
            {
                "core_asset_identifier_in": request.asset_in,
                "core_asset_identifier_out": request.asset_out,
                side: str(request.amount),
                "min_deadline_ms": self.spec.min_deadline_ms,
                "wait_ms": self.spec.wait_ms,
            },
            "core",
            self.asset_field_prefix,
        )
        try:
            result = await self._call(client, "quote", params)
        except _RpcFailure as failure:
            stats.errors[f"quote:{failure.reason}"] += 1
            return
        offers = self._usable_offers(request, result)
        if not offers:
            stats.no_quote += 1
            return
        stats.quotes_received += 1
        stats.offers += len(offers)
        best = (
            min(offers, key=lambda q: q.amount_in)
            if request.exact_out
            else max(offers, key=lambda q: q.amount_out)
        )
        if not self.acceptable(best):
            stats.rejected_price += 1
            return
        if not self._affordable(request, best.amount_in):
            stats.insufficient_funds += 1
            return
        self._reserved[request.user, request.asset_in] += best.amount_in
        try:
            await self._publish(client, request.user, best)
        finally:
            self._reserved[request.user, request.asset_in] -= best.amount_in

    def acceptable(self, quote: QuoteResultItem) -> bool:
        """The taker's limit: value received >= (1 - tolerance) x value given, at reference."""
        asset_in, asset_out = quote.core_asset_identifier_in, quote.core_asset_identifier_out
        given = amount_to_usd(
            quote.amount_in, self.tokens[asset_in].decimals, self.prices.usd(asset_in)
        )
        received = amount_to_usd(
            quote.amount_out, self.tokens[asset_out].decimals, self.prices.usd(asset_out)
        )
        return received * 10_000 >= given * (10_000 - to_decimal(self.spec.tolerance_bps))

    def _affordable(self, request: TakerRequest, amount_in: int) -> bool:
        """Balance minus what this user's in-flight publishes already promised. (An intent the
        bus settles after its publish returned is not reserved: the verifier then rejects an
        overdraft, counted under ``publish_failed``.)"""
        user, asset = request.user, request.asset_in
        balance = self.chain.ledger.mt_balance_of(self.users[user], asset)
        return balance - self._reserved[user, asset] >= amount_in

    def _usable_offers(self, request: TakerRequest, result: Any) -> list[QuoteResultItem]:
        """Offers that parse and answer this very request; others are counted and dropped."""
        if not isinstance(result, list):
            self.stats.errors["quote:bad_result"] += 1
            return []
        now = self.chain.clock()
        offers = []
        for raw in result:
            try:
                if not isinstance(raw, dict):
                    raise ValueError("an offer must be an object")
                offer = QuoteResultItem.model_validate(
                    rename_asset_fields(raw, self.asset_field_prefix, "core")
                )
                expires = parse_deadline(offer.expiration_time)
            except (ValidationError, ValueError):
                self.stats.errors["quote:bad_offer"] += 1
                continue
            exact = offer.amount_out if request.exact_out else offer.amount_in
            if (
                offer.core_asset_identifier_in != request.asset_in
                or offer.core_asset_identifier_out != request.asset_out
                or exact != request.amount
                or offer.amount_in <= 0
                or offer.amount_out <= 0
            ):
                self.stats.errors["quote:mismatched_offer"] += 1
            elif expires <= now:
                self.stats.errors["quote:expired_offer"] += 1
            else:
                offers.append(offer)
        return offers

    async def _publish(self, client: httpx.AsyncClient, user: int, quote: QuoteResultItem) -> None:
        asset_in, asset_out = quote.core_asset_identifier_in, quote.core_asset_identifier_out
        diff = TokenDiff(diff={asset_in: -quote.amount_in, asset_out: quote.amount_out})
        ledger = self.chain.ledger
        signed = sign_nep413(
            self._keys[user],
            signer_id=self.users[user],
            verifying_contract=ledger.contract_id,
            deadline=self.chain.clock() + USER_DEADLINE,
            nonce=salted_nonce(parse_salt(ledger.current_salt())),
            intents=[diff],
        )
        params = {
            "quote_hashes": [quote.quote_hash],
            "signed_data": signed.model_dump(mode="json", exclude_none=True),
        }
        try:
            result = PublishResult.model_validate(
                await self._call(client, "publish_intent", params)
            )
        except _RpcFailure as failure:
            self.stats.errors[f"publish:{failure.reason}"] += 1
            return
        except ValidationError:
            self.stats.errors["publish:bad_result"] += 1
            return
        if result.status is PublishStatus.OK:
            self.stats.published_ok += 1
        else:
            self.stats.publish_failed[(result.reason or "unknown")[:MAX_REASON_LEN]] += 1

    async def _call(self, client: httpx.AsyncClient, method: str, params: Any) -> Any:
        """One JSON-RPC call (spec 4.7); any failure becomes a :class:`_RpcFailure`."""
        self._next_id += 1
        try:
            response = await client.post(
                self.relay_rpc_url, json=rpc_request(method, params, self._next_id)
            )
        except httpx.TimeoutException:
            raise _RpcFailure("timeout") from None
        except httpx.HTTPError as exc:
            raise _RpcFailure(f"network:{type(exc).__name__}") from None
        if response.status_code != 200:
            raise _RpcFailure(f"http_{response.status_code}")
        try:
            body = response.json()
        except ValueError:
            raise _RpcFailure("bad_json") from None
        if isinstance(body, dict) and "error" in body:
            code = body["error"].get("code") if isinstance(body["error"], dict) else None
            raise _RpcFailure(f"rpc_error_{code}" if isinstance(code, int) else "rpc_error")
        if not isinstance(body, dict) or "result" not in body:
            raise _RpcFailure("bad_envelope")
        return body["result"]
