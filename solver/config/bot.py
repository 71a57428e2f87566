"""The whole configuration, :class:`BotConfig`, and its validation from raw YAML data: every
problem at once with its YAML path, including the checks across sections (a pair's asset must
be in ``tokens``, no duplicate pairs, ...), which run even when another section has errors.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from solver.config.alerts import AlertsConfig
from solver.config.fields import STRICT, Loc
from solver.config.overrides import apply_overrides
from solver.config.prices import SOURCE_KINDS, SOURCE_MODELS, PricesSpec
from solver.config.problems import BotConfigError, pydantic_message, yaml_path
from solver.config.rebalance import RebalanceSpec
from solver.config.secrets import PASTED_KEY_HINT, find_secrets, redact
from solver.config.sections import (
    KEY_SOURCE_MESSAGE,
    REMOTE_KEY_MESSAGE,
    AccountSpec,
    BusSpec,
    ChainSpec,
    HistoryApiSpec,
    LogSpec,
    MetricsSpec,
    NonceSpec,
    PairSpec,
    QuoteSpec,
    RiskSpec,
    SwapApiSpec,
    TokenSpec,
)
from solver.config.shadow import ShadowSpec
from solver.config.signer import SignerLinkSpec
from solver.config.storage import StorageSpec
from solver.config.strategies import strategy_problems
from solver.protocol.ids import AccountId, AssetId, validate_asset_id


class BotConfig(BaseModel):
    """The whole configuration of the bot."""

    model_config = STRICT
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
    shadow: ShadowSpec = Field(default_factory=ShadowSpec)
    swap_api: SwapApiSpec | None = None
    history_api: HistoryApiSpec | None = None
    rebalance: RebalanceSpec = Field(default_factory=RebalanceSpec)
    alerts: AlertsConfig = Field(default_factory=AlertsConfig)
    signer: SignerLinkSpec = Field(default_factory=SignerLinkSpec)

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
        signer = data.get("signer")
        remote = isinstance(signer, Mapping) and signer.get("mode") == "remote"
        if remote and given:
            errors.append((("account",), REMOTE_KEY_MESSAGE))
        elif not remote and given != 1:
            errors.append((("account",), KEY_SOURCE_MESSAGE))

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

    errors.extend(strategy_problems(raw_pairs))

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
        refresh_ms = _int(source, "refresh_ms", SOURCE_MODELS[kind])
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


def validate_bot_config(data: Any, *, source: str = "config") -> BotConfig:
    """Validate raw (YAML-shaped) data; a :class:`BotConfigError` lists every problem."""
    if data is None:
        raise BotConfigError(source, ["(top level): the configuration is empty"])
    if not isinstance(data, Mapping):
        raise BotConfigError(source, ["(top level): must be a mapping of keys"])
    secrets = find_secrets(data)
    problems = [f"{yaml_path(loc)}: {PASTED_KEY_HINT}" for loc in secrets]
    try:
        config = BotConfig.model_validate(data)
    except ValidationError as exc:
        seen = set(problems)
        secret_paths = {yaml_path(loc) for loc in secrets}
        found = [(tuple(err["loc"]), pydantic_message(err)) for err in exc.errors()]
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
