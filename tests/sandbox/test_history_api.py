"""The history API on loopback (spec 2.7, 2.9, 4.3–4.5, 5.1.4, 8, 9.2): auth, both pagination
styles (cursor walks in both directions = page walk = total), every filter alone and combined
against a reference implementation of the documented rules, masking, limits and errors.

Records are seeded straight into the store (the swap flow is covered elsewhere) except one real
swap that must show up with every field of 2.7."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import pytest_asyncio

from sandbox.swap.store import SwapRecord
from solver.protocol.history import HistoryPage, TransactionRecord
from solver.protocol.swap import SwapStatus, SwapType, format_timestamp, from_wire
from tests.sandbox.scripted import NEAR, USDC
from tests.sandbox.test_swap_harness import E24, SwapWorld, swap_config, swap_world

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
STATUSES = [s for s in SwapStatus if s is not SwapStatus.KNOWN_DEPOSIT_TX]
DEFAULT = {"FAILED", "PROCESSING", "REFUNDED", "SUCCESS"}
CHAIN = {NEAR: "near", USDC: "eth"}


def make_record(i: int, created: datetime | None = None) -> SwapRecord:
    """Record ``i`` of a varied population: statuses, assets, referrals, fees, memos, USD."""
    status = STATUSES[i % len(STATUSES)]
    origin, dest = (NEAR, USDC) if i % 3 else (USDC, NEAR)
    memo = str(1_000_000_000 + i) if i % 5 == 0 else None
    address = "memo.swap.sandbox" if memo else f"{i:064x}"
    referral = [None, "partner", "test-bot", "other"][i % 4]
    settled = status is SwapStatus.SUCCESS
    refunded = status in (SwapStatus.REFUNDED, SwapStatus.FAILED)
    out = 0 if refunded and i % 7 else 100 + i
    moment = created or T0 + timedelta(milliseconds=1000 * (i // 2))  # pairs share a ms
    return SwapRecord(
        correlation_id=f"cid-{i}",
        created_at=moment,
        updated_at=moment,
        status=status,
        deposit_address=address,
        deposit_memo=memo,
        deposit_account=f"{i:064x}",
        timestamp_text=format_timestamp(moment),
        quote_response={"correlationId": f"cid-{i}"},
        swap_type=SwapType.EXACT_INPUT,
        origin_asset=origin,
        destination_asset=dest,
        deposit_type="ORIGIN_CHAIN",
        recipient="qa.near" if i % 11 == 0 else ["bob.near", "carol.near"][i % 2],
        recipient_type="INTENTS",
        refund_to="alice.near",
        refund_type="INTENTS",
        deadline=moment + timedelta(hours=1),
        time_when_inactive=moment + timedelta(minutes=1),
        referral=referral,
        app_fees=[{"recipient": "aff.near", "fee": 10}] if i % 4 == 1 else [],
        terms={"amount_in": 1000, "amount_out": 3000},
        usd_in=str(i * 10),
        usd_out=str(i * 10 - (i % 3)),
        senders=["dave.near"] if i % 6 == 3 else [],
        deposit_tx_hashes=[f"tx-{i}"],
        amount_in_actual=1000 if settled or refunded else None,
        amount_out_actual=out if settled or refunded else None,
    )


@dataclass
class Seeded:
    world: SwapWorld
    records: list[SwapRecord]

    def expected(self, params: dict[str, str]) -> list[str]:
        """Reference filter (docs/swap-api.md), newest first, as correlation ids."""
        keep = [r for r in self.records if _matches(r, params)]
        keep.sort(key=lambda r: (r.created_at, int(r.correlation_id[4:])), reverse=True)
        return [r.correlation_id for r in keep]


def _matches(r: SwapRecord, p: dict[str, str]) -> bool:
    statuses = set(p.get("statuses", ",".join(sorted(DEFAULT))).split(","))
    if r.status.value not in statuses:
        return False
    to_token = p.get("toTokenId")
    from_token = None if to_token else p.get("fromTokenId")
    from_chain = None if "fromTokenId" in p else p.get("fromChainId")
    to_chain = None if to_token else p.get("toChainId")
    checks: list[tuple[str | None, Callable[[str], bool]]] = [
        (from_chain, lambda v: CHAIN[r.origin_asset] == v),
        (from_token, lambda v: r.origin_asset == v),
        (to_chain, lambda v: CHAIN[r.destination_asset] == v),
        (to_token, lambda v: r.destination_asset == v),
        (p.get("referral"), lambda v: r.referral == v),
        (p.get("affiliate"), lambda v: any(f["recipient"] == v for f in r.app_fees)),
        (p.get("minUsdPrice"), lambda v: min(float(r.usd_in), float(r.usd_out)) >= float(v)),
        (p.get("maxUsdPrice"), lambda v: max(float(r.usd_in), float(r.usd_out)) <= float(v)),
        (p.get("depositMemo"), lambda v: r.deposit_memo == v),
        (p.get("startTimestampUnix"), lambda v: r.created_at.timestamp() > float(v)),
        (p.get("endTimestampUnix"), lambda v: r.created_at.timestamp() < float(v)),
        (p.get("startTimestamp"), lambda v: r.created_at > datetime.fromisoformat(v)),
        (p.get("endTimestamp"), lambda v: r.created_at < datetime.fromisoformat(v)),
    ]
    for value, check in checks:
        if value is not None and not check(value):
            return False
    search = p.get("search")
    terms = {r.deposit_address, r.recipient, *r.senders, *r.deposit_tx_hashes}
    if search is not None and search not in terms:
        return False
    test = (r.referral or "").startswith("test") or "qa.near" in {r.recipient, *r.senders}
    if test and p.get("showTestTxs") != "true":
        return False
    filtered = {"fromChainId", "fromTokenId", "toChainId", "toTokenId", "referral", "affiliate"}
    masking = r.status.value in ("REFUNDED", "FAILED") and not r.amount_out_actual
    return not (masking and filtered.union({"minUsdPrice", "maxUsdPrice"}) & set(p))


pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def seeded() -> AsyncIterator[Seeded]:
    """One sandbox for the module: the filter tests only read."""
    config = swap_config(chains={USDC: "eth"}, test_accounts=["qa.near"])
    async with swap_world(config) as w:
        records = [make_record(i) for i in range(80)]
        for record in records:
            w.sb.swap.store.save(record)
        yield Seeded(w, records)


async def pages(s: Seeded, params: dict[str, str]) -> Any:
    w = s.world
    return await w.client.get(w.api + "/api/v0/transactions-pages", params=params, headers=w.auth)


async def cursor(s: Seeded, params: dict[str, str]) -> Any:
    w = s.world
    return await w.client.get(w.api + "/api/v0/transactions", params=params, headers=w.auth)


def ids(records: list[dict[str, Any]]) -> list[str]:
    return [f"{r['depositAddress']}_{r['depositMemo']}" for r in records]


def key_of(record: SwapRecord) -> str:
    return f"{record.deposit_address}_{record.deposit_memo}"


async def page_ids(s: Seeded, params: dict[str, str]) -> list[str]:
    response = await pages(s, {**params, "perPage": "1000"})
    assert response.status_code == 200, response.text
    body = from_wire(HistoryPage, response.json())
    assert body.total == len(body.data)
    return ids(response.json()["data"])


def expected_keys(s: Seeded, params: dict[str, str]) -> list[str]:
    by_id = {r.correlation_id: r for r in s.records}
    return [key_of(by_id[c]) for c in s.expected(params)]


# ---------------------------------------------------------------------------------- auth


async def test_both_endpoints_need_a_valid_token(seeded: Seeded) -> None:
    w = seeded.world
    expired = w.sb.swap.keys.issue_token("old", ttl_s=-60)
    for path in ("/api/v0/transactions", "/api/v0/transactions-pages"):
        for headers in ({}, {"Authorization": "Bearer x"}, {"Authorization": f"Bearer {expired}"}):
            response = await w.client.get(w.api + path, headers=headers)
            assert response.status_code == 401 and response.json()["error"] == "UNAUTHORIZED"


# ---------------------------------------------------------------------------------- pagination


@pytest.mark.parametrize(
    "params", [{}, {"statuses": "SUCCESS,PENDING_DEPOSIT"}, {"referral": "partner"}]
)
async def test_cursor_walks_both_ways_equal_the_page_walk_and_total(
    seeded: Seeded, params: dict[str, str]
) -> None:
    per = 7
    walked_pages: list[str] = []
    total = None
    for page in itertools.count(1):
        body = (await pages(seeded, {**params, "page": str(page), "perPage": str(per)})).json()
        total = body["total"]
        assert body["prevPage"] == (page - 1 if page > 1 else None)
        walked_pages += ids(body["data"])
        if body["nextPage"] is None:
            assert body["totalPages"] == page or total == 0
            break
    forward: list[str] = []
    query = {**params, "numberOfTransactions": str(per)}
    batch = (await cursor(seeded, query)).json()
    while batch:
        forward += ids(batch)
        last = batch[-1]
        after = {"lastDepositAddress": last["depositAddress"]}
        if last["depositMemo"] is not None:
            after["lastDepositMemo"] = last["depositMemo"]
        batch = (await cursor(seeded, {**query, **after})).json()
    backward: list[str] = []
    oldest = forward[-1] if forward else None
    while oldest is not None:
        address, memo = oldest.split("_")
        before = {"lastDepositAddress": address, "direction": "prev"}
        if memo != "None":
            before["lastDepositMemo"] = memo
        batch = (await cursor(seeded, {**query, **before})).json()
        backward = ids(batch) + backward
        oldest = ids(batch)[0] if batch else None
    assert forward == walked_pages == expected_keys(seeded, params)
    assert backward == forward[:-1] and len(forward) == total


async def test_deprecated_joined_cursor_and_field(seeded: Seeded) -> None:
    first = (await cursor(seeded, {"numberOfTransactions": "3"})).json()
    memo_records = [r for r in first if r["depositMemo"] is not None]
    assert all(
        r["depositAddressAndMemo"]
        == (
            f"{r['depositAddress']}_{r['depositMemo']}" if r["depositMemo"] else r["depositAddress"]
        )
        for r in first
    )
    joined = first[-1]["depositAddressAndMemo"]
    old = (
        await cursor(seeded, {"numberOfTransactions": "3", "lastDepositAddressAndMemo": joined})
    ).json()
    address = {"lastDepositAddress": first[-1]["depositAddress"]}
    if first[-1]["depositMemo"]:
        address["lastDepositMemo"] = first[-1]["depositMemo"]
    new = (await cursor(seeded, {"numberOfTransactions": "3", **address})).json()
    assert ids(old) == ids(new) and old
    assert memo_records or any(r["depositMemo"] for r in new + old)


async def test_page_past_the_end_is_empty(seeded: Seeded) -> None:
    body = (await pages(seeded, {"page": "99", "perPage": "10"})).json()
    assert body["data"] == [] and body["nextPage"] is None and body["prevPage"] == 98
    assert body["page"] == 99 and body["totalPages"] == -(-body["total"] // 10)


# ---------------------------------------------------------------------------------- filters

BOUNDARY = T0 + timedelta(milliseconds=4000)  # records 8 (PROCESSING) and 9 (SUCCESS)
SINGLE_FILTERS: list[dict[str, str]] = [
    {"search": f"{9:064x}"},
    {"search": "carol.near"},
    {"search": "dave.near"},
    {"search": "tx-15"},
    {"search": "memo.swap.sandbox", "depositMemo": str(1_000_000_015)},
    {"depositMemo": str(1_000_000_020)},
    {"fromChainId": "near"},
    {"fromChainId": "eth"},
    {"fromTokenId": USDC},
    {"fromTokenId": USDC, "fromChainId": "near"},
    {"toChainId": "eth"},
    {"toTokenId": NEAR},
    {"toTokenId": NEAR, "toChainId": "eth", "fromTokenId": NEAR},
    {"toTokenId": USDC, "fromChainId": "near"},
    {"referral": "partner"},
    {"referral": "test-bot", "showTestTxs": "true"},
    {"affiliate": "aff.near"},
    {"statuses": "PENDING_DEPOSIT"},
    {"statuses": "INCOMPLETE_DEPOSIT,REFUNDED"},
    {"statuses": ",".join(s.value for s in STATUSES)},
    {"showTestTxs": "true"},
    {"showTestTxs": "false"},
    {"minUsdPrice": "0"},
    {"minUsdPrice": "300"},
    {"maxUsdPrice": "300.5"},
    {"minUsdPrice": "100", "maxUsdPrice": "200"},
    {"startTimestamp": format_timestamp(BOUNDARY)},
    {"endTimestamp": format_timestamp(BOUNDARY)},
    {"startTimestampUnix": str(BOUNDARY.timestamp())},
    {"endTimestampUnix": str(BOUNDARY.timestamp())},
    {"startTimestampUnix": str(BOUNDARY.timestamp() - 0.001)},
    {"endTimestampUnix": str(BOUNDARY.timestamp() + 0.001)},
    {"startTimestamp": format_timestamp(T0), "endTimestamp": format_timestamp(BOUNDARY)},
]


@pytest.mark.parametrize(
    "params", SINGLE_FILTERS, ids=lambda p: "&".join(f"{k}={v}" for k, v in p.items())
)
async def test_each_filter_alone(seeded: Seeded, params: dict[str, str]) -> None:
    expected = expected_keys(seeded, params)
    assert expected  # every case selects something, so a filter ignored would show
    assert await page_ids(seeded, params) == expected
    listing = (await cursor(seeded, {**params, "numberOfTransactions": "1000"})).json()
    assert ids(listing) == expected


async def test_time_bounds_are_exclusive(seeded: Seeded) -> None:
    at = {"startTimestamp": format_timestamp(BOUNDARY)}
    before = {"startTimestamp": format_timestamp(BOUNDARY - timedelta(milliseconds=1))}
    boundary = {key_of(r) for r in seeded.records if r.correlation_id in ("cid-8", "cid-9")}
    assert not boundary & set(await page_ids(seeded, at))
    assert boundary <= set(await page_ids(seeded, before))
    end = {"endTimestampUnix": str(BOUNDARY.timestamp())}
    later = {"endTimestampUnix": str(BOUNDARY.timestamp() + 0.001)}
    assert not boundary & set(await page_ids(seeded, end))
    assert boundary <= set(await page_ids(seeded, later))


async def test_filters_combined(seeded: Seeded) -> None:
    combos = 0
    for a, b in itertools.combinations(SINGLE_FILTERS[::2], 2):
        if set(a) & set(b):
            continue
        params = {**a, **b}
        assert await page_ids(seeded, params) == expected_keys(seeded, params), params
        combos += 1
    assert combos > 50


async def test_asset_and_usd_filters_hide_masking_transactions(seeded: Seeded) -> None:
    everything = ",".join(s.value for s in STATUSES)
    masking = [
        key_of(r)
        for r in seeded.records
        if r.status.value in ("REFUNDED", "FAILED") and not r.amount_out_actual
    ]
    unfiltered = await page_ids(seeded, {"statuses": everything, "showTestTxs": "true"})
    assert set(masking) <= set(unfiltered)
    for extra in ({"fromChainId": "near"}, {"minUsdPrice": "0"}, {"referral": "partner"}):
        listed = await page_ids(seeded, {"statuses": everything, "showTestTxs": "true", **extra})
        assert not set(masking) & set(listed)


# ---------------------------------------------------------------------------------- limits and errors


async def test_limits_at_0_1_1000_1001() -> None:
    async with swap_world() as w:
        for i in range(1001):
            record = make_record(i * len(STATUSES) + 4)  # all SUCCESS
            w.sb.swap.store.save(
                record.model_copy(update={"referral": None, "recipient": "b.near"})
            )
        for value, ok in (("0", False), ("1", True), ("1000", True), ("1001", False)):
            got = await w.client.get(
                w.api + "/api/v0/transactions",
                params={"numberOfTransactions": value},
                headers=w.auth,
            )
            page = await w.client.get(
                w.api + "/api/v0/transactions-pages", params={"perPage": value}, headers=w.auth
            )
            if ok:
                assert len(got.json()) == int(value) and len(page.json()["data"]) == int(value)
                assert page.json()["total"] == 1001
                assert page.json()["totalPages"] == -(-1001 // int(value))
            else:
                assert got.status_code == page.status_code == 400
                assert got.json()["field"] == "numberOfTransactions"
                assert page.json()["field"] == "perPage"
        for value, status in (("0", 400), ("1", 200), ("1000", 200), ("1001", 200)):
            page = await w.client.get(
                w.api + "/api/v0/transactions-pages", params={"page": value}, headers=w.auth
            )
            assert page.status_code == status, value


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"page": "0"}, "page"),
        ({"page": "x"}, "page"),
        ({"minUsdPrice": "-1"}, "minUsdPrice"),
        ({"maxUsdPrice": "-0.5"}, "maxUsdPrice"),
        ({"fromChainId": "mars"}, "fromChainId"),
        ({"statuses": "SUCCESS,NOPE"}, "statuses"),
        ({"statuses": "KNOWN_DEPOSIT_TX"}, "statuses"),
        ({"startTimestamp": "yesterday"}, "startTimestamp"),
        ({"endTimestamp": "2026-01-01T00:00:00"}, "endTimestamp"),
        ({"colour": "red"}, "colour"),
    ],
)
async def test_bad_parameters_are_400(seeded: Seeded, params: dict[str, str], field: str) -> None:
    response = await pages(seeded, params)
    assert response.status_code == 400, response.text
    assert response.json()["error"] == "BAD_PARAMETER" and response.json()["field"] == field


async def test_page_one_and_cursor_errors(seeded: Seeded) -> None:
    assert (await pages(seeded, {"page": "1"})).status_code == 200
    for params in (
        {"direction": "sideways"},
        {"lastDepositAddress": "nobody.near"},
        {"lastDepositMemo": "5"},
        {"lastDepositAddressAndMemo": "nobody.near_5"},
    ):
        assert (await cursor(seeded, params)).status_code == 400, params
    w = seeded.world
    url = w.api + "/api/v0/transactions?page=1&page=2"
    assert (await w.client.get(url, headers=w.auth)).status_code == 400


async def test_a_real_swap_is_recorded_with_every_field() -> None:
    async with swap_world() as w:
        quote = await w.ok_quote(appFees=[{"recipient": "app.near", "fee": 5}], referral="ref1")
        address = quote["quote"]["depositAddress"]
        await w.deposit(address, 2 * E24)
        await w.wait_status(address)
        body = (await w.client.get(w.api + "/api/v0/transactions", headers=w.auth)).json()
        assert len(body) == 1
        record = from_wire(TransactionRecord, body[0])
        assert record.status.value == "SUCCESS" and record.deposit_address == address
        assert record.amount_in == 2 * E24 and record.amount_out == int(quote["quote"]["amountOut"])
        assert body[0]["appFees"] == [{"recipient": "app.near", "fee": 5}]
        assert body[0]["referral"] == "ref1" and body[0]["intentHashes"].count(",") == 1
        assert body[0]["createdAt"] == quote["timestamp"]
        assert body[0]["refundFeeFormatted"] is None and "refundReason" not in body[0]
        assert body[0]["originChainTxHashes"] and body[0]["nearTxHashes"]
