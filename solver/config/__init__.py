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

The package, by concern: :mod:`~solver.config.fields` (field types and validators),
:mod:`~solver.config.sections`, :mod:`~solver.config.prices`, :mod:`~solver.config.storage` and
:mod:`~solver.config.rebalance` (the section models),
:mod:`~solver.config.bot` (:class:`BotConfig`, the checks across sections, validation),
:mod:`~solver.config.secrets` (secret detection, redaction), :mod:`~solver.config.problems`
(errors with YAML paths), :mod:`~solver.config.overrides` (dotted keys),
:mod:`~solver.config.loading` (YAML, files, the signing key). Callers import from here.
"""

from solver.config.bot import BotConfig, validate_bot_config
from solver.config.fields import (
    Amount,
    EnvName,
    HttpUrl,
    Millis,
    NonNegativeUsd,
    PositiveAmount,
    Usd,
    WsUrl,
)
from solver.config.loading import load_bot_config, load_signing_key, parse_yaml
from solver.config.overrides import apply_overrides
from solver.config.prices import (
    SOURCE_KINDS,
    BusQuotePriceSource,
    HttpJsonPriceSource,
    PriceSource,
    PricesSpec,
    SandboxPriceSource,
    StaticPriceSource,
)
from solver.config.problems import BotConfigError, yaml_path
from solver.config.rebalance import BandSpec, RebalanceSpec
from solver.config.secrets import REDACTED, find_secrets, redact, redacted_dump
from solver.config.sections import (
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
from solver.config.storage import StorageSpec

__all__ = [
    "REDACTED",
    "SOURCE_KINDS",
    "AccountSpec",
    "Amount",
    "BandSpec",
    "BotConfig",
    "BotConfigError",
    "BusQuotePriceSource",
    "BusSpec",
    "ChainSpec",
    "EnvName",
    "HistoryApiSpec",
    "HttpJsonPriceSource",
    "HttpUrl",
    "LogSpec",
    "MetricsSpec",
    "Millis",
    "NonNegativeUsd",
    "NonceSpec",
    "PairSpec",
    "PositiveAmount",
    "PriceSource",
    "PricesSpec",
    "QuoteSpec",
    "RebalanceSpec",
    "RiskSpec",
    "SandboxPriceSource",
    "StaticPriceSource",
    "StorageSpec",
    "SwapApiSpec",
    "TokenSpec",
    "Usd",
    "WsUrl",
    "apply_overrides",
    "find_secrets",
    "load_bot_config",
    "load_signing_key",
    "parse_yaml",
    "redact",
    "redacted_dump",
    "validate_bot_config",
    "yaml_path",
]
