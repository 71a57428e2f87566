"""Backtest-only settings: what the bot YAML does not (and must not) describe.

The replay takes the bot's own YAML (:class:`~solver.config.BotConfig`: tokens, pairs and
strategies, risk, quote timing) unchanged, so a configuration is tested exactly as it would run.
``BotConfig`` forbids unknown keys, so everything that only exists in a simulation lives here,
in a small YAML given with ``solver backtest run --backtest-config FILE`` (every key optional;
``config/backtest.yaml`` documents each one with its default)::

    balances:                  # starting balances of the solver, smallest units (quoted strings)
      nep141:usdc.sandbox: "100000000000"
    starting_usd: 100000       # tokens not in ``balances`` start with this much USD at first price
    settlement_delay_ms: 1000  # a won quote settles this long after its request
    fee_pips: 0                # the ledger's protocol fee (1 pip = 1e-6)
    latency: {kind: lognormal, median_ms: 40, sigma: 0.5}  # or {kind: fixed, ms: 0}
    fill:                                  # always | competitor | logistic (with a, b)
      model: competitor
      taker: {kind: lognormal, tolerance_bps: 60, sigma: 0.5, max_bps: 500}
      unobserved: {mode: model, prior: null, min_observed: 20, window: 500}
    seed: 0                    # numpy / nonce randomness; same seed, same result
    sign: false                # sign quotes and settle through the verifier's full checks
    kill_switch: true          # the desk's PnL and stale-data kill switch (false: off)
    hedge_cost_bps: null       # the report's hedged view: each fill hedged at this cost

Command-line options (``--fill-model``, ``--seed``, ``--sign``) override the file. The output of
``solver backtest calibrate`` is itself a valid file of this kind (a ``fill`` section).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from solver.config import Amount, parse_yaml, yaml_path
from solver.config.problems import pydantic_message
from solver.errors import ConfigError
from solver.protocol.ids import AccountId, AssetId

_STRICT = ConfigDict(extra="forbid", frozen=True)

FillModelName = Literal["always", "competitor", "logistic"]
FILL_MODELS: tuple[FillModelName, ...] = ("always", "competitor", "logistic")


class LatencySpec(BaseModel):
    """Time from a request to our answer reaching the bus (network + decision).

    ``fixed``: always ``ms``. ``lognormal`` (the default): ``median_ms * exp(sigma * N(0, 1))``.
    The decision runs at ``request ts + latency``; an answer later than ``bus.wait_ms`` loses.
    The default is not zero because no answer is instantaneous: the bot decides in about 1 ms
    (benchmarks/quote_path.md: p50 0.86 ms, p99 2.7 ms at 500 requests/s on loopback); the rest
    of the 40 ms median is an assumed network round trip to the relay, not a measurement
    (docs/backtest.md, "Reading a backtest before trusting it": measure yours).
    """

    model_config = _STRICT
    kind: Literal["fixed", "lognormal"] = "lognormal"
    ms: Annotated[float, Field(ge=0, le=60_000, allow_inf_nan=False)] = 0.0
    median_ms: Annotated[float, Field(gt=0, le=60_000, allow_inf_nan=False)] = 40.0
    sigma: Annotated[float, Field(ge=0, le=10, allow_inf_nan=False)] = 0.5


class TakerSpec(BaseModel):
    """How much worse than the reference price a user still accepts (:mod:`backtest.takers`).

    Every fill model consults it, so an answer nobody competed with is still refused when it
    charges the user more than their limit. ``fixed``: every user's limit is ``tolerance_bps``
    (the sandbox takers' rule). ``lognormal``: each request's limit is ``tolerance_bps *
    exp(sigma * N(0, 1))`` (``tolerance_bps`` is the median), never above ``max_bps``.
    """

    model_config = _STRICT
    kind: Literal["fixed", "lognormal"] = "lognormal"
    tolerance_bps: Annotated[float, Field(ge=0, le=5_000, allow_inf_nan=False)] = 60.0
    """The limit (``fixed``) or its median (``lognormal``), in bps of what the user pays."""
    sigma: Annotated[float, Field(ge=0, le=3, allow_inf_nan=False)] = 0.5
    max_bps: Annotated[float, Field(ge=0, le=5_000, allow_inf_nan=False)] = 500.0
    """No user accepts an answer worse than this, whatever the draw."""


class CompetitionPrior(BaseModel):
    """The competition assumed where none was observed at all: the best competitor's edge
    against the reference, bps given to the user (negative: it charges), normal."""

    model_config = _STRICT
    edge_bps: Annotated[float, Field(ge=-1_000, le=1_000, allow_inf_nan=False)]
    sd_bps: Annotated[float, Field(gt=0, le=1_000, allow_inf_nan=False)]


class UnobservedSpec(BaseModel):
    """Requests without an observed competitor (:mod:`backtest.unobserved`), ``competitor``
    model only. ``model`` (default): race a competitor drawn from the ones observed (per pair,
    size and time of day), or from ``prior`` before any was observed; ``exclude``: never filled
    (lost ``unobserved``); ``uncontested``: won whenever the taker accepts (the assumption that
    nobody else answered: an upper bound, and the sandbox's parity test)."""

    model_config = _STRICT
    mode: Literal["model", "exclude", "uncontested"] = "model"
    prior: CompetitionPrior | None = None
    min_observed: Annotated[int, Field(ge=1, le=1_000_000)] = 20
    """Observations a bucket needs before its competitors are drawn from (else a coarser one)."""
    window: Annotated[int, Field(ge=1, le=1_000_000)] = 500
    """The most recent observed competitors kept per bucket: the model follows the market."""


class RaceSpec(BaseModel):
    """When our answer equals the best competitor's, the one that reached the relay first wins
    (:class:`backtest.unobserved.Race`). The competitor's latency is drawn per request,
    ``median_ms * exp(sigma * N(0, 1))``; the default is the default of our own (a race between
    equals: about half the ties each). ``median_ms: 0``: the competitor always answers first
    (every tie lost, as before issue 25)."""

    model_config = _STRICT
    median_ms: Annotated[float, Field(ge=0, le=60_000, allow_inf_nan=False)] = 40.0
    sigma: Annotated[float, Field(ge=0, le=10, allow_inf_nan=False)] = 0.5


class FillSpec(BaseModel):
    """Which quotes win (see :mod:`backtest.fills`); ``a`` and ``b`` are the logistic's, and
    ``taker`` the limit every model applies first."""

    model_config = _STRICT
    model: FillModelName = "competitor"
    a: Annotated[float, Field(allow_inf_nan=False)] = 0.0
    """Log-odds of winning at zero edge."""
    b: Annotated[float, Field(allow_inf_nan=False)] = 0.05
    """Change of the log-odds per basis point of edge given to the user."""
    fitted: Literal["competition", "joint"] = "competition"
    """What ``a`` and ``b`` describe (``logistic``): ``competition``, beating the competitor
    (the taker is applied first, then the curve); ``joint``, the user taking the answer at all
    (fitted from a store, where refusals and lost races look alike: the taker is already in the
    curve and is not applied again)."""
    taker: TakerSpec = Field(default_factory=TakerSpec)
    unobserved: UnobservedSpec = Field(default_factory=UnobservedSpec)
    race: RaceSpec = Field(default_factory=RaceSpec)


class BacktestSettings(BaseModel):
    model_config = _STRICT
    balances: dict[AssetId, Amount] = Field(default_factory=dict)
    starting_usd: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 100_000.0
    settlement_delay_ms: Annotated[int, Field(ge=0, le=3_600_000)] = 1000
    fee_pips: Annotated[int, Field(ge=0, lt=1_000_000)] = 0
    latency: LatencySpec = Field(default_factory=LatencySpec)
    fill: FillSpec = Field(default_factory=FillSpec)
    seed: Annotated[int, Field(ge=0, lt=2**63)] = 0
    sign: bool = False
    kill_switch: bool = True
    """Build the desk with its daily-loss, drawdown and stale-data checks (as live)."""
    user_account: AccountId = "user.backtest"
    """The simulated taker: effectively unlimited funds, mirrors every won quote."""
    hedge_cost_bps: Annotated[float, Field(ge=0, le=1_000, allow_inf_nan=False)] | None = None
    """The report's hedged view (:mod:`backtest.report.stats`): each fill's change of inventory
    hedged at the reference price at this cost, bps of its notional; None: no hedged view."""
    lookahead_events: Annotated[int, Field(ge=1, le=10_000_000)] = 100_000
    """How far the replay reads ahead for the first price of each token it may hold (default
    balances, starting equity)."""


def validate_settings(data: Any, source: str = "backtest config") -> BacktestSettings:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: (top level): must be a mapping of keys")
    try:
        return BacktestSettings.model_validate(data)
    except ValidationError as exc:
        lines = [
            f"{source}: {yaml_path(tuple(e['loc']))}: {pydantic_message(e)}" for e in exc.errors()
        ]
        raise ConfigError("\n".join(lines)) from None


def load_settings(path: str | Path | None, **overrides: Any) -> BacktestSettings:
    """Read ``path`` (or the defaults), then apply the non-None ``overrides`` (CLI options).

    ``fill_model`` sets ``fill.model``; other keys are top-level settings.
    """
    data: dict[str, Any] = {}
    source = "backtest config"
    if path is not None:
        file = Path(path)
        source = str(file)
        try:
            text = file.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read {file}: {exc.strerror}") from None
        loaded = parse_yaml(text, source)
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"{source}: (top level): must be a mapping of keys")
        data = dict(loaded or {})
    for key, value in overrides.items():
        if value is None:
            continue
        if key == "fill_model":
            data["fill"] = {**dict(data.get("fill") or {}), "model": value}
        else:
            data[key] = value
    return validate_settings(data, source)
