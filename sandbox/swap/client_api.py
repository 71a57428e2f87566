"""What the official 1Click client asks of the swap API beyond the spec (docs/sandbox.md,
"Using other clients with the sandbox"; spec 2.1, 4.1 for the quote itself).

The official TypeScript client (``@defuse-protocol/one-click-sdk-typescript``) is generated from
the deployed API's OpenAPI document. A wallet's first call is ``GET /v0/tokens``; ANY_INPUT
integrations list payouts with ``GET /v0/any-input/withdrawals``; quote requests may carry two
fields the spec does not list. This module gives the sandbox's answer to each:

- :class:`ClientQuoteRequest`: the spec's quote request plus the optional ``confidentiality``
  (``public``, ``basic``, ``advanced``) and ``rebates`` (1–3 ``{recipient, share}``, shares in
  percent adding up to 100). Both are validated and echoed in ``quoteRequest``; the sandbox has
  no Confidential Intents and no rebate source, so every quote is executed as a public one and
  no rebate is paid. ``insured`` (a boolean of the official schema, default false, protocol-notes
  7) is echoed when false; the sandbox has no insurance, so ``true`` is a 400 naming the field.
- :func:`token_listing`: one entry per sandbox token in the 1Click shape (``assetId``,
  ``decimals``, ``blockchain``, ``symbol``, ``price``, ``priceUpdatedAt``, ``contractAddress``),
  prices from the sandbox's reference price process.
- :func:`any_input_withdrawals`: the payouts of an ANY_INPUT quote. A sandbox ANY_INPUT quote
  converts its first deposit at once (docs/swap-api.md), so it has at most one withdrawal:
  ``SUCCESS`` once paid, ``FAILED`` when the payout failed. ``withdrawals`` is a list (the
  client's generated type says one object; the API describes a paginated listing).
- :data:`UNSERVED_CLIENT_PATHS`: paths the client knows that the sandbox does not serve; they
  answer a JSON 404 naming the path (:func:`not_served_message`).
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator

from sandbox.swap.http import bad_parameter, not_found
from sandbox.swap.rules import format_units
from solver.protocol.ids import asset_contract, validate_account_id
from solver.protocol.swap import (
    NonNegativeNumber,
    QuoteRequest,
    QuoteResponse,
    SwapStatus,
    SwapType,
    Timestamp,
    format_timestamp,
)

if TYPE_CHECKING:
    from sandbox.swap.service import SwapService

MAX_REBATES = 3
MAX_WITHDRAWALS_PAGE = 50
UNSERVED_CLIENT_PATHS = frozenset(
    {
        "/v0/account/balances",
        "/v0/account/history",
        "/v0/generate-intent",
        "/v0/submit-intent",
        "/v0/auth/authenticate",
        "/v0/auth/refresh",
    }
)


class Confidentiality(StrEnum):
    PUBLIC = "public"
    BASIC = "basic"
    ADVANCED = "advanced"


class Rebate(BaseModel):
    """One ``rebates`` entry: a recipient account and its share of the rebate, in percent."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    recipient: Annotated[str, Field(strict=True, min_length=1)]
    share: Annotated[NonNegativeNumber, Field(gt=0, le=100)]

    @field_validator("recipient")
    @classmethod
    def _account(cls, value: str) -> str:
        return validate_account_id(value)


class ClientQuoteRequest(QuoteRequest):
    """The quote request of spec 2.1 plus the official client's optional fields."""

    confidentiality: Confidentiality | None = None
    rebates: Annotated[list[Rebate], Field(min_length=1, max_length=MAX_REBATES)] | None = None
    insured: StrictBool | None = None

    @field_validator("insured")
    @classmethod
    def _uninsured(cls, value: bool | None) -> bool | None:
        if value:
            raise ValueError("the sandbox has no swap insurance: send false or leave it out")
        return value

    @field_validator("rebates")
    @classmethod
    def _shares_add_up(cls, value: list[Rebate] | None) -> list[Rebate] | None:
        if value is not None and sum(r.share for r in value) != 100:
            raise ValueError("rebate shares must add up to 100 (percent)")
        return value


class ClientQuoteResponse(QuoteResponse):
    """The quote response (spec 2.2), whose ``quoteRequest`` echo may carry those fields."""

    quote_request: ClientQuoteRequest


def token_listing(service: SwapService) -> list[dict[str, Any]]:
    """``GET /v0/tokens``: every sandbox token, priced at the reference process's last tick."""
    updated = format_timestamp(service.prices.updated_at)
    chains = {asset: chain.value for asset, chain in service.spec.chains.items()}
    out = []
    for asset, token in sorted(service.tokens.items()):
        entry: dict[str, Any] = {
            "assetId": asset,
            "decimals": token.decimals,
            "blockchain": chains.get(asset, "near"),
            "symbol": token.symbol,
            "price": service.prices.usd(asset),
            "priceUpdatedAt": updated,
        }
        if asset.startswith("nep141:"):
            entry["contractAddress"] = asset_contract(asset)
        out.append(entry)
    return out


class WithdrawalsQuery(BaseModel):
    """Query of ``GET /v0/any-input/withdrawals``."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    depositAddress: Annotated[str, Field(min_length=1, max_length=200)]
    depositMemo: str | None = None
    timestampFrom: Timestamp | None = None
    page: Annotated[int, Field(ge=1, le=1_000_000)] = 1
    limit: Annotated[int, Field(ge=1, le=MAX_WITHDRAWALS_PAGE)] = MAX_WITHDRAWALS_PAGE
    sortOrder: Literal["asc", "desc"] = "desc"


def any_input_withdrawals(service: SwapService, query: WithdrawalsQuery) -> dict[str, Any]:
    """The payouts of one ANY_INPUT quote (404 unknown address, 400 another swap type)."""
    record = service.executor.lookup(query.depositAddress, query.depositMemo)
    if record is None:
        what = query.depositAddress[:80]
        raise not_found(f"no swap for deposit address {what}")
    if record.swap_type is not SwapType.ANY_INPUT:
        raise bad_parameter(
            f"depositAddress belongs to a {record.swap_type.value} quote: withdrawals are "
            "listed for ANY_INPUT quotes only",
            "depositAddress",
        )
    withdrawals = []
    paid = record.status in (SwapStatus.SUCCESS, SwapStatus.FAILED)
    if paid and record.amount_out_actual is not None:
        decimals = service.decimals[record.destination_asset]
        hashes = record.destination_tx_hashes or record.near_tx_hashes
        withdrawals.append(
            {
                "status": "SUCCESS" if record.status is SwapStatus.SUCCESS else "FAILED",
                "amountOut": str(record.amount_out_actual),
                "amountOutFormatted": format_units(record.amount_out_actual, decimals),
                "amountOutUsd": record.usd_out,
                "withdrawFee": "0",
                "withdrawFeeFormatted": "0",
                "withdrawFeeUsd": "0",
                "timestamp": format_timestamp(record.updated_at),
                "hash": hashes[-1] if hashes else "",
            }
        )
    since = query.timestampFrom
    if since is not None:
        cut = since.astimezone(UTC)
        withdrawals = [w for w in withdrawals if _parse(w["timestamp"]) >= cut]
    withdrawals.sort(key=lambda w: w["timestamp"], reverse=query.sortOrder == "desc")
    start = (query.page - 1) * query.limit
    fees = record.app_fees
    return {
        "asset": record.destination_asset,
        "recipient": record.recipient,
        "affiliateRecipient": str(fees[0]["recipient"]) if fees else "",
        "withdrawals": withdrawals[start : start + query.limit],
        "page": query.page,
        "limit": query.limit,
        "total": len(withdrawals),
    }


def _parse(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def not_served_message(method: str, path: str) -> str:
    """The message of a 404: which path, and whether it is one the official client knows."""
    shown = path[:200]
    if path in UNSERVED_CLIENT_PATHS:
        return (
            f"{method} {shown} is a path of the 1Click API that the sandbox does not serve "
            "(see docs/sandbox.md, 'Using other clients with the sandbox')"
        )
    return f"no such path: {method} {shown}"
