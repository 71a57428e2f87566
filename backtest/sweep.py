"""Parameter sweeps: many configurations of one stream, in parallel, ranked by an objective.

``solver backtest sweep`` (``docs/backtest.md``, "Sweeps") reads a sweep file::

    grid:                                   # every combination (cartesian product)
      pairs.0.params.spread_bps: [10, 20, 30]
      backtest.fill.model: [competitor, always]
    random:                                 # samples drawn from a space (numpy, seeded)
      samples: 20
      seed: 1
      space:
        risk.max_open_exposure_usd: {low: 1000, high: 100000, log: true}
        pairs.1.params.spread_bps: {low: 5, high: 50}
        pairs.1.strategy: {choices: [spread, amm]}
    objective: {kind: pnl_minus_inventory_risk, risk_weight: 0.1}
    walk_forward: {splits: 3}               # or {train_fraction: 0.7}; optional

Keys are dotted paths of the bot YAML (:func:`solver.config.apply_overrides`: list indexes are
digits, keys holding dots go in brackets); keys starting with ``backtest.`` set the backtest
settings (:mod:`backtest.settings`) instead. With both ``grid`` and ``random`` every random
sample is combined with every grid point.

Every (candidate, time segment) pair is one task, :func:`run_task`: a module-level function that
opens the stream from disk itself (the stream is never pickled), replays it with the
candidate's configuration (:class:`backtest.engine.Replay`) and returns a few figures. The same
function runs in a local process pool (``spawn``) or on a dask.distributed cluster. Results are
collected by (candidate, segment) and ranked afterwards, so the leaderboard does not depend on
the executor, the number of workers or the order in which tasks finish.

Walk-forward: the stream's time span is cut into consecutive windows. Each split tunes on a
train part (the best candidate by the objective there) and scores that candidate on the test
part that follows; in-sample against out-of-sample figures show how much of the in-sample
ranking was luck. Each segment is replayed on its own, from the configured starting balances,
with the latest price of every token before the segment carried into it.
"""

from __future__ import annotations

import concurrent.futures
import csv
import importlib
import io
import itertools
import json
import logging
import math
import multiprocessing
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import orjson
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from backtest.engine import EPOCH, Replay, micros
from backtest.events import PriceEvent, StreamEvent
from backtest.report import usd
from backtest.settings import validate_settings
from backtest.stream import KINDS, _open_bytes, parse_ts, read_stream
from solver.config import apply_overrides, parse_yaml, validate_bot_config, yaml_path
from solver.desk_wiring import build_routes
from solver.errors import ConfigError, SolverError

BACKTEST_PREFIX = "backtest."
MAX_CANDIDATES = 100_000
ObjectiveKind = Literal["pnl_minus_inventory_risk", "pnl", "realized_pnl", "pnl_minus_drawdown"]
ExecutorName = Literal["local", "dask"]
METRICS: tuple[str, ...] = (
    "pnl_usd",
    "inventory_risk_usd",
    "max_drawdown_usd",
    "realized_pnl_usd",
    "volume_usd",
    "fees_paid_usd",
    "requests",
    "quoted",
    "won",
    "win_rate",
)
"""The figures of each task, taken from :func:`backtest.report.summary` (same rounding)."""

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

    - ``pnl_minus_inventory_risk``: ``pnl_usd - risk_weight * inventory_risk_usd``;
    - ``pnl``: ``pnl_usd`` (marked to market); ``realized_pnl``: ``realized_pnl_usd``;
    - ``pnl_minus_drawdown``: ``pnl_usd - risk_weight * max_drawdown_usd``.
    """

    model_config = _STRICT
    kind: ObjectiveKind = "pnl_minus_inventory_risk"
    risk_weight: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.1

    def score(self, metrics: Mapping[str, float]) -> float:
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


class SweepSpec(BaseModel):
    model_config = _STRICT
    grid: dict[str, list[Any]] = Field(default_factory=dict)
    random: RandomSpec | None = None
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
        size = math.prod(len(v) for v in self.grid.values()) * (
            self.random.samples if self.random else 1
        )
        if size > MAX_CANDIDATES:
            raise ValueError(f"{size} candidates: more than {MAX_CANDIDATES}")
        return self

    @property
    def keys(self) -> list[str]:
        """Every swept key, grid keys first, in the order written."""
        return [*self.grid, *(self.random.space if self.random else ())]


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
    candidates = []
    for index, overrides in enumerate(expand(spec)):
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
        candidates.append(candidate)
    return candidates


# ------------------------------------------------------------------------------ time segments


@dataclass(frozen=True)
class Segment:
    """A time range ``[start_us, end_us)`` of the stream; None is open (the full stream)."""

    start_us: int | None
    end_us: int | None

    @property
    def name(self) -> str:
        if self.start_us is None and self.end_us is None:
            return "full"
        return f"{_iso(self.start_us)}..{_iso(self.end_us)}"

    def as_dict(self) -> dict[str, str | None]:
        return {"from": _iso(self.start_us), "to": _iso(self.end_us)}


@dataclass(frozen=True)
class Split:
    train: Segment
    test: Segment


FULL = Segment(None, None)


def _iso(us: int | None) -> str | None:
    if us is None:
        return None
    return (EPOCH + timedelta(microseconds=us)).isoformat(timespec="milliseconds")


def stream_span(path: str | Path) -> tuple[int, int] | None:
    """Microseconds of the first and the last event, or None for a stream without events.

    The first comes from the reader; the last from the end of the file, read as raw lines (no
    parsing on the way: about 0.4 µs a line, gzip included).
    """
    with read_stream(path) as reader:
        first = next(reader, None)
    if first is None:
        return None
    first_us = micros(first.ts)
    tail: deque[bytes] = deque(maxlen=256)
    with _open_bytes(Path(path)) as file:
        for line in file:
            if line.strip():
                tail.append(line)
    last_us = first_us
    while tail:
        line = tail.pop()
        try:
            obj = orjson.loads(line)
            if type(obj) is dict and obj.get("kind") in KINDS:
                last_us = max(first_us, micros(parse_ts(obj.get("ts"))))
                break
        except (orjson.JSONDecodeError, ValueError):
            continue
    return first_us, last_us


def walk_forward_splits(spec: WalkForwardSpec, first_us: int, last_us: int) -> list[Split]:
    """The splits over ``[first_us, last_us]`` (the end is included in the last window)."""
    end = last_us + 1
    span = end - first_us
    if spec.train_fraction is not None:
        cut = first_us + int(span * spec.train_fraction)
        return [Split(Segment(first_us, cut), Segment(cut, end))]
    assert spec.splits is not None
    windows = spec.splits + 1
    bounds = [first_us + span * i // windows for i in range(windows)] + [end]
    return [
        Split(
            Segment(first_us if spec.anchored else bounds[i], bounds[i + 1]),
            Segment(bounds[i + 1], bounds[i + 2]),
        )
        for i in range(spec.splits)
    ]


def window(events: Iterable[StreamEvent], segment: Segment) -> Iterator[StreamEvent]:
    """The events of ``segment``, preceded by the latest ``price`` of each asset before it (in
    their time order), so the replay starts with the prices known at the segment's start."""
    start, end = segment.start_us, segment.end_us
    if start is None and end is None:
        yield from events
        return
    carried: dict[str, PriceEvent] | None = {}
    for event in events:
        t = micros(event.ts)
        if start is not None and t < start:
            if isinstance(event, PriceEvent) and carried is not None:
                carried.pop(event.asset, None)
                carried[event.asset] = event
            continue
        if carried:
            yield from carried.values()
        carried = None
        if end is not None and t >= end:
            return
        yield event
    if carried:
        yield from carried.values()


# ------------------------------------------------------------------------------ tasks


@dataclass(frozen=True)
class SweepTask:
    """One replay: a candidate's configuration on one segment of the stream (small: the
    stream itself is read from ``stream`` by whoever runs the task)."""

    candidate: int
    segment: int
    stream: str
    start_us: int | None
    end_us: int | None
    config: dict[str, Any]
    settings: dict[str, Any]


@dataclass(frozen=True)
class TaskResult:
    candidate: int
    segment: int
    metrics: dict[str, float]
    halted: str | None = None
    error: str | None = None
    elapsed_s: float = 0.0


def run_task(task: SweepTask) -> TaskResult:
    """Replay one task (in a worker process, a dask worker, or here). Never raises for a
    problem of the task itself: that is returned as ``error``."""
    from backtest.report import summary

    started = time.perf_counter()
    try:
        config = validate_bot_config(task.config, source=f"candidate {task.candidate}")
        settings = validate_settings(task.settings, f"candidate {task.candidate} (backtest)")
        replay = Replay(config, settings)
        with read_stream(task.stream) as reader:
            segment = Segment(task.start_us, task.end_us)
            result = replay.run(window(reader, segment), reader.header)
        figures = summary(result, fill_model=settings.fill.model, seed=settings.seed)
    except (SolverError, ValueError) as exc:
        return TaskResult(
            task.candidate,
            task.segment,
            {},
            error=f"{type(exc).__name__}: {str(exc)[:500]}",
            elapsed_s=time.perf_counter() - started,
        )
    halted = figures["halted"]
    return TaskResult(
        task.candidate,
        task.segment,
        {name: figures[name] for name in METRICS},
        halted=None if halted is None else str(halted["reason"]),
        elapsed_s=time.perf_counter() - started,
    )


# ------------------------------------------------------------------------------ executors


OnResult = Callable[[TaskResult], None]


def run_local(tasks: Sequence[SweepTask], workers: int, on_result: OnResult) -> None:
    """``workers`` processes (``spawn``: nothing inherited but the task), results as they come."""
    context = multiprocessing.get_context("spawn")
    pool = concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=context)
    try:
        futures = [pool.submit(run_task, task) for task in tasks]
        for future in concurrent.futures.as_completed(futures):
            on_result(future.result())
    except concurrent.futures.process.BrokenProcessPool as exc:
        raise SweepError(f"a worker process died: {exc}") from None
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def run_dask(
    tasks: Sequence[SweepTask],
    workers: int,
    on_result: OnResult,
    *,
    scheduler: str | None = None,
    processes: bool = True,
) -> None:
    """The same tasks on a dask.distributed cluster: the one at ``scheduler`` (its workers
    must import this project and read the stream at the same path), else a LocalCluster of
    ``workers`` single-threaded worker processes (threads with ``processes=False``)."""
    try:
        distributed: Any = importlib.import_module("dask.distributed")
    except ImportError:
        raise SweepError(
            "the dask executor needs dask.distributed: pip install 'dask[distributed]'"
        ) from None
    cluster: Any = None
    if scheduler is None:
        cluster = distributed.LocalCluster(
            n_workers=workers,
            threads_per_worker=1,
            processes=processes,
            dashboard_address=None,
            silence_logs=logging.ERROR,
        )
        client = distributed.Client(cluster)
    else:
        client = distributed.Client(scheduler)
    try:
        futures = client.map(run_task, list(tasks), pure=False)
        for _future, result in distributed.as_completed(futures, with_results=True):
            on_result(result)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


# ------------------------------------------------------------------------------ the sweep


@dataclass
class SplitResult:
    split: Split
    chosen: int | None
    in_sample: float | None
    out_of_sample: float | None
    oos_rank: int | None
    best_oos: int | None
    best_oos_objective: float | None
    rank_correlation: float | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "train": self.split.train.as_dict(),
            "test": self.split.test.as_dict(),
            "chosen": self.chosen,
            "in_sample": self.in_sample,
            "out_of_sample": self.out_of_sample,
            "gap": (
                usd(self.in_sample - self.out_of_sample)
                if self.in_sample is not None and self.out_of_sample is not None
                else None
            ),
            "oos_rank": self.oos_rank,
            "best_out_of_sample": {
                "candidate": self.best_oos,
                "objective": self.best_oos_objective,
            },
            "rank_correlation": self.rank_correlation,
        }


@dataclass
class SweepResult:
    spec: SweepSpec
    stream: str
    candidates: list[Candidate]
    segments: list[Segment]
    splits: list[Split]
    results: dict[tuple[int, int], TaskResult]
    span: tuple[int, int] | None
    elapsed_s: float = 0.0
    executor: str = "local"
    workers: int = 1

    def objective(self, candidate: int, segment: int = 0) -> float | None:
        result = self.results.get((candidate, segment))
        if result is None or result.error is not None:
            return None
        return self.spec.objective.score(result.metrics)

    def error(self, candidate: Candidate) -> str | None:
        if candidate.error is not None:
            return candidate.error
        for s in range(len(self.segments)):
            result = self.results.get((candidate.index, s))
            if result is not None and result.error is not None:
                return result.error
        return None

    def ranking(self) -> list[Candidate]:
        """Best first by the full-stream objective; failed candidates last; ties by index."""

        def key(candidate: Candidate) -> tuple[int, float, int]:
            score = self.objective(candidate.index)
            if score is None or self.error(candidate) is not None:
                return (1, 0.0, candidate.index)
            return (0, -score, candidate.index)

        return sorted(self.candidates, key=key)

    def best(self) -> Candidate | None:
        ranked = self.ranking()
        if not ranked or self.objective(ranked[0].index) is None or self.error(ranked[0]):
            return None
        return ranked[0]

    def split_results(self) -> list[SplitResult]:
        out = []
        for split in self.splits:
            train_s, test_s = self.segments.index(split.train), self.segments.index(split.test)
            scored = [
                (c.index, self.objective(c.index, train_s), self.objective(c.index, test_s))
                for c in self.candidates
                if self.error(c) is None
            ]
            pairs = [(i, a, b) for i, a, b in scored if a is not None and b is not None]
            if not pairs:
                out.append(SplitResult(split, None, None, None, None, None, None, None))
                continue
            chosen = min(pairs, key=lambda p: (-p[1], p[0]))
            best = min(pairs, key=lambda p: (-p[2], p[0]))
            oos_rank = 1 + sum(1 for p in pairs if p[2] > chosen[2])
            out.append(
                SplitResult(
                    split,
                    chosen[0],
                    chosen[1],
                    chosen[2],
                    oos_rank,
                    best[0],
                    best[2],
                    spearman([p[1] for p in pairs], [p[2] for p in pairs]),
                )
            )
        return out


def spearman(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Spearman's rank correlation (average ranks for ties); None when undefined."""
    if len(a) < 2:
        return None
    ra, rb = _ranks(a), _ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb, strict=True))
    va = sum((x - ma) ** 2 for x in ra)
    vb = sum((y - mb) ** 2 for y in rb)
    if va == 0 or vb == 0:
        return None
    return round(cov / math.sqrt(va * vb), 6)


def _ranks(values: Sequence[float]) -> list[float]:
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def plan(
    spec: SweepSpec,
    stream: str | Path,
    base_config: Mapping[str, Any],
    base_settings: Mapping[str, Any],
) -> tuple[list[Candidate], list[Segment], list[Split], list[SweepTask], tuple[int, int] | None]:
    """Candidates, segments, splits and the tasks to run (longest segments first)."""
    candidates = build_candidates(spec, base_config, base_settings)
    valid = [c for c in candidates if c.error is None]
    if not valid:
        first = candidates[0].error if candidates else "no candidates"
        raise SweepError(f"no valid candidate: {first}")
    span = stream_span(stream)
    segments = [FULL]
    splits: list[Split] = []
    if spec.walk_forward is not None and span is not None:
        splits = walk_forward_splits(spec.walk_forward, *span)
        for split in splits:
            for segment in (split.train, split.test):
                if segment not in segments:
                    segments.append(segment)

    def length(segment: Segment) -> int:
        if segment.start_us is None or segment.end_us is None:
            return 2**62
        return segment.end_us - segment.start_us

    order = sorted(range(len(segments)), key=lambda s: (-length(segments[s]), s))
    tasks = [
        SweepTask(
            c.index,
            s,
            str(stream),
            segments[s].start_us,
            segments[s].end_us,
            c.config,
            c.settings,
        )
        for s in order
        for c in valid
    ]
    return candidates, segments, splits, tasks, span


def run_sweep(
    spec: SweepSpec,
    stream: str | Path,
    base_config: Mapping[str, Any],
    base_settings: Mapping[str, Any] | None = None,
    *,
    executor: ExecutorName = "local",
    workers: int = 1,
    scheduler: str | None = None,
    dask_processes: bool = True,
    on_start: Callable[[int], None] | None = None,
    on_result: Callable[[TaskResult], None] | None = None,
) -> SweepResult:
    """Plan and run a sweep; ``on_start(total tasks)`` and ``on_result`` report progress."""
    if workers < 1:
        raise SweepError("workers must be at least 1")
    with read_stream(stream):
        pass  # an unreadable stream or a bad header fails here, before any worker starts
    candidates, segments, splits, tasks, span = plan(spec, stream, base_config, base_settings or {})
    results: dict[tuple[int, int], TaskResult] = {}

    def collect(result: TaskResult) -> None:
        results[(result.candidate, result.segment)] = result
        if on_result is not None:
            on_result(result)

    if on_start is not None:
        on_start(len(tasks))
    started = time.perf_counter()
    if executor == "dask":
        run_dask(tasks, workers, collect, scheduler=scheduler, processes=dask_processes)
    else:
        run_local(tasks, workers, collect)
    missing = len(tasks) - len(results)
    if missing:
        raise SweepError(f"{missing} tasks returned no result")
    return SweepResult(
        spec,
        str(stream),
        candidates,
        segments,
        splits,
        results,
        span,
        elapsed_s=time.perf_counter() - started,
        executor=executor,
        workers=workers,
    )


# ------------------------------------------------------------------------------ outputs


def _cell(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, float):
        return repr(value)
    return json.dumps(value, sort_keys=True)


def _num(value: float | None) -> str:
    return "" if value is None else f"{value:.6f}"


def leaderboard_csv(result: SweepResult) -> str:
    """The leaderboard: one row per candidate, best first (see ``docs/backtest.md``)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    splits = result.split_results()
    keys = result.spec.keys
    header = ["rank", "candidate", "objective", *METRICS, "halted"]
    if splits:
        header += ["is_mean", "oos_mean"]
        for k in range(len(splits)):
            header += [f"split{k}_is", f"split{k}_oos"]
    header += [*keys, "error"]
    writer.writerow(header)
    index = {s: i for i, s in enumerate(result.segments)}
    for rank, candidate in enumerate(result.ranking(), start=1):
        error = result.error(candidate)
        full = result.results.get((candidate.index, 0))
        row: list[str] = [str(rank), str(candidate.index)]
        row.append(_num(result.objective(candidate.index)) if error is None else "")
        for name in METRICS:
            value = full.metrics.get(name) if full is not None and error is None else None
            row.append("" if value is None else _cell(value))
        row.append(full.halted or "" if full is not None else "")
        if splits:
            ins = [result.objective(candidate.index, index[s.split.train]) for s in splits]
            oos = [result.objective(candidate.index, index[s.split.test]) for s in splits]
            row += [_num(_mean(ins)), _num(_mean(oos))]
            for a, b in zip(ins, oos, strict=True):
                row += [_num(a), _num(b)]
        row += [
            _cell(candidate.overrides[key]) if key in candidate.overrides else "" for key in keys
        ]
        row.append(error or "")
        writer.writerow(row)
    return out.getvalue()


def _mean(values: Sequence[float | None]) -> float | None:
    if not values or any(v is None for v in values):
        return None
    return usd(sum(v for v in values if v is not None) / len(values))


def summary_json(result: SweepResult) -> dict[str, Any]:
    """``sweep.json``: deterministic for a sweep (no wall-clock figures)."""
    best = result.best()
    splits = result.split_results()
    walk: dict[str, Any] | None = None
    if result.spec.walk_forward is not None:
        ins = [s.in_sample for s in splits]
        oos = [s.out_of_sample for s in splits]
        mean_is, mean_oos = _mean(ins), _mean(oos)
        walk = {
            **result.spec.walk_forward.model_dump(),
            "splits_detail": [s.as_dict() for s in splits],
            "mean_in_sample": mean_is,
            "mean_out_of_sample": mean_oos,
            "mean_gap": (
                usd(mean_is - mean_oos) if mean_is is not None and mean_oos is not None else None
            ),
        }
    full = result.results.get((best.index, 0)) if best is not None else None
    return {
        "stream": result.stream,
        "span": None if result.span is None else {
            "from": _iso(result.span[0]), "to": _iso(result.span[1])
        },
        "keys": result.spec.keys,
        "candidates": len(result.candidates),
        "invalid": sum(1 for c in result.candidates if c.error is not None),
        "failed": sum(
            1 for c in result.candidates if c.error is None and result.error(c) is not None
        ),
        "segments": [s.as_dict() for s in result.segments],
        "tasks": len(result.results),
        "objective": result.spec.objective.model_dump(),
        "best": None if best is None or full is None else {
            "candidate": best.index,
            "objective": result.objective(best.index),
            "overrides": best.overrides,
            "metrics": full.metrics,
        },
        "walk_forward": walk,
    }  # fmt: skip


def write_outputs(
    result: SweepResult, out: Path, *, config_source: str, settings_source: str | None
) -> dict[str, Path]:
    """``leaderboard.csv``, ``sweep.json``, ``timing.json``, and for the winner
    ``best_config.yaml`` (the whole bot YAML) and ``best_backtest.yaml`` (its settings)."""
    from backtest.report import write_json

    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot write into {out}: {exc.strerror}") from None
    paths = {
        "leaderboard": out / "leaderboard.csv",
        "summary": out / "sweep.json",
        "timing": out / "timing.json",
    }
    paths["leaderboard"].write_text(leaderboard_csv(result), encoding="utf-8")
    write_json(paths["summary"], summary_json(result))
    task_seconds = sum(r.elapsed_s for r in result.results.values())
    write_json(
        paths["timing"],
        {
            "elapsed_s": round(result.elapsed_s, 3),
            "task_seconds": round(task_seconds, 3),
            "tasks": len(result.results),
            "executor": result.executor,
            "workers": result.workers,
            "speedup": round(task_seconds / result.elapsed_s, 2) if result.elapsed_s else None,
        },
    )
    best = result.best()
    if best is not None:
        score = result.objective(best.index)
        note = (
            f"# Best of `solver backtest sweep` over {result.stream}: candidate {best.index}, "
            f"objective {result.spec.objective.kind} = {score}\n"
        )
        bot, backtest = split_overrides(best.overrides)
        paths["best_config"] = out / "best_config.yaml"
        paths["best_config"].write_text(
            note
            + f"# The base config {config_source} with these overrides: "
            + json.dumps(bot, sort_keys=False)
            + "\n"
            + yaml.safe_dump(best.config, sort_keys=False, allow_unicode=True),
            encoding="utf-8",
        )
        paths["best_backtest"] = out / "best_backtest.yaml"
        paths["best_backtest"].write_text(
            note
            + f"# Backtest settings ({settings_source or 'defaults'}) with these overrides: "
            + json.dumps(backtest, sort_keys=False)
            + "\n"
            + (
                yaml.safe_dump(best.settings, sort_keys=False, allow_unicode=True)
                if best.settings
                else "{}\n"
            ),
            encoding="utf-8",
        )
    return paths
