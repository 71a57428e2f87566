"""The sections of the bot's YAML, one pydantic model each (every key documented in
``config/default.yaml``); those with a family or validators of their own are in their modules:
:mod:`solver.config.prices`, :mod:`solver.config.storage`, :mod:`solver.config.rebalance`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    Field,
    model_validator,
)
from pydantic_core import PydanticCustomError

from solver.config.fields import (
    STRICT,
    Amount,
    EnvName,
    HttpUrl,
    Millis,
    Usd,
    WsUrl,
    listen_address,
    lower,
    strategy_ref,
    upper,
)
from solver.protocol.ids import AccountId, AssetId

KEY_SOURCE_MESSAGE = (
    "give exactly one of key_env (name of an environment variable holding the secret key) "
    "or key_file (path of a 0600 file holding it)"
)
REMOTE_KEY_MESSAGE = (
    "with signer.mode remote the key lives in the signer process: the bot must hold none "
    "(set account.key_env and account.key_file to null)"
)


class AccountSpec(BaseModel):
    """The signer, and where its ``ed25519:`` secret key comes from: exactly one source with
    ``signer.mode: in_process`` (checked across sections), none with ``remote``."""

    model_config = STRICT
    id: AccountId
    """Account that signs the quotes (``signer_id``); a 64-hex id is the key's implicit account."""
    key_env: EnvName | None = None
    """Name of the environment variable holding the secret key."""
    key_file: Path | None = None
    """File holding the secret key; must not be readable by group or others (0600)."""

    @model_validator(mode="after")
    def _one_key_source(self) -> AccountSpec:
        if self.key_env is not None and self.key_file is not None:
            raise PydanticCustomError("key_source", KEY_SOURCE_MESSAGE)
        return self


class BusSpec(BaseModel):
    """The message bus (protocol-notes 6): websocket for quote requests, JSON-RPC for the rest."""

    model_config = STRICT
    ws_url: WsUrl
    """Solver websocket, ``{relay}/ws``."""
    rpc_url: HttpUrl
    """JSON-RPC endpoint, ``{relay}/rpc`` (``publish_intent``, ``get_status``)."""
    api_key_env: EnvName | None = None
    """Name of the environment variable holding the bearer key; ``None``: no Authorization."""
    asset_field_prefix: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]{0,31}$")] = "core"
    """Prefix of the asset fields in ``quote`` events (``core_asset_identifier_in``)."""
    wait_ms: Annotated[int, Field(ge=1, le=3000)] = 3000
    """How long the bus waits for answers to one request (protocol-notes 6: at most 3000)."""
    reconnect_initial_ms: Millis = 250
    """First reconnection delay; doubles on each failure, with jitter."""
    reconnect_max_ms: Millis = 10_000
    """Cap of the reconnection delay."""
    max_frame_bytes: Annotated[int, Field(ge=1024, le=16 << 20)] = 1 << 20
    """Largest websocket frame accepted."""
    compression: bool = False
    """Offer permessage-deflate to the relay; off by default: it costs CPU on every answer."""

    @model_validator(mode="after")
    def _backoff_order(self) -> BusSpec:
        if self.reconnect_initial_ms > self.reconnect_max_ms:
            raise PydanticCustomError(
                "order", "reconnect_initial_ms must not exceed reconnect_max_ms"
            )
        return self


class ChainSpec(BaseModel):
    """The ledger JSON-RPC node (protocol-notes 5) and how often its views are refreshed."""

    model_config = STRICT
    rpc_url: HttpUrl
    timeout_ms: Millis = 2000
    """Timeout of one RPC call."""
    balance_refresh_ms: Millis = 2000
    """Period of the ``mt_batch_balance_of`` refresh."""
    balance_max_age_ms: Millis = 15_000
    """Balances older than this are stale: pairs using them skip (and may trip the kill switch)."""
    salt_refresh_ms: Millis = 10_000
    """Period of the ``current_salt`` refresh."""
    salt_max_age_ms: Millis | None = None
    """A salt older than this is stale: every request skips (``no_salt``) until a refresh
    succeeds, because the verifier may have rotated it and would refuse nonces built on it.
    ``None``: twice ``salt_refresh_ms``, so one failed refresh is tolerated and a second is not."""

    @model_validator(mode="after")
    def _age_after_refresh(self) -> ChainSpec:
        if self.balance_max_age_ms <= self.balance_refresh_ms:
            raise PydanticCustomError(
                "order",
                "balance_max_age_ms must be greater than balance_refresh_ms, "
                "or balances go stale between refreshes",
            )
        if self.salt_max_age_ms is not None and self.salt_max_age_ms < self.salt_refresh_ms:
            raise PydanticCustomError(
                "order",
                "salt_max_age_ms must be at least salt_refresh_ms, "
                "or the salt goes stale between refreshes",
            )
        return self

    @property
    def salt_max_age_s(self) -> float:
        """The salt's maximum age in seconds, the default (2 x ``salt_refresh_ms``) resolved."""
        age_ms = self.salt_max_age_ms
        return (2 * self.salt_refresh_ms if age_ms is None else age_ms) / 1000


class NonceSpec(BaseModel):
    """Nonce layout (protocol-notes 3): the spec's salted one or the deployed versioned V1."""

    model_config = STRICT
    layout: Annotated[Literal["salted", "versioned"], BeforeValidator(lower)] = "salted"


class TokenSpec(BaseModel):
    """A token the bot may trade: a display symbol and the decimals of its smallest unit."""

    model_config = STRICT
    symbol: Annotated[str, Field(min_length=1, max_length=32)]
    decimals: Annotated[int, Field(ge=0, le=38)]


Bps = Annotated[float, Field(ge=0, le=10_000, allow_inf_nan=False)]
PartnerId = Annotated[str, Field(min_length=1, max_length=256)]


class PartnersSpec(BaseModel):
    """Which relay partners a pair serves, by the ``partner_id`` of the request's metadata."""

    model_config = STRICT
    allow: list[PartnerId] | None = None
    """Only these partners (a request without a partner id is refused); ``None``: anyone."""
    deny: list[PartnerId] = Field(default_factory=list)
    """Never these partners."""

    @model_validator(mode="after")
    def _sane(self) -> PartnersSpec:
        if self.allow is not None and not self.allow:
            raise PydanticCustomError(
                "partners", "an empty allow list admits nobody: use enabled: false instead"
            )
        both = sorted(set(self.allow or ()) & set(self.deny))
        if both:
            raise PydanticCustomError("partners", "in both allow and deny: {both}", {"both": both})
        return self


class PairSpec(BaseModel):
    """A market the bot quotes, both ways by default, priced by one strategy."""

    model_config = STRICT
    base: AssetId
    quote: AssetId
    strategy: Annotated[str, AfterValidator(strategy_ref)]
    """A built-in strategy name, or ``"package.module:ClassName"``."""
    params: dict[str, Any] = Field(default_factory=dict)
    """The strategy's parameters; its own config class validates them when it is loaded."""
    min_notional_usd: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.0
    """Requests worth less than this (in USD) are skipped."""
    max_notional_usd: Usd
    """Requests worth more than this (in USD) are skipped."""
    enabled: bool = True
    directions: Literal["both", "buy_base", "sell_base"] = "both"
    """Which way the bot trades: ``buy_base`` only takes base in, ``sell_base`` only gives it."""
    max_giveaway_bps: Bps | None = None
    """Price guard of this pair (bps vs reference prices); ``None``: ``quote.max_giveaway_bps``."""
    partners: PartnersSpec | None = None
    """Partner allow / deny lists; ``None``: every partner, and requests without one."""

    @model_validator(mode="after")
    def _sane(self) -> PairSpec:
        if self.base == self.quote:
            raise PydanticCustomError("pair", "base and quote must be different assets")
        if self.min_notional_usd > self.max_notional_usd:
            raise PydanticCustomError("order", "min_notional_usd must not exceed max_notional_usd")
        return self


Percent = Annotated[float, Field(gt=0, le=100, allow_inf_nan=False)]


class RiskSpec(BaseModel):
    """Inventory floors and exposure limits; the kill-switch thresholds."""

    model_config = STRICT
    floors: dict[AssetId, Amount] = Field(default_factory=dict)
    """Balance never quoted away, per asset (smallest unit); unlisted assets: 0."""
    max_open_exposure_usd: Usd = 50_000.0
    """USD value of the outflows of all open (signed, unsettled) quotes together."""
    max_open_per_token: dict[AssetId, Amount] = Field(default_factory=dict)
    """Open outflow limit per asset (smallest unit); unlisted assets: no per-token limit."""
    max_quotes_per_s: Usd = 200.0
    """Answers per second, all pairs together; requests beyond it are skipped."""
    max_daily_loss_usd: Usd = 1000.0
    """Kill switch: realised + marked loss since 00:00 UTC."""
    max_drawdown_usd: Usd = 2500.0
    """Kill switch: fall of marked PnL from its peak."""
    max_daily_loss_pct: Percent | None = None
    """Kill switch: the daily loss as a percentage of the starting equity; the tighter of this
    and ``max_daily_loss_usd`` applies. ``None``: the USD limit alone."""
    max_drawdown_pct: Percent | None = None
    """Kill switch: the drawdown as a percentage of the starting equity; the tighter of this and
    ``max_drawdown_usd`` applies. ``None``: the USD limit alone."""
    max_reconciliation_mismatch: dict[AssetId, Amount] = Field(default_factory=dict)
    """Kill switch: largest tolerated gap between expected and on-chain balance, per asset."""
    halt_on_mismatch: bool = True
    """A reconciliation mismatch beyond tolerance pauses quoting (false: alert only)."""
    max_stale_s: Annotated[float, Field(gt=0, le=86_400, allow_inf_nan=False)] = 120.0
    """Kill switch: balances or prices older than this pause quoting until ``solver resume``."""


class QuoteSpec(BaseModel):
    """Timing of answers."""

    model_config = STRICT
    deadline_margin_ms: Annotated[int, Field(ge=0, le=3_600_000)] = 5000
    """Added to the request's ``min_deadline_ms`` to set the intent deadline."""
    max_min_deadline_ms: Millis = 120_000
    """Requests asking for a longer ``min_deadline_ms`` are skipped (too long an exposure)."""
    response_budget_ms: Annotated[int, Field(ge=1, le=3000)] = 2500
    """How long after receipt an answer may be ready, at most ``bus.wait_ms`` (checked when
    the config is loaded). No decision applies it: the bot decides and answers in the loop
    turn it reads the request, and the backtest's latency model decides lateness."""
    strategy_budget_ms: Annotated[float, Field(gt=0, le=3000)] = 5.0
    """Wall-clock time one strategy call may take; a longer call is skipped
    (``strategy_slow``)."""
    max_giveaway_bps: Bps = 300.0
    """Price guard: quotes giving away more than this (bps) vs reference prices are skipped
    (``price_guard``); a pair's own ``max_giveaway_bps`` overrides it."""


class MetricsSpec(BaseModel):
    """The Prometheus endpoint."""

    model_config = STRICT
    listen: Annotated[str | None, AfterValidator(listen_address)] = "127.0.0.1:9464"
    """``host:port`` to serve ``/metrics`` on; ``null`` disables it."""


class LogSpec(BaseModel):
    """Logging: level, format, and the periodic summary line."""

    model_config = STRICT
    level: Annotated[Literal["DEBUG", "INFO", "WARNING", "ERROR"], BeforeValidator(upper)] = "INFO"
    format: Annotated[Literal["text", "json"], BeforeValidator(lower)] = "text"
    summary_every_s: Annotated[float, Field(ge=0, le=86_400, allow_inf_nan=False)] = 10.0
    """Period of the one-line summary (counts, PnL, inventory); 0 disables it."""


class SwapApiSpec(BaseModel):
    """The swap API (spec 4.1, 4.2): quotes and deposit submissions, for rebalancing."""

    model_config = STRICT
    base_url: HttpUrl
    """``{base_url}``: the API serves ``/v0/quote``, ``/v0/deposit/submit``, ``/v0/status``."""
    token_env: EnvName | None = None
    """Name of the environment variable holding the bearer JWT; ``None``: no token, and the
    0.2 % platform fee applies (spec 5.1.3)."""
    timeout_ms: Millis = 10_000
    """Timeout of one request."""


class HistoryApiSpec(BaseModel):
    """The history API (spec 4.3, 4.4): past swaps, for ``import-history``."""

    model_config = STRICT
    api_url: HttpUrl
    """``{api_url}``: the API serves ``/api/v0/transactions`` and ``/api/v0/transactions-pages``."""
    token_env: EnvName
    """Name of the environment variable holding the bearer JWT (required, spec 5.1.4)."""
    timeout_ms: Millis = 10_000
