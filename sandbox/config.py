"""Configuration of the sandbox (``config/sandbox.yaml``), validated with pydantic.

Every key is documented in ``config/sandbox.yaml`` itself. Units are in the key names.
Secrets never live here: account keys come from environment variables named in the file, or
are generated and written to owner-only files under ``state_dir``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from sandbox.nonce_policy import NoncePolicy
from solver.errors import ConfigError
from solver.protocol.amounts import U128
from solver.protocol.ids import AccountId, AssetId, ChainId

_STRICT = ConfigDict(extra="forbid", frozen=True)


class TokenSpec(BaseModel):
    """One token of the sandbox and its reference price process (GBM in USD)."""

    model_config = _STRICT
    symbol: str
    decimals: Annotated[int, Field(ge=0, le=38)]
    usd: Annotated[float, Field(gt=0)]
    volatility_annual: Annotated[float, Field(ge=0, le=10)] = 0.0


class PairSpec(BaseModel):
    """A pair that takers trade, in both directions."""

    model_config = _STRICT
    base: AssetId
    quote: AssetId
    weight: Annotated[float, Field(gt=0)] = 1.0


class TakersSpec(BaseModel):
    """Simulated users: Poisson arrivals, lognormal sizes in USD, a price tolerance."""

    model_config = _STRICT
    enabled: bool = True
    count: Annotated[int, Field(ge=0, le=10_000)] = 5
    requests_per_s: Annotated[float, Field(ge=0, le=10_000)] = 2.0
    size_usd_median: Annotated[float, Field(gt=0)] = 50.0
    size_usd_sigma: Annotated[float, Field(ge=0, le=5)] = 0.8
    tolerance_bps: Annotated[float, Field(ge=0, le=10_000)] = 60.0
    exact_out_share: Annotated[float, Field(ge=0, le=1)] = 0.3
    min_deadline_ms: Annotated[int, Field(ge=0)] = 60_000
    wait_ms: Annotated[int, Field(ge=0, le=3000)] = 1000
    funding_usd: Annotated[float, Field(gt=0)] = 100_000.0
    pairs: list[PairSpec] = Field(default_factory=list)


class FundedAccount(BaseModel):
    """An account the sandbox funds at start (the demo solver among them).

    ``key_env`` names an environment variable with the account's ``ed25519:`` secret key; when
    unset or empty the sandbox generates a key and writes it to ``<state_dir>/<name>.key``
    (mode 0600). ``account_id`` defaults to the key's implicit account.
    """

    model_config = _STRICT
    name: Annotated[str, Field(pattern=r"^[a-z0-9_-]{1,32}$")]
    account_id: AccountId | None = None
    key_env: str | None = None
    balances: dict[AssetId, U128] = Field(default_factory=dict)


class BusSpec(BaseModel):
    model_config = _STRICT
    solver_wait_ms: Annotated[int, Field(ge=1, le=3000)] = 3000
    asset_field_prefix: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]{0,31}$")] = "core"
    api_key_env: str | None = None
    max_frame_bytes: Annotated[int, Field(ge=1024, le=16 << 20)] = 1 << 20
    settlement_delay_ms: Annotated[int, Field(ge=0, le=60_000)] = 300


class PricesSpec(BaseModel):
    model_config = _STRICT
    tick_ms: Annotated[int, Field(ge=10, le=60_000)] = 250


class SwapSpec(BaseModel):
    """The swap API ({base_url}) and history API ({api_url}) of the sandbox (docs/swap-api.md).

    Secrets are named, never stored: ``service_key_env`` names an environment variable with the
    ed25519 key that signs quotes (unset or empty: generated into
    ``<state_dir>/swap_service.key``), ``jwt_secret_env`` one with the HS256 secret that partner
    tokens are verified with (unset or empty: generated into ``<state_dir>/swap_jwt.secret``).
    """

    model_config = _STRICT
    service_key_env: str | None = "SANDBOX_SWAP_SERVICE_KEY"
    jwt_secret_env: str | None = "SANDBOX_SWAP_JWT_SECRET"
    platform_fee_bps: Annotated[int, Field(ge=0, le=1000)] = 20
    fee_account: AccountId = "fees.swap.sandbox"
    memo_deposit_account: AccountId = "memo.swap.sandbox"
    quote_validity_ms: Annotated[int, Field(ge=1000, le=86_400_000)] = 60_000
    min_deadline_ms: Annotated[int, Field(ge=0, le=86_400_000)] = 10_000
    refund_fee_usd: Annotated[float, Field(ge=0, le=1000)] = 0.01
    time_estimate_s: Annotated[int, Field(ge=0, le=86_400)] = 10
    poll_interval_ms: Annotated[int, Field(ge=10, le=60_000)] = 250
    stop_watching_after_ms: Annotated[int, Field(ge=0)] = 3_600_000
    database: Path | None = None
    explorer_tx_url: Annotated[str, Field(pattern=r"\{hash\}")] = (
        "https://explorer.sandbox.invalid/tx/{hash}"
    )
    chains: dict[AssetId, ChainId] = Field(default_factory=dict)
    test_referral_prefix: Annotated[str, Field(min_length=1)] = "test"
    test_accounts: list[AccountId] = Field(default_factory=list)
    max_body_bytes: Annotated[int, Field(ge=1024, le=16 << 20)] = 65_536


class SandboxConfig(BaseModel):
    """The whole sandbox. ``nonces`` is the verifier's nonce policy (:mod:`sandbox.nonce_policy`:
    ``spec`` requires a salt, ``deployed`` also takes legacy nonces); ``wrapped_native`` is the
    token ``storage_deposit`` is paid with (spec 2.12) and must be one of ``tokens``."""

    model_config = _STRICT
    verifier_contract: AccountId = "intents.sandbox"
    fee_pips: Annotated[int, Field(ge=0, lt=1_000_000)] = 0
    nonces: NoncePolicy = "spec"
    wrapped_native: AssetId = "nep141:wrap.sandbox"
    seed: int = 7
    state_dir: Path = Path("var/sandbox")
    tokens: dict[AssetId, TokenSpec]
    bus: BusSpec = Field(default_factory=BusSpec)
    prices: PricesSpec = Field(default_factory=PricesSpec)
    takers: TakersSpec = Field(default_factory=TakersSpec)
    swap: SwapSpec = Field(default_factory=SwapSpec)
    accounts: list[FundedAccount] = Field(default_factory=list)

    @field_validator("tokens")
    @classmethod
    def _some_tokens(cls, value: dict[str, TokenSpec]) -> dict[str, TokenSpec]:
        if not value:
            raise ValueError("at least one token is needed")
        return value

    @model_validator(mode="after")
    def _wrapped_native_is_a_token(self) -> SandboxConfig:
        if self.tokens and self.wrapped_native not in self.tokens:
            raise ValueError(
                f"wrapped_native: {self.wrapped_native} is not in tokens "
                "(storage_deposit is paid with it, so the sandbox must know and fund it)"
            )
        return self


def format_validation_error(exc: ValidationError, source: str) -> str:
    """Every error with its YAML path, one per line."""
    lines = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        lines.append(f"{source}: {where}: {err['msg']}")
    return "\n".join(lines)


def load_yaml(path: str | Path) -> Any:
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read {file}: {exc.strerror}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{file}: invalid YAML: {exc}") from None


def load_sandbox_config(path: str | Path) -> SandboxConfig:
    data = load_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping")
    try:
        config = SandboxConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, str(path))) from None
    for pair in config.takers.pairs:
        for asset in (pair.base, pair.quote):
            if asset not in config.tokens:
                raise ConfigError(f"{path}: takers.pairs: {asset} is not in tokens")
    for asset in config.swap.chains:
        if asset not in config.tokens:
            raise ConfigError(f"{path}: swap.chains: {asset} is not in tokens")
    for account in config.accounts:
        for asset in account.balances:
            if asset not in config.tokens:
                raise ConfigError(
                    f"{path}: accounts.{account.name}.balances: {asset} is not in tokens"
                )
    return config
