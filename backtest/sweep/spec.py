"""The sweep file: what to try (a grid, random samples, or an Optuna TPE search over a space),
how to rank (the objective) and how to check for overfitting (walk-forward), and the candidates
it expands to, each validated before anything runs.

Keys are dotted paths of the bot YAML (:func:`solver.config.apply_overrides`: list indexes are
digits, keys holding dots go in brackets); keys starting with ``backtest.`` set the backtest
settings (:mod:`backtest.settings`) instead. The format is in ``docs/backtest.md`` ("Sweeps").
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from backtest.report.tables import usd
from backtest.settings import validate_settings
from solver.config import apply_overrides, parse_yaml, validate_bot_config, yaml_path
from solver.errors import ConfigError, SolverError
from solver.runtime.wiring import build_routes

BACKTEST_PREFIX = "backtest."
MAX_CANDIDATES = 100_000
ObjectiveKind = Literal[
    "pnl_over_hold", "pnl_minus_inventory_risk", "pnl", "realized_pnl", "pnl_minus_drawdown"
]
ExecutorName = Literal["local", "dask"]

_STRICT = ConfigDict(extra="forbid", frozen=True)


class SweepError(SolverError):
    """A sweep that cannot run (bad sweep file, every candidate invalid, a worker crash)."""


# ------------------------------------------------------------------------------ the sweep file


class RandomKey(BaseModel):
    """One dimension of the random space: ``choices``, or a range ``low``..``high``
    (``log``: log-uniform, ``int``: rounded to an integer; floats keep ``digits`` significant
    digits)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    low: Annotated[float, Field(allow_inf_nan=False)] | None = None
    high: Annotated[float, Field(allow_inf_nan=False)] | None = None
    log: bool = False
    integer: bool = Field(default=False, alias="int")
    digits: Annotated[int, Field(ge=1, le=17)] = 6
    choices: list[Any] | None = None

    @model_validator(mode="after")
    def _check(self) -> RandomKey:
        if self.choices is not None:
            if not self.choices:
                raise ValueError("choices must not be empty")
            if self.low is not None or self.high is not None or self.log or self.integer:
                raise ValueError("give either choices or low/high, not both")
            return self
        if self.low is None or self.high is None:
            raise ValueError("give low and high (or choices)")
        if self.low > self.high:
            raise ValueError("low must not exceed high")
        if self.log and self.low <= 0:
            raise ValueError("log needs low > 0")
        return self

    def draw(self, rng: np.random.Generator) -> Any:
        """One value; exactly one draw from ``rng`` whatever the kind (so keys stay aligned)."""
        u = float(rng.random())
        if self.choices is not None:
            return self.choices[min(int(u * len(self.choices)), len(self.choices) - 1)]
        assert self.low is not None and self.high is not None
        if self.log:
            low, high = math.log(self.low), math.log(self.high)
            value = math.exp(low + u * (high - low))
        else:
            value = self.low + u * (self.high - self.low)
        if self.integer:
            return int(min(max(round(value), math.ceil(self.low)), math.floor(self.high)))
        value = float(f"{value:.{self.digits}g}")
        return min(max(value, self.low), self.high)


class RandomSpec(BaseModel):
    model_config = _STRICT
    samples: Annotated[int, Field(ge=1, le=MAX_CANDIDATES)]
    seed: Annotated[int, Field(ge=0, lt=2**63)] = 0
    space: dict[str, RandomKey]

    @model_validator(mode="after")
    def _check(self) -> RandomSpec:
        if not self.space:
            raise ValueError("space must name at least one key")
        return self


class ObjectiveSpec(BaseModel):
    """What ranks the candidates (higher is better), from a replay's figures:

    - ``pnl_over_hold`` (default): ``pnl_over_hold_usd``, the marked PnL less what the starting
      inventory alone made (:mod:`backtest.report.stats`). A ranking by PnL on a large inventory
      follows the price path; this one follows what quoting added, and above zero means better
      than holding;
    - ``pnl_minus_inventory_risk``: ``pnl_usd - risk_weight * inventory_risk_usd``;
    - ``pnl``: ``pnl_usd`` (marked to market); ``realized_pnl``: ``realized_pnl_usd``;
    - ``pnl_minus_drawdown``: ``pnl_usd - risk_weight * max_drawdown_usd``.
    """

    model_config = _STRICT
    kind: ObjectiveKind = "pnl_over_hold"
    risk_weight: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.1

    def score(self, metrics: Mapping[str, float]) -> float:
        if self.kind == "pnl_over_hold":
            return usd(float(metrics["pnl_over_hold_usd"]))
        pnl = float(metrics["pnl_usd"])
        if self.kind == "pnl":
            return usd(pnl)
        if self.kind == "realized_pnl":
            return usd(float(metrics["realized_pnl_usd"]))
        if self.kind == "pnl_minus_drawdown":
            return usd(pnl - self.risk_weight * float(metrics["max_drawdown_usd"]))
        return usd(pnl - self.risk_weight * float(metrics["inventory_risk_usd"]))


class WalkForwardSpec(BaseModel):
    """``splits: K``: K+1 equal windows; split i tunes on window i (``anchored``: windows
    0..i) and scores on window i+1. ``train_fraction: f``: one split, the first f of the span
    against the rest."""

    model_config = _STRICT
    splits: Annotated[int, Field(ge=1, le=100)] | None = None
    train_fraction: Annotated[float, Field(gt=0, lt=1)] | None = None
    anchored: bool = False

    @model_validator(mode="after")
    def _check(self) -> WalkForwardSpec:
        if (self.splits is None) == (self.train_fraction is None):
            raise ValueError("give exactly one of splits and train_fraction")
        return self


class TpeSpec(BaseModel):
    """An Optuna TPE search (:mod:`backtest.sweep.tpe`): ``trials`` candidates asked ``batch``
    at a time from a sampler seeded with ``seed``, over ``space`` (as ``random.space``) and the
    grid's keys (each a choice among its values). The batch is part of the search, not of the
    executor: the same file gives the same trials with any number of workers."""

    model_config = _STRICT
    trials: Annotated[int, Field(ge=1, le=10_000)]
    seed: Annotated[int, Field(ge=0, lt=2**32)] = 0
    batch: Annotated[int, Field(ge=1, le=256)] = 4
    startup_trials: Annotated[int, Field(ge=1, le=10_000)] = 10
    """Trials drawn at random before TPE models the results (Optuna's ``n_startup_trials``)."""
    space: dict[str, RandomKey] = Field(default_factory=dict)


class SweepSpec(BaseModel):
    model_config = _STRICT
    grid: dict[str, list[Any]] = Field(default_factory=dict)
    random: RandomSpec | None = None
    tpe: TpeSpec | None = None
    objective: ObjectiveSpec = Field(default_factory=ObjectiveSpec)
    walk_forward: WalkForwardSpec | None = None

    @model_validator(mode="after")
    def _check(self) -> SweepSpec:
        for key, values in self.grid.items():
            if not values:
                raise ValueError(f"grid {key}: give at least one value")
        if self.random is not None:
            both = sorted(set(self.grid) & set(self.random.space))
            if both:
                raise ValueError(f"{', '.join(both)}: in both grid and random.space")
        if self.tpe is not None:
            if self.random is not None:
                raise ValueError("give random or tpe, not both (tpe.space is its space)")
            both = sorted(set(self.grid) & set(self.tpe.space))
            if both:
                raise ValueError(f"{', '.join(both)}: in both grid and tpe.space")
            if not self.grid and not self.tpe.space:
                raise ValueError("tpe needs a space: tpe.space or grid keys")
            return self
        size = math.prod(len(v) for v in self.grid.values()) * (
            self.random.samples if self.random else 1
        )
        if size > MAX_CANDIDATES:
            raise ValueError(f"{size} candidates: more than {MAX_CANDIDATES}")
        return self

    @property
    def keys(self) -> list[str]:
        """Every swept key, grid keys first, in the order written."""
        return [
            *self.grid,
            *(self.random.space if self.random else ()),
            *(self.tpe.space if self.tpe else ()),
        ]

    def searched(self, search: str | None, trials: int | None = None) -> SweepSpec:
        """The spec for ``--search``: ``grid`` drops the random and TPE parts; ``random`` needs
        a ``random`` block; ``tpe`` turns a ``random`` block into a TPE search over the same
        space (its samples as trials, its seed) unless there is a ``tpe`` block. ``trials``
        overrides the TPE's trials. None: as written."""
        data = self.model_dump(by_alias=True, exclude_none=True)
        if search == "grid":
            data.pop("random", None)
            data.pop("tpe", None)
        elif search == "random" and self.random is None:
            raise ConfigError("--search random needs a random block in the sweep file")
        elif search == "tpe" and self.tpe is None:
            random = data.pop("random", None) or {"samples": 20, "seed": 0, "space": {}}
            data["tpe"] = {
                "trials": random["samples"],
                "seed": min(random["seed"], 2**32 - 1),
                "space": random["space"],
            }
        if trials is not None:
            if "tpe" not in data:
                raise ConfigError("--trials is for a TPE search (--search tpe)")
            data["tpe"]["trials"] = trials
        return validate_sweep(data, "sweep file (--search)")


def validate_sweep(data: Any, source: str = "sweep file") -> SweepSpec:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: (top level): must be a mapping of keys")
    try:
        return SweepSpec.model_validate(data)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            msg = str(err["msg"]).removeprefix("Value error, ")
            lines.append(f"{source}: {yaml_path(tuple(err['loc']))}: {msg}")
        raise ConfigError("\n".join(lines)) from None


def load_sweep(path: str | Path) -> SweepSpec:
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read {file}: {exc.strerror}") from None
    return validate_sweep(parse_yaml(text, str(file)), str(file))


def expand(spec: SweepSpec) -> list[dict[str, Any]]:
    """The candidates' overrides, in a fixed order: grid points in row-major order of the keys
    as written (the last key varies fastest), each with every random sample (drawn in order
    from one generator seeded with ``random.seed``, one draw per key per sample)."""
    keys = list(spec.grid)
    points = [
        dict(zip(keys, combo, strict=True)) for combo in itertools.product(*spec.grid.values())
    ]
    if spec.random is None:
        return points
    rng = np.random.default_rng(spec.random.seed)
    samples = [
        {key: dim.draw(rng) for key, dim in spec.random.space.items()}
        for _ in range(spec.random.samples)
    ]
    return [{**point, **sample} for point in points for sample in samples]


def split_overrides(overrides: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(bot overrides, backtest-settings overrides)``: ``backtest.`` keys lose the prefix."""
    bot: dict[str, Any] = {}
    backtest: dict[str, Any] = {}
    for key, value in overrides.items():
        if key.startswith(BACKTEST_PREFIX):
            backtest[key[len(BACKTEST_PREFIX) :]] = value
        else:
            bot[key] = value
    return bot, backtest


@dataclass
class Candidate:
    index: int
    overrides: dict[str, Any]
    config: dict[str, Any] = field(default_factory=dict)
    """The bot YAML data with the overrides applied (valid unless ``error``)."""
    settings: dict[str, Any] = field(default_factory=dict)
    """The backtest settings data with the overrides applied."""
    error: str | None = None


def build_candidates(
    spec: SweepSpec, base_config: Mapping[str, Any], base_settings: Mapping[str, Any]
) -> list[Candidate]:
    """Every candidate with its full configuration, validated here (bot YAML, strategy
    parameters, backtest settings) before any task runs: an invalid one is kept with its error
    and never run."""
    return [
        build_candidate(index, overrides, base_config, base_settings)
        for index, overrides in enumerate(expand(spec))
    ]


def build_candidate(
    index: int,
    overrides: dict[str, Any],
    base_config: Mapping[str, Any],
    base_settings: Mapping[str, Any],
) -> Candidate:
    """One candidate: the base files with ``overrides``, validated (``error`` if invalid)."""
    candidate = Candidate(index, overrides)
    bot, backtest = split_overrides(overrides)
    try:
        candidate.config = apply_overrides(base_config, bot)
        config = validate_bot_config(candidate.config, source=f"candidate {index}")
        build_routes(config)  # the strategies and their params
        candidate.settings = apply_overrides(base_settings, backtest)
        validate_settings(candidate.settings, f"candidate {index} (backtest)")
    except ConfigError as exc:
        candidate.error = str(exc).replace("\n", "; ")
    return candidate
