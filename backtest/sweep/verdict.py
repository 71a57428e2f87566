"""A sweep's verdict: whether its winner is one, how sure, and what says the ranking is luck.

A leaderboard always has a first row. Without a verdict, a sweep in which every candidate lost
to holding still names a winner and writes a ``best_config.yaml`` "ready for solver run". The
verdict says no instead:

- ``no_winner``: no candidate's score (what the winner is chosen on: the mean out-of-sample
  objective with walk-forward, else the full-stream one) is above zero. With the default
  objective, PnL over hold, zero is holding the starting inventory. ``solver backtest sweep``
  writes no ``best_config.yaml`` and exits with :data:`EXIT_NO_WINNER`.
- ``inconclusive``: the winner's score is positive, but its bootstrap interval reaches zero, or
  after this many candidates the best is within what luck gives (the reality check below).
- ``winner``: positive, its interval above zero, and the reality check passes.

Warnings come with it (they do not change the verdict): no walk-forward (every figure is in
sample); the chosen candidates' out-of-sample mean below half their in-sample mean (the gap);
a mean rank correlation between train and test below :data:`MIN_RANK_CORRELATION`.

**The bootstrap** resamples the winner's PnL over hold by time block
(:data:`~backtest.sweep.tasks.BLOCKS` equal blocks per window, drawn with replacement within
each test window, summed, averaged over the splits: the winner's out-of-sample figure) with a
fixed seed: a 95 % percentile interval. Blocks of a few minutes to hours keep most of the
serial dependence of a market maker's PnL inside a block.

**The reality check** (White, 2000) asks whether the best of N candidates beats holding by more
than the best of N equally good-for-nothing candidates would by luck: the statistic is the
largest mean PnL over hold per block, and its null distribution the largest of the bootstrap
means of every candidate, each centred on its own mean, resampled with the same blocks for all
(so correlated candidates count as fewer). ``p`` is the share of resamples at least as large.
It tests PnL over hold whatever the objective: zero is holding.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from backtest.report.tables import usd
from backtest.sweep.result import SweepResult

EXIT_NO_WINNER = 3
"""``solver backtest sweep``'s exit code when no candidate beats zero (docs/backtest.md)."""
RESAMPLES = 2000
CHUNK = 50
SEED = 0
LEVEL = 0.95
MAX_P = 0.05
"""The reality check's p-value above which a positive winner is only ``inconclusive``."""
MIN_RANK_CORRELATION = 0.5
MIN_CARRY_OVER = 0.5
"""Out-of-sample mean under this share of in-sample mean: the in-sample edge did not carry."""


@dataclass
class Verdict:
    verdict: str
    reason: str
    candidate: int | None
    score: float | None
    interval: dict[str, Any] | None = None
    reality_check: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "reason": self.reason,
            "candidate": self.candidate,
            "score": self.score,
            "interval": self.interval,
            "reality_check": self.reality_check,
            "warnings": self.warnings,
        }


def _windows(result: SweepResult) -> tuple[list[int], str]:
    """The segments the verdict judges: the test windows, or the full stream (in sample)."""
    if result.splits:
        return [result.segments.index(s.test) for s in result.splits], "out_of_sample"
    return [0], "in_sample"


def _blocks(result: SweepResult, candidate: int, segments: list[int]) -> np.ndarray | None:
    rows = []
    for s in segments:
        task = result.results.get((candidate, s))
        if task is None or task.error is not None or not task.blocks:
            return None
        rows.append(task.blocks)
    if len({len(r) for r in rows}) != 1:
        return None
    return np.array(rows, dtype=float)  # windows x blocks


def bootstrap(blocks: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``RESAMPLES`` draws of the mean over windows of each window's resampled block sum."""
    windows, n = blocks.shape
    picks = rng.integers(0, n, size=(RESAMPLES, windows, n))
    sums = np.take_along_axis(np.broadcast_to(blocks, (RESAMPLES, windows, n)), picks, 2).sum(2)
    result: np.ndarray = sums.mean(axis=1)
    return result


def interval(blocks: np.ndarray, on: str) -> dict[str, Any]:
    draws = bootstrap(blocks, np.random.default_rng(SEED))
    low, high = np.quantile(draws, [(1 - LEVEL) / 2, (1 + LEVEL) / 2])
    return {
        "figure": "pnl_over_hold_usd",
        "on": on,
        "estimate": usd(float(blocks.sum(axis=1).mean())),
        "low": usd(float(low)),
        "high": usd(float(high)),
        "level": LEVEL,
        "blocks": int(blocks.size),
        "resamples": RESAMPLES,
    }


def reality_check(candidates: list[np.ndarray], on: str) -> dict[str, Any]:
    """White's reality check of the best mean PnL over hold per block against zero."""
    data = np.stack([c.reshape(-1) for c in candidates])  # candidates x blocks
    k, n = data.shape
    means = data.mean(axis=1)
    observed = float(np.sqrt(n) * means.max())
    rng = np.random.default_rng(SEED)
    picks = rng.integers(0, n, size=(RESAMPLES, n))
    null = np.empty(RESAMPLES)
    for start in range(0, RESAMPLES, CHUNK):  # candidates x CHUNK x blocks at a time
        resampled = data[:, picks[start : start + CHUNK]].mean(axis=2)
        null[start : start + CHUNK] = np.sqrt(n) * (resampled - means[:, None]).max(axis=0)
    p = float((null >= observed).mean())
    return {
        "test": "White's reality check (i.i.d. block bootstrap)",
        "on": on,
        "candidates": k,
        "blocks": n,
        "best_mean_per_block_usd": usd(float(means.max())),
        "p_value": round(p, 4),
        "resamples": RESAMPLES,
    }


def judge(result: SweepResult) -> Verdict:
    best = result.best()
    segments, on = _windows(result)
    where = "mean out-of-sample" if result.splits else "full-stream"
    kind = result.spec.objective.kind
    if best is None:
        return Verdict("no_winner", "no candidate ran to a score", None, None)
    score = result.score(best.index)
    assert score is not None
    verdict = Verdict("winner", "", best.index, score, warnings=_warnings(result))
    if score <= 0:
        verdict.verdict = "no_winner"
        verdict.reason = (
            f"no candidate's {where} {kind} is above zero (the best, candidate {best.index}, "
            f"has {score:,.2f} USD)"
            + (": none beats holding the starting inventory" if kind == "pnl_over_hold" else "")
        )
        return verdict
    doubts = []
    blocks = _blocks(result, best.index, segments)
    if blocks is not None:
        verdict.interval = interval(blocks, on)
        low, high = verdict.interval["low"], verdict.interval["high"]
        if low <= 0:
            doubts.append(
                f"its {LEVEL * 100:.0f} % interval of PnL over hold, {low:,.2f} to "
                f"{high:,.2f} USD, reaches zero"
            )
    valid = [b for c in result.candidates if (b := _blocks(result, c.index, segments)) is not None]
    if len(valid) >= 2:
        verdict.reality_check = reality_check(valid, on)
        p = verdict.reality_check["p_value"]
        if p > MAX_P:
            doubts.append(
                f"the best of {len(valid)} candidates is within what luck gives (reality "
                f"check p = {p:.2f} > {MAX_P})"
            )
    if doubts:
        verdict.verdict = "inconclusive"
        verdict.reason = f"candidate {best.index} leads, but " + "; ".join(doubts)
    else:
        verdict.reason = f"candidate {best.index}: {where} {kind} {score:,.2f} USD" + (
            "" if verdict.interval is None else (
                f", {LEVEL * 100:.0f} % interval {verdict.interval['low']:,.2f} to "
                f"{verdict.interval['high']:,.2f} USD"
            )
        )  # fmt: skip
    return verdict


def _warnings(result: SweepResult) -> list[str]:
    out = []
    if not result.splits:
        out.append(
            "no walk-forward: every figure is in sample (add walk_forward to the sweep file)"
        )
        return out
    splits = result.split_results()
    ins = [s.in_sample for s in splits if s.in_sample is not None]
    oos = [s.out_of_sample for s in splits if s.out_of_sample is not None]
    if ins and oos:
        mean_is, mean_oos = sum(ins) / len(ins), sum(oos) / len(oos)
        if mean_is > 0 and mean_oos < MIN_CARRY_OVER * mean_is:
            out.append(
                f"overfitting: the candidates chosen in sample made {mean_is:,.2f} USD there "
                f"and {mean_oos:,.2f} USD out of sample (gap {mean_is - mean_oos:,.2f} USD)"
            )
    rhos = [s.rank_correlation for s in splits if s.rank_correlation is not None]
    if rhos and sum(rhos) / len(rhos) < MIN_RANK_CORRELATION:
        out.append(
            f"overfitting: the in-sample ranking predicts little out of sample (mean rank "
            f"correlation {sum(rhos) / len(rhos):.2f} < {MIN_RANK_CORRELATION})"
        )
    return out
