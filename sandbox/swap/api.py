"""The sandbox swap API at {base_url} (spec 4.1, 4.2, 5.1, 9.1; docs/swap-api.md).

- ``POST /v0/quote`` (2.1 → 2.2), ``POST /v0/deposit/submit`` (2.4 → 2.5),
  ``GET /v0/status?depositAddress=…[&depositMemo=…]`` (→ 2.5): token optional (without one the
  platform fee applies; an invalid one is a 401), carried as ``Authorization: Bearer`` or, as the
  official schema also allows, ``X-API-Key`` (protocol-notes 7).
- ``GET /v0/tokens`` and ``GET /v0/any-input/withdrawals``: what the official 1Click client
  calls beyond the spec (:mod:`sandbox.swap.client_api`); quote requests also take its optional
  ``confidentiality`` and ``rebates``. Other paths that client knows answer a JSON 404 naming
  the path.
- Sandbox only: ``POST /sandbox/deposit`` (a chosen amount arrives at a deposit address) and
  ``GET /sandbox/service-key`` (the public key that signs quotes).

Request bodies are read raw and validated with ``model_validate_json``: a JSON number where the
spec has an amount string is refused, as is a snake_case field name. Bad input of any route is a
400 whose ``message`` names the field, the official ``BadRequestResponse`` (protocol-notes 7); a
method a path does not serve is a 405 with ``Allow``. OpenAPI: ``/openapi.json``.
"""

from __future__ import annotations

from typing import Any, TypeVar

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, ValidationError

from sandbox.swap.checks import SandboxDepositRequest
from sandbox.swap.client_api import (
    ClientQuoteRequest,
    ClientQuoteResponse,
    WithdrawalsQuery,
    any_input_withdrawals,
    not_served_message,
    token_listing,
)
from sandbox.swap.http import (
    API_KEY_SCHEME,
    BEARER_SCHEME,
    ERROR_RESPONSES,
    api_key_token,
    bearer_token,
    install_error_handlers,
    install_openapi,
    invalid_body,
    json_body,
    parse_query,
    query_parameters,
    read_body,
    validation_problem,
)
from sandbox.swap.rules import SIGNATURE_DOMAIN
from sandbox.swap.service import SwapService
from solver.protocol.swap import (
    DepositSubmitRequest,
    DepositSubmitResponse,
)

M = TypeVar("M", bound=BaseModel)
OPTIONAL_AUTH: list[dict[str, list[str]]] = [{}, {BEARER_SCHEME: []}, {API_KEY_SCHEME: []}]


class StatusQuery(BaseModel):
    """Query of ``GET /v0/status``."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    depositAddress: str
    depositMemo: str | None = None


class TokenEntry(BaseModel):
    """One entry of ``GET /v0/tokens`` (the 1Click client's ``TokenResponse``)."""

    assetId: str
    decimals: int
    blockchain: str
    symbol: str
    price: float
    priceUpdatedAt: str
    contractAddress: str | None = None


class Withdrawal(BaseModel):
    """One payout of an ANY_INPUT quote (the 1Click client's ``AnyInputQuoteWithdrawal``)."""

    status: str
    amountOut: str
    amountOutFormatted: str
    amountOutUsd: str
    withdrawFee: str
    withdrawFeeFormatted: str
    withdrawFeeUsd: str
    timestamp: str
    hash: str


class WithdrawalsPage(BaseModel):
    """Answer of ``GET /v0/any-input/withdrawals``."""

    asset: str
    recipient: str
    affiliateRecipient: str
    withdrawals: list[Withdrawal]
    page: int
    limit: int
    total: int


class ServiceKey(BaseModel):
    """Answer of ``GET /sandbox/service-key``."""

    publicKey: str
    signatureDomain: str


def _responses(model: Any, *codes: int) -> dict[int | str, dict[str, Any]]:
    return {200: {"model": model}, **{code: ERROR_RESPONSES[code] for code in codes}}


def parse_body(model: type[M], body: bytes) -> tuple[M, dict[str, Any]]:
    """The validated model and the decoded object; 400 naming the first bad field."""
    try:
        parsed = model.model_validate_json(body)
    except ValidationError as exc:
        message, field = validation_problem(exc)
        raise invalid_body(message, field) from None
    raw: dict[str, Any] = orjson.loads(body)
    aliases = {f.alias or name for name, f in model.model_fields.items()}
    for key in raw:
        if key not in aliases:
            raise invalid_body(f"{key}: unknown field (fields are camelCase)", key)
    return parsed, raw


def authorized(service: SwapService, request: Request) -> bool:
    """Whether the request is a partner's (fee-free, spec 5.1.3). Each carrier present must hold
    a valid token, or the answer is a 401: a bad credential never passes for no credential."""
    present = [t for t in (bearer_token(request), api_key_token(request)) if t is not None]
    return all([service.authorized(token) for token in present]) and bool(present)


def create_swap_app(service: SwapService) -> FastAPI:
    app = FastAPI(title="sandbox swap API", version="0", docs_url=None, redoc_url=None)
    install_error_handlers(app, not_served_message)
    limit = service.spec.max_body_bytes

    @app.post(
        "/v0/quote",
        response_model=None,
        summary="Request a quote (2.1 → 2.2)",
        responses=_responses(ClientQuoteResponse, 400, 401, 413),
        openapi_extra={**json_body(ClientQuoteRequest), "security": OPTIONAL_AUTH},
    )
    async def quote(request: Request) -> JSONResponse:
        partner = authorized(service, request)
        req, raw = parse_body(ClientQuoteRequest, await read_body(request, limit))
        return JSONResponse(await service.quote(req, raw, partner))

    @app.get(
        "/v0/tokens",
        response_model=None,
        summary="Tokens that can be swapped, with their reference price (1Click client)",
        responses=_responses(list[TokenEntry]),
    )
    async def tokens() -> JSONResponse:
        return JSONResponse(token_listing(service))

    @app.get(
        "/v0/any-input/withdrawals",
        response_model=None,
        summary="Payouts of an ANY_INPUT quote (1Click client)",
        responses=_responses(WithdrawalsPage, 400, 401, 404),
        openapi_extra={
            "parameters": query_parameters(WithdrawalsQuery, required=("depositAddress",)),
            "security": OPTIONAL_AUTH,
        },
    )
    async def withdrawals(request: Request) -> JSONResponse:
        authorized(service, request)
        query = parse_query(WithdrawalsQuery, request)
        return JSONResponse(any_input_withdrawals(service, query))

    @app.post(
        "/v0/deposit/submit",
        response_model=None,
        summary="Report a deposit transaction (2.4 → 2.5)",
        responses=_responses(DepositSubmitResponse, 400, 401, 404, 413),
        openapi_extra={**json_body(DepositSubmitRequest), "security": OPTIONAL_AUTH},
    )
    async def submit(request: Request) -> JSONResponse:
        authorized(service, request)
        req, _ = parse_body(DepositSubmitRequest, await read_body(request, limit))
        return JSONResponse(service.submit(req))

    @app.get(
        "/v0/status",
        response_model=None,
        summary="Status of a swap by deposit address (→ 2.5)",
        responses=_responses(DepositSubmitResponse, 400, 401, 404),
        openapi_extra={
            "parameters": query_parameters(StatusQuery, required=("depositAddress",)),
            "security": OPTIONAL_AUTH,
        },
    )
    async def status(request: Request) -> JSONResponse:
        authorized(service, request)
        query = parse_query(StatusQuery, request)
        return JSONResponse(service.status(query.depositAddress, query.depositMemo))

    @app.post(
        "/sandbox/deposit",
        response_model=None,
        tags=["sandbox"],
        summary="Sandbox only: simulate a deposit of a chosen amount",
        responses=_responses(DepositSubmitResponse, 400, 404, 413),
        openapi_extra=json_body(SandboxDepositRequest),
    )
    async def sandbox_deposit(request: Request) -> JSONResponse:
        req, _ = parse_body(SandboxDepositRequest, await read_body(request, limit))
        return JSONResponse(service.sandbox_deposit(req))

    @app.get(
        "/sandbox/service-key",
        response_model=None,
        tags=["sandbox"],
        summary="Sandbox only: the public key that signs quotes",
        responses=_responses(ServiceKey),
    )
    async def service_key() -> JSONResponse:
        return JSONResponse({"publicKey": service.public_key, "signatureDomain": SIGNATURE_DOMAIN})

    install_openapi(
        app,
        (ClientQuoteRequest, DepositSubmitRequest, SandboxDepositRequest),
        lambda: (
            "Sandbox of the swap API (spec 4.1, 4.2). Quotes are signed with ed25519 key "
            f"{service.public_key} over the bytes defined in docs/swap-api.md "
            f"(domain {SIGNATURE_DOMAIN})."
        ),
        api_key=True,
    )
    return app
