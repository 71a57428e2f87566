"""Configuration of the bot (``config/default.yaml``), validated with pydantic.

Every key is documented in ``config/default.yaml``; units are in the key names (``_ms``, ``_s``,
``_usd``, ``_bps``, ``_bytes``). Amounts are ints in the token's smallest unit, written in YAML
as quoted strings (or plain ints), never floats: a float cannot hold a 24-decimal amount.

Loading reports *every* problem at once, one line per problem, each with its YAML path
(``pairs.0.max_notional_usd: ...``), so one edit-check cycle fixes a whole file. That includes the
checks across sections (a pair's asset must be in ``tokens``, no duplicate pairs, ...), which
run even when another section has errors.

Secrets never live in the file. The signing key is named, not given: ``account.key_env`` names
an environment variable, or ``account.key_file`` a 0600 file. Anything shaped like a secret key
anywhere in the YAML is refused, and no error message repeats it.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from solver.errors import ConfigError
from solver.protocol.amounts import U128
from solver.protocol.ids import AccountId, AssetId, is_implicit_account, validate_asset_id
from solver.protocol.keys import SecretKey, load_secret_key

_STRICT = ConfigDict(extra="forbid", frozen=True)

Loc = tuple[str | int, ...]

# ------------------------------------------------------------------------------ field types


def _no_float_amount(value: Any) -> Any:
    if isinstance(value, float):
        raise ValueError(
            "amounts are whole numbers in the token's smallest unit: write a quoted decimal "
            'string such as "1000000" (YAML read a float, which cannot hold large amounts)'
        )
    return value


Amount = Annotated[U128, BeforeValidator(_no_float_amount)]
"""A u128 amount: a quoted decimal string or an int in YAML; a float is refused."""

PositiveAmount = Annotated[Amount, Field(gt=0)]

_ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def _env_name(value: str) -> str:
    if not _ENV_NAME_RE.fullmatch(value):
        # Never echo the value: a pasted secret is the likely cause.
        raise ValueError(
            "must be the NAME of an environment variable (letters, digits, underscore), "
            "not its value"
        )
    return value


EnvName = Annotated[str, AfterValidator(_env_name)]
"""The name of an environment variable (its value is read at run time, never stored here)."""


def _url_validator(*schemes: str) -> AfterValidator:
    def check(value: str) -> str:
        try:
            parts = urlsplit(value)
            ok = parts.scheme in schemes and bool(parts.hostname)
            _ = parts.port  # raises ValueError on a bad port
        except ValueError:
            ok = False
        if not ok or any(c.isspace() for c in value):
            raise ValueError(f"must be a {' or '.join(s + '://' for s in schemes)} URL with a host")
        return value

    return AfterValidator(check)


HttpUrl = Annotated[str, _url_validator("http", "https")]
WsUrl = Annotated[str, _url_validator("ws", "wss")]

Usd = Annotated[float, Field(gt=0, allow_inf_nan=False)]
"""A positive, finite amount of US dollars."""

Millis = Annotated[int, Field(ge=1, le=86_400_000)]
"""A positive duration in milliseconds (at most a day)."""

_STRATEGY_RE = re.compile(
    r"[a-z_][a-z0-9_]*"  # a built-in, by name
    r"|[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*"  # module:Class
)


def _strategy_ref(value: str) -> str:
    if not _STRATEGY_RE.fullmatch(value):
        raise ValueError(
            'must be a built-in strategy name (like "spread") or "package.module:ClassName"'
        )
    return value


_JSON_PATH_RE = re.compile(r"[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*")


def _json_path(value: str) -> str:
    if not _JSON_PATH_RE.fullmatch(value):
        raise ValueError(
            'must be a dot path of keys and list indexes, like "data.price" or "0.usd"'
        )
    return value


def _upper(value: Any) -> Any:
    return value.upper() if isinstance(value, str) else value


def _lower(value: Any) -> Any:
    return value.lower() if isinstance(value, str) else value


# ----------------------------------------------------------------------------------- models


_KEY_SOURCE_MESSAGE = (
    "give exactly one of key_env (name of an environment variable holding the secret key) "
    "or key_file (path of a 0600 file holding it)"
)


class AccountSpec(BaseModel):
    """The signer, and where its ``ed25519:`` secret key comes from (exactly one source)."""

    model_config = _STRICT
    id: AccountId
    """Account that signs the quotes (``signer_id``); a 64-hex id is the key's implicit account."""
    key_env: EnvName | None = None
    """Name of the environment variable holding the secret key."""
    key_file: Path | None = None
    """File holding the secret key; must not be readable by group or others (0600)."""

    @model_validator(mode="after")
    def _one_key_source(self) -> AccountSpec:
        if (self.key_env is None) == (self.key_file is None):
            raise PydanticCustomError("key_source", _KEY_SOURCE_MESSAGE)
        return self


class BusSpec(BaseModel):
    """The message bus (protocol-notes 6): websocket for quote requests, JSON-RPC for the rest."""

    model_config = _STRICT
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

    model_config = _STRICT
    rpc_url: HttpUrl
    timeout_ms: Millis = 2000
    """Timeout of one RPC call."""
    balance_refresh_ms: Millis = 2000
    """Period of the ``mt_batch_balance_of`` refresh."""
    balance_max_age_ms: Millis = 15_000
    """Balances older than this are stale: pairs using them skip (and may trip the kill switch)."""
    salt_refresh_ms: Millis = 10_000
    """Period of the ``current_salt`` refresh."""

    @model_validator(mode="after")
    def _age_after_refresh(self) -> ChainSpec:
        if self.balance_max_age_ms <= self.balance_refresh_ms:
            raise PydanticCustomError(
                "order",
                "balance_max_age_ms must be greater than balance_refresh_ms, "
                "or balances go stale between refreshes",
            )
        return self


class NonceSpec(BaseModel):
    """Nonce layout (protocol-notes 3): the spec's salted one or the deployed versioned V1."""

    model_config = _STRICT
    layout: Annotated[Literal["salted", "versioned"], BeforeValidator(_lower)] = "salted"


class TokenSpec(BaseModel):
    """A token the bot may trade: a display symbol and the decimals of its smallest unit."""

    model_config = _STRICT
    symbol: Annotated[str, Field(min_length=1, max_length=32)]
    decimals: Annotated[int, Field(ge=0, le=38)]


class PairSpec(BaseModel):
    """A market the bot quotes, both ways by default, priced by one strategy."""

    model_config = _STRICT
    base: AssetId
    quote: AssetId
    strategy: Annotated[str, AfterValidator(_strategy_ref)]
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

    @model_validator(mode="after")
    def _sane(self) -> PairSpec:
        if self.base == self.quote:
            raise PydanticCustomError("pair", "base and quote must be different assets")
        if self.min_notional_usd > self.max_notional_usd:
            raise PydanticCustomError("order", "min_notional_usd must not exceed max_notional_usd")
        return self


class StaticPriceSource(BaseModel):
    """Fixed USD prices (tests, stablecoins)."""

    model_config = _STRICT
    kind: Literal["static"]
    prices: Annotated[dict[AssetId, Usd], Field(min_length=1)]
    """USD per whole unit of each asset."""


class SandboxPriceSource(BaseModel):
    """The sandbox price feed: ``GET url`` returns USD prices of every sandbox token."""

    model_config = _STRICT
    kind: Literal["sandbox"]
    url: HttpUrl
    refresh_ms: Millis = 1000


class HttpJsonPriceSource(BaseModel):
    """Any HTTP JSON API: ``GET url``, the USD price of ``asset`` at ``json_path``."""

    model_config = _STRICT
    kind: Literal["http_json"]
    url: HttpUrl
    asset: AssetId
    json_path: Annotated[str, AfterValidator(_json_path)]
    """Dot path to the number in the response, like ``data.price`` (digits index lists)."""
    refresh_ms: Millis = 5000
    headers_env: EnvName | None = None
    """Name of an environment variable holding extra request headers as a JSON object."""


class BusQuotePriceSource(BaseModel):
    """Price ``asset`` by asking the bus for a quote of ``probe_amount`` into ``quote_asset``."""

    model_config = _STRICT
    kind: Literal["bus_quote"]
    asset: AssetId
    quote_asset: AssetId
    probe_amount: PositiveAmount
    """Amount of ``asset`` (smallest unit) the probe asks to sell."""
    refresh_ms: Millis = 5000

    @model_validator(mode="after")
    def _two_assets(self) -> BusQuotePriceSource:
        if self.asset == self.quote_asset:
            raise PydanticCustomError("pair", "asset and quote_asset must be different")
        return self


PriceSource = Annotated[
    StaticPriceSource | SandboxPriceSource | HttpJsonPriceSource | BusQuotePriceSource,
    Field(discriminator="kind"),
]
SOURCE_KINDS = ("static", "sandbox", "http_json", "bus_quote")


class PricesSpec(BaseModel):
    """Reference prices in USD: where they come from and when they are too old to use."""

    model_config = _STRICT
    max_age_ms: Millis = 10_000
    """A price older than this is stale: pairs needing it skip."""
    history_size: Annotated[int, Field(ge=2, le=1_000_000)] = 512
    """Observations kept per asset (volatility estimates, markouts)."""
    sources: Annotated[list[PriceSource], Field(min_length=1)]


class RiskSpec(BaseModel):
    """Inventory floors and exposure limits; the kill-switch thresholds."""

    model_config = _STRICT
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
    max_reconciliation_mismatch: dict[AssetId, Amount] = Field(default_factory=dict)
    """Kill switch: largest tolerated gap between expected and on-chain balance, per asset."""
    halt_on_mismatch: bool = True
    """A reconciliation mismatch beyond tolerance pauses quoting (false: alert only)."""
    max_stale_s: Annotated[float, Field(gt=0, le=86_400, allow_inf_nan=False)] = 120.0
    """Kill switch: balances or prices older than this pause quoting until ``solver resume``."""


class QuoteSpec(BaseModel):
    """Timing of answers."""

    model_config = _STRICT
    deadline_margin_ms: Annotated[int, Field(ge=0, le=3_600_000)] = 5000
    """Added to the request's ``min_deadline_ms`` to set the intent deadline."""
    max_min_deadline_ms: Millis = 120_000
    """Requests asking for a longer ``min_deadline_ms`` are skipped (too long an exposure)."""
    response_budget_ms: Annotated[int, Field(ge=1, le=3000)] = 2500
    """Answers ready later than this after receipt are skipped: too late for the bus wait."""


class StorageSpec(BaseModel):
    """The SQLite store of quotes and settlements (WAL)."""

    model_config = _STRICT
    path: Path = Path("var/solver.sqlite")
    """Relative paths are relative to the working directory."""
    sample_requests: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] = 0.0
    """Fraction of quote requests kept with their outcome (0: none, 1: all); sampled by id."""
    synchronous: Literal["normal", "full"] = "normal"
    """``normal``: a committed quote survives a crash of the bot; ``full``: also a power loss
    (an fsync per quote)."""


def _listen(value: str | None) -> str | None:
    if value is None:
        return None
    host, sep, port = value.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError('must be "host:port" (port 0-65535), or null to disable')
    return value


class MetricsSpec(BaseModel):
    """The Prometheus endpoint."""

    model_config = _STRICT
    listen: Annotated[str | None, AfterValidator(_listen)] = "127.0.0.1:9464"
    """``host:port`` to serve ``/metrics`` on; ``null`` disables it."""


class LogSpec(BaseModel):
    """Logging: level, format, and the periodic summary line."""

    model_config = _STRICT
    level: Annotated[Literal["DEBUG", "INFO", "WARNING", "ERROR"], BeforeValidator(_upper)] = "INFO"
    format: Annotated[Literal["text", "json"], BeforeValidator(_lower)] = "text"
    summary_every_s: Annotated[float, Field(ge=0, le=86_400, allow_inf_nan=False)] = 10.0
    """Period of the one-line summary (counts, PnL, inventory); 0 disables it."""


class SwapApiSpec(BaseModel):
    """The swap API (spec 4.1, 4.2): quotes and deposit submissions, for rebalancing."""

    model_config = _STRICT
    base_url: HttpUrl
    """``{base_url}``: the API serves ``/v0/quote``, ``/v0/deposit/submit``, ``/v0/status``."""
    token_env: EnvName | None = None
    """Name of the environment variable holding the bearer JWT; ``None``: no token, and the
    0.2 % platform fee applies (spec 5.1.3)."""
    timeout_ms: Millis = 10_000
    """Timeout of one request."""


class HistoryApiSpec(BaseModel):
    """The history API (spec 4.3, 4.4): past swaps, for ``import-history``."""

    model_config = _STRICT
    api_url: HttpUrl
    """``{api_url}``: the API serves ``/api/v0/transactions`` and ``/api/v0/transactions-pages``."""
    token_env: EnvName
    """Name of the environment variable holding the bearer JWT (required, spec 5.1.4)."""
    timeout_ms: Millis = 10_000


NonNegativeUsd = Annotated[float, Field(ge=0, allow_inf_nan=False)]
_BAND_AMOUNT = ("min", "max", "target")
_BAND_USD = ("min_usd", "max_usd", "target_usd")


class BandSpec(BaseModel):
    """The band of one asset's balance: all three of ``min`` / ``max`` / ``target`` (smallest
    unit) or all three of ``min_usd`` / ``max_usd`` / ``target_usd`` (USD at the reference
    price), with ``min <= target <= max`` and ``min < max``."""

    model_config = _STRICT
    min: Amount | None = None
    max: Amount | None = None
    target: Amount | None = None
    min_usd: NonNegativeUsd | None = None
    max_usd: NonNegativeUsd | None = None
    target_usd: NonNegativeUsd | None = None

    @model_validator(mode="after")
    def _one_unit(self) -> BandSpec:
        amounts = [getattr(self, name) for name in _BAND_AMOUNT]
        usds = [getattr(self, name) for name in _BAND_USD]
        given = [values for values in (amounts, usds) if any(v is not None for v in values)]
        if len(given) != 1 or any(v is None for v in given[0]):
            raise PydanticCustomError(
                "band",
                "give all of min, max, target (smallest unit, quoted strings) or all of "
                "min_usd, max_usd, target_usd, not a mix",
            )
        low, high, target = given[0]
        if not low <= target <= high or not low < high:
            raise PydanticCustomError("order", "a band needs min <= target <= max and min < max")
        return self

    @property
    def in_usd(self) -> bool:
        return self.min_usd is not None


class RebalanceSpec(BaseModel):
    """The rebalancer: swaps inventory back into its bands through the swap API."""

    model_config = _STRICT
    enabled: bool = False
    dry_run: bool = True
    """Only log the plan: nothing is quoted, paid or persisted."""
    bands: dict[AssetId, BandSpec] = Field(default_factory=dict)
    counter_asset: AssetId | None = None
    """The other side of every rebalance: an asset above its band is sold for it, one below is
    bought with it. It has no band of its own."""
    max_swap_usd: Usd = 1000.0
    """Largest value one rebalance moves, USD."""
    min_interval_s: Annotated[float, Field(ge=0, le=7 * 86_400, allow_inf_nan=False)] = 900.0
    """Least time between the starts of two rebalances."""
    slippage_bps: Annotated[int, Field(ge=0, le=10_000)] = 50
    """``slippageTolerance`` of the quote request, basis points."""
    max_cost_bps: Annotated[int, Field(ge=0, le=10_000)] = 100
    """A quote whose ``amountOut`` is worth less than the input by more than this, at reference
    prices, is refused."""
    tick_s: Annotated[float, Field(gt=0, le=3600, allow_inf_nan=False)] = 5.0
    """Period of the rebalancer job (band checks, following swaps in flight)."""
    swap_deadline_s: Annotated[float, Field(ge=60, le=86_400, allow_inf_nan=False)] = 1800.0
    """``deadline`` of the quote request, from now: refunds begin after it."""
    deposit_deadline_s: Annotated[float, Field(gt=0, le=3600, allow_inf_nan=False)] = 120.0
    """Deadline of the signed ``transfer`` paying the deposit, from signing."""
    deposit_wait_s: Annotated[float, Field(gt=0, le=3600, allow_inf_nan=False)] = 60.0
    """How long one tick follows the deposit transfer before leaving it to the next tick."""

    @model_validator(mode="after")
    def _usable(self) -> RebalanceSpec:
        if self.counter_asset is not None and self.counter_asset in self.bands:
            raise PydanticCustomError(
                "counter", "counter_asset is what rebalances trade against: it cannot have a band"
            )
        if self.enabled and (self.counter_asset is None or not self.bands):
            raise PydanticCustomError(
                "enabled", "an enabled rebalancer needs counter_asset and at least one band"
            )
        return self


class BotConfig(BaseModel):
    """The whole configuration of the bot."""

    model_config = _STRICT
    account: AccountSpec
    verifier_contract: AccountId
    bus: BusSpec
    chain: ChainSpec
    nonce: NonceSpec = Field(default_factory=NonceSpec)
    tokens: dict[AssetId, TokenSpec]
    pairs: Annotated[list[PairSpec], Field(min_length=1)]
    prices: PricesSpec
    risk: RiskSpec = Field(default_factory=RiskSpec)
    quote: QuoteSpec = Field(default_factory=QuoteSpec)
    storage: StorageSpec = Field(default_factory=StorageSpec)
    metrics: MetricsSpec = Field(default_factory=MetricsSpec)
    log: LogSpec = Field(default_factory=LogSpec)
    swap_api: SwapApiSpec | None = None
    history_api: HistoryApiSpec | None = None
    rebalance: RebalanceSpec = Field(default_factory=RebalanceSpec)

    @field_validator("tokens")
    @classmethod
    def _some_tokens(cls, value: dict[str, TokenSpec]) -> dict[str, TokenSpec]:
        if not value:
            raise PydanticCustomError("empty", "at least one token is needed")
        return value

    @model_validator(mode="after")
    def _cross_checks(self) -> BotConfig:
        errors = _cross_errors(self.model_dump())
        if errors:
            raise ValidationError.from_exception_data(
                "BotConfig",
                [
                    InitErrorDetails(
                        type=PydanticCustomError("cross_check", msg), loc=loc, input=None
                    )
                    for loc, msg in errors
                ],
            )
        return self

    def pair(self, base: str, quote: str) -> PairSpec | None:
        """The configured pair of these two assets, in either order."""
        for pair in self.pairs:
            if {pair.base, pair.quote} == {base, quote}:
                return pair
        return None

    def with_overrides(
        self, overrides: Mapping[str, Any] | None = None, /, **dotted: Any
    ) -> BotConfig:
        """A copy with dotted keys set (see :func:`apply_overrides`), validated again.

        Keyword names use ``__`` for the dot: ``with_overrides(bus__ws_url="ws://...")``; keys
        that are not identifiers go in the mapping: ``with_overrides({"pairs.0.enabled": False})``.
        """
        changes = dict(overrides or {})
        changes.update({key.replace("__", "."): value for key, value in dotted.items()})
        data = apply_overrides(self.model_dump(mode="json"), changes)
        return validate_bot_config(data, source="overrides")


# ------------------------------------------------------------------------- checks across sections


def _asset(value: Any) -> str | None:
    """``value`` if it is a valid asset id, else ``None`` (its own error is reported already)."""
    try:
        return validate_asset_id(value) if isinstance(value, str) else None
    except ValueError:
        return None


def _int(section: Any, key: str, model: type[BaseModel]) -> int | None:
    """An int setting of a raw section, its default when absent, ``None`` when invalid."""
    if section is None:
        section = {}
    if not isinstance(section, Mapping):
        return None
    value = section.get(key, model.model_fields[key].default)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _cross_errors(data: Mapping[str, Any]) -> list[tuple[Loc, str]]:
    """Problems spanning sections, found in raw (YAML-shaped) data.

    Lenient on purpose: it runs even when sections have their own errors (then pydantic skips
    every model-level check), uses whatever parts are well-formed and skips the rest, whose
    errors are reported anyway. The valid model runs it on its own dump.
    """
    errors: list[tuple[Loc, str]] = []
    raw_tokens = data.get("tokens")
    tokens = set(raw_tokens) if isinstance(raw_tokens, Mapping) and raw_tokens else None

    def need_token(loc: Loc, value: Any) -> str | None:
        asset = _asset(value)
        if asset is not None and tokens is not None and asset not in tokens:
            errors.append((loc, f"{asset} is not in tokens"))
        return asset

    account = data.get("account")
    if isinstance(account, Mapping):
        given = sum(account.get(k) is not None for k in ("key_env", "key_file"))
        if given != 1:
            errors.append((("account",), _KEY_SOURCE_MESSAGE))

    raw_pairs = data.get("pairs")
    pairs: list[tuple[int, dict[str, str]]] = []
    seen: dict[frozenset[str], int] = {}
    for index, pair in enumerate(raw_pairs if isinstance(raw_pairs, list) else ()):
        if not isinstance(pair, Mapping):
            continue
        assets = {
            field: asset
            for field in ("base", "quote")
            if (asset := need_token(("pairs", index, field), pair.get(field))) is not None
        }
        if pair.get("enabled", True) is not False:
            pairs.append((index, assets))
        if len(assets) == 2 and assets["base"] != assets["quote"]:
            key = frozenset(assets.values())
            if key in seen:
                errors.append(
                    (("pairs", index), f"duplicate pair: same assets as pairs.{seen[key]}")
                )
            else:
                seen[key] = index

    prices = data.get("prices")
    raw_sources = prices.get("sources") if isinstance(prices, Mapping) else None
    max_age_ms = _int(prices, "max_age_ms", PricesSpec)
    priced: set[str] = set()
    coverage_known = isinstance(raw_sources, list)
    for index, source in enumerate(raw_sources if isinstance(raw_sources, list) else ()):
        loc: Loc = ("prices", "sources", index)
        kind = source.get("kind") if isinstance(source, Mapping) else None
        if not isinstance(source, Mapping) or kind not in SOURCE_KINDS:
            coverage_known = False
            continue
        if kind == "static":
            table = source.get("prices")
            for asset in table if isinstance(table, Mapping) else ():
                if need_token((*loc, "prices", asset), asset) is not None:
                    priced.add(asset)
            continue
        refresh_ms = _int(source, "refresh_ms", _SOURCE_MODELS[kind])
        if refresh_ms is not None and max_age_ms is not None and refresh_ms >= max_age_ms:
            errors.append(
                (
                    (*loc, "refresh_ms"),
                    f"must be less than prices.max_age_ms ({max_age_ms}), "
                    "or its prices go stale between refreshes",
                )
            )
        if kind == "sandbox":
            coverage_known = False  # the sandbox feed prices every sandbox token
            continue
        if kind == "bus_quote":
            need_token((*loc, "quote_asset"), source.get("quote_asset"))
        asset = need_token((*loc, "asset"), source.get("asset"))
        if asset is None:
            coverage_known = False
        else:
            priced.add(asset)
    if coverage_known:
        for index, assets in pairs:
            for field, asset in assets.items():
                if asset not in priced:
                    errors.append(
                        (
                            ("pairs", index, field),
                            f"no source in prices.sources gives a price for {asset}",
                        )
                    )

    risk = data.get("risk")
    for field in ("floors", "max_open_per_token", "max_reconciliation_mismatch"):
        table = risk.get(field) if isinstance(risk, Mapping) else None
        for asset in table if isinstance(table, Mapping) else ():
            need_token(("risk", field, asset), asset)

    rebalance = data.get("rebalance")
    if isinstance(rebalance, Mapping):
        bands = rebalance.get("bands")
        for asset in bands if isinstance(bands, Mapping) else ():
            need_token(("rebalance", "bands", asset), asset)
        need_token(("rebalance", "counter_asset"), rebalance.get("counter_asset"))
        if rebalance.get("enabled") is True and data.get("swap_api") is None:
            errors.append((("rebalance", "enabled"), "the rebalancer needs the swap_api section"))

    wait_ms = _int(data.get("bus"), "wait_ms", BusSpec)
    budget_ms = _int(data.get("quote"), "response_budget_ms", QuoteSpec)
    if wait_ms is not None and budget_ms is not None and budget_ms > wait_ms:
        errors.append(
            (
                ("quote", "response_budget_ms"),
                f"must not exceed bus.wait_ms ({wait_ms}): later answers are dropped",
            )
        )
    return errors


_SOURCE_MODELS: dict[str, type[BaseModel]] = {
    "static": StaticPriceSource,
    "sandbox": SandboxPriceSource,
    "http_json": HttpJsonPriceSource,
    "bus_quote": BusQuotePriceSource,
}


# --------------------------------------------------------------------------------- secrets

_B58 = "1-9A-HJ-NP-Za-km-z"
_SECRET_KEY_RE = re.compile(rf"ed25519:[{_B58}]{{80,}}")
_REDACT_RE = re.compile(rf"(?:ed25519:)?[{_B58}]{{40,}}")
_SECRET_NAME_RE = re.compile(
    r"(?:^|_)(?:secret|private|priv|seed|mnemonic|password|passwd|passphrase)(?:_|$)"
    r"|^(?:(?:signing|api|access|auth|bearer)_)?(?:key|token)$|^sk$"
)
_NAME_SUFFIXES = ("_env", "_file", "_path", "_name")
_KEYLIKE_RE = re.compile(r"(?:ed25519|secp256k1):\S+|(?:0x)?[0-9a-fA-F]{64,}|[A-Za-z0-9+/=_-]{32,}")
REDACTED = "<redacted>"


def redact(text: str) -> str:
    """Hide anything shaped like a key or signature (long base58 runs) in an error line."""
    return _REDACT_RE.sub(REDACTED, text)


def _secret_named(name: str) -> bool:
    norm = name.strip().lower().replace("-", "_")
    return not norm.endswith(_NAME_SUFFIXES) and bool(_SECRET_NAME_RE.search(norm))


def find_secrets(data: Any, loc: Loc = ()) -> list[Loc]:
    """Paths in raw YAML data holding what looks like a secret key (never the values).

    A string (value or mapping key) containing ``ed25519:`` and 80+ base58 characters is the
    text form of a secret key; a key-like string under a name such as ``secret``, ``key`` or
    ``private_key`` is one too.
    """
    found: list[Loc] = []
    if isinstance(data, Mapping):
        for key, value in data.items():
            name = str(key)
            if _SECRET_KEY_RE.search(name):
                found.append((*loc, REDACTED))
                continue
            here = (*loc, name)
            if (
                _secret_named(name)
                and isinstance(value, str)
                and _KEYLIKE_RE.fullmatch(value.strip())
            ):
                found.append(here)
            else:
                found.extend(find_secrets(value, here))
    elif isinstance(data, list | tuple):
        for index, value in enumerate(data):
            found.extend(find_secrets(value, (*loc, index)))
    elif isinstance(data, str) and _SECRET_KEY_RE.search(data):
        found.append(loc)
    return found


_PASTED_KEY_HINT = (
    "looks like a secret key; secrets never go in the config file: put the key in the "
    "environment variable named by account.key_env, or in a 0600 file named by account.key_file"
)


# --------------------------------------------------------------------------------- loading


class BotConfigError(ConfigError):
    """Every problem of one configuration: ``problems`` holds ``path: message`` lines."""

    def __init__(self, source: str, problems: Sequence[str]) -> None:
        self.source = source
        self.problems = tuple(problems)
        super().__init__("\n".join(self.lines()))

    def lines(self) -> list[str]:
        """One line per problem, ``<source>: <yaml path>: <message>``."""
        return [f"{self.source}: {problem}" for problem in self.problems]


def yaml_path(loc: Loc) -> str:
    """``pairs.0.max_notional_usd`` from a pydantic location (union tags dropped)."""
    parts: list[str] = []
    for i, part in enumerate(loc):
        previous = loc[i - 1] if i else None
        if part in SOURCE_KINDS and isinstance(previous, int):
            continue  # the discriminated union's tag, not a YAML key
        if part == "[key]":
            parts[-1:] = [f"{parts[-1]} (key)"] if parts else ["(key)"]
            continue
        parts.append(str(part))
    return ".".join(parts) or "(top level)"


def _message(err: Mapping[str, Any]) -> str:
    msg = str(err["msg"])
    for prefix in ("Value error, ", "Assertion failed, "):
        msg = msg.removeprefix(prefix)
    if err["type"] == "extra_forbidden":
        msg = "unknown key (not allowed here; check its spelling and indentation)"
    return msg


def validate_bot_config(data: Any, *, source: str = "config") -> BotConfig:
    """Validate raw (YAML-shaped) data; a :class:`BotConfigError` lists every problem."""
    if data is None:
        raise BotConfigError(source, ["(top level): the configuration is empty"])
    if not isinstance(data, Mapping):
        raise BotConfigError(source, ["(top level): must be a mapping of keys"])
    secrets = find_secrets(data)
    problems = [f"{yaml_path(loc)}: {_PASTED_KEY_HINT}" for loc in secrets]
    try:
        config = BotConfig.model_validate(data)
    except ValidationError as exc:
        seen = set(problems)
        secret_paths = {yaml_path(loc) for loc in secrets}
        found = [(tuple(err["loc"]), _message(err)) for err in exc.errors()]
        cross = _cross_errors(data)
        for loc, msg in [*found, *cross]:
            if yaml_path(loc) in secret_paths:
                continue
            line = redact(f"{yaml_path(loc)}: {msg}")
            if line not in seen:
                seen.add(line)
                problems.append(line)
        raise BotConfigError(source, problems) from None
    if problems:
        raise BotConfigError(source, problems)
    return config


class _UniqueKeyLoader(yaml.SafeLoader):
    """A safe loader that refuses a key given twice in one mapping (PyYAML keeps the last)."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            duplicate = key in seen
        except TypeError:
            continue  # an unhashable key: construct_mapping reports it
        if duplicate:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping",
                node.start_mark,
                f"found duplicate key {redact(str(key))!r}",
                key_node.start_mark,
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=True)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def parse_yaml(text: str, source: str) -> Any:
    """Parse YAML text; an error gives the line and column but never the line's text."""
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        what = ": ".join(p for p in (exc.context, exc.problem) if p)
        raise BotConfigError(source, [redact(f"invalid YAML: {where}{what}")]) from None
    except yaml.YAMLError:
        raise BotConfigError(source, ["invalid YAML"]) from None


def load_bot_config(path: str | Path, overrides: Mapping[str, Any] | None = None) -> BotConfig:
    """Read, override (dotted keys, see :func:`apply_overrides`) and validate a YAML file.

    Raises :class:`BotConfigError` (a :class:`ConfigError`) listing every problem with its
    YAML path, or :class:`ConfigError` when the file cannot be read.
    """
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read {file}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{file} is not UTF-8 text") from None
    data = parse_yaml(text, str(file))
    if overrides:
        if not isinstance(data, Mapping):
            raise BotConfigError(str(file), ["(top level): must be a mapping of keys"])
        data = apply_overrides(data, overrides)
    return validate_bot_config(data, source=str(file))


# -------------------------------------------------------------------------------- overrides

_SEGMENT_RE = re.compile(r"\[([^\]]*)\]|([^.\[\]]+)")


def _split_dotted(key: str) -> list[str]:
    segments: list[str] = []
    pos = 0
    while pos < len(key):
        match = _SEGMENT_RE.match(key, pos)
        if match is None:
            raise ConfigError(f"override {redact(key)!r}: cannot parse the key path")
        segments.append(match.group(1) if match.group(1) is not None else match.group(2))
        pos = match.end()
        if pos < len(key):
            if key[pos] == ".":
                pos += 1
                if pos == len(key):
                    raise ConfigError(f"override {redact(key)!r}: ends with a dot")
            elif key[pos] != "[":
                raise ConfigError(f"override {redact(key)!r}: cannot parse the key path")
    if not segments:
        raise ConfigError("override with an empty key")
    return segments


def apply_overrides(data: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy of ``data`` with each dotted key of ``overrides`` set to its value.

    ``bus.ws_url``, ``pairs.0.params.spread_bps`` (digits index lists). Keys containing dots,
    like asset ids, go in brackets: ``risk.floors[nep141:usdc.near]``; a dotted run that names a
    key already present is also found without them. Missing mappings on the way are created.
    """
    result: dict[str, Any] = copy.deepcopy(dict(data))
    for dotted, value in overrides.items():
        segments = _split_dotted(dotted)
        node: Any = result
        i = 0
        while True:
            if isinstance(node, list):
                segment = segments[i]
                if not segment.isdigit() or int(segment) >= len(node):
                    raise ConfigError(
                        f"override {redact(dotted)!r}: {segment!r} is not an index of the "
                        f"list at {'.'.join(segments[:i]) or '(top level)'} "
                        f"({len(node)} items)"
                    )
                key: Any = int(segment)
                step = 1
            elif isinstance(node, dict):
                # The longest run of segments naming an existing key (asset ids hold dots).
                step = 1
                for j in range(len(segments), i + 1, -1):
                    if ".".join(segments[i:j]) in node:
                        step = j - i
                        break
                key = ".".join(segments[i : i + step])
            else:
                raise ConfigError(
                    f"override {redact(dotted)!r}: {'.'.join(segments[:i])} is not a mapping "
                    "or a list"
                )
            i += step
            if i == len(segments):
                node[key] = copy.deepcopy(value)
                break
            if isinstance(node, dict) and (key not in node or node[key] is None):
                node[key] = {}
            node = node[key]
    return result


# -------------------------------------------------------------------------------- key, output


def load_signing_key(account: AccountSpec) -> SecretKey:
    """Load the account's secret key from its source; errors name the source, not the key.

    For an implicit account (64 hex) the key must be the account's own.
    """
    if account.key_env is not None:
        where = "account.key_env"
        try:
            key = load_secret_key(env=account.key_env)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {redact(str(exc))}") from None
    else:
        where = "account.key_file"
        try:
            key = load_secret_key(path=account.key_file)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {redact(str(exc))}") from None
    if is_implicit_account(account.id) and key.public_key.implicit_account_id() != account.id:
        raise ConfigError(
            f"account.id: {account.id} is an implicit account, but the key from {where} is "
            f"{key.public_key.to_text()}, whose implicit account is "
            f"{key.public_key.implicit_account_id()}"
        )
    return key


_ENV_NAME_FIELDS = frozenset({"key_env", "api_key_env", "headers_env", "token_env"})


def redacted_dump(config: BotConfig) -> dict[str, Any]:
    """The configuration as JSON-ready data, safe to print or log.

    Environment variable names are shown as ``$NAME``: the value is read at run time and never
    shown. No secret values exist in a valid config; long key-shaped strings are redacted anyway.
    """

    def walk(value: Any, name: str | None) -> Any:
        if isinstance(value, dict):
            return {redact(str(k)): walk(v, str(k)) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v, None) for v in value]
        if isinstance(value, str):
            if name in _ENV_NAME_FIELDS:
                return f"${value}"
            return redact(value)
        return value

    dumped = walk(config.model_dump(mode="json"), None)
    assert isinstance(dumped, dict)
    return dumped
