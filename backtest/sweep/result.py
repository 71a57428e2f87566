"""A sweep's results: objectives by candidate and segment, the ranking, walk-forward splits.

Results are collected by (candidate, segment) and ranked afterwards, so the ranking does not
depend on the executor, the number of workers or the order in which tasks finish.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from backtest.report.tables import usd
from backtest.sweep.segments import Segment, Split
from backtest.sweep.spec import Candidate, SweepSpec
from backtest.sweep.tasks import TaskResult


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

    @property
    def chosen_on(self) -> str:
        """What ranks candidates: ``out_of_sample_mean`` with walk-forward, else ``full``."""
        return "out_of_sample_mean" if self.splits else "full"

    def mean_over(self, candidate: int, test: bool) -> float | None:
        """The mean objective of ``candidate`` over the test (or train) windows of every split;
        None without splits or when one is missing."""
        if not self.splits:
            return None
        scores = [
            self.objective(candidate, self.segments.index(s.test if test else s.train))
            for s in self.splits
        ]
        if any(v is None for v in scores):
            return None
        return usd(sum(v for v in scores if v is not None) / len(scores))

    def score(self, candidate: int) -> float | None:
        """What the winner is chosen on: with walk-forward, the mean out-of-sample objective
        (each test window is data that split did not tune on); else the full-stream one."""
        if self.splits:
            return self.mean_over(candidate, test=True)
        return self.objective(candidate)

    def ranking(self) -> list[Candidate]:
        """Best first by :meth:`score`; failed candidates last; ties by index."""

        def key(candidate: Candidate) -> tuple[int, float, int]:
            score = self.score(candidate.index)
            if score is None or self.error(candidate) is not None:
                return (1, 0.0, candidate.index)
            return (0, -score, candidate.index)

        return sorted(self.candidates, key=key)

    def best(self) -> Candidate | None:
        ranked = self.ranking()
        if not ranked or self.score(ranked[0].index) is None or self.error(ranked[0]):
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
