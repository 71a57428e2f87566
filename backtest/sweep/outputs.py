"""A sweep's files: ``leaderboard.csv``, ``sweep.json``, ``timing.json``, the winner's
``best_config.yaml`` and ``best_backtest.yaml``, and ``sweep.html`` (:mod:`backtest.sweep.html`).

``leaderboard.csv`` and ``sweep.json`` are deterministic: the same stream, base files and sweep
file give the same bytes whatever the executor or the number of workers.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from backtest.report.tables import usd
from backtest.sweep.result import SweepResult
from backtest.sweep.segments import _iso
from backtest.sweep.spec import Candidate, split_overrides
from backtest.sweep.tasks import METRICS, TaskResult
from backtest.sweep.verdict import Verdict, judge
from solver.errors import ConfigError


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


def summary_json(result: SweepResult, verdict: Verdict | None = None) -> dict[str, Any]:
    """``sweep.json``: deterministic for a sweep (no wall-clock figures)."""
    verdict = verdict or judge(result)
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
    leader = _leader(result, best, full)
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
        "search": _search(result),
        # The first row is the leader; it is the best only when the verdict names a winner.
        "best": None if verdict.verdict == "no_winner" else leader,
        "leader": leader,
        "walk_forward": walk,
        "verdict": verdict.as_dict(),
    }  # fmt: skip


def _leader(result: SweepResult, best: Candidate | None, full: TaskResult | None) -> Any:
    return None if best is None or full is None else {
            "candidate": best.index,
            "chosen_on": result.chosen_on,
            "objective": result.objective(best.index),
            "in_sample_mean": result.mean_over(best.index, test=False),
            "out_of_sample_mean": result.mean_over(best.index, test=True),
            "overrides": best.overrides,
            "metrics": full.metrics,
        }  # fmt: skip


def _search(result: SweepResult) -> dict[str, Any]:
    spec = result.spec
    if spec.tpe is not None:
        return {"kind": "tpe", **spec.tpe.model_dump(by_alias=True, exclude={"space"})}
    if spec.random is not None:
        return {"kind": "random", "samples": spec.random.samples, "seed": spec.random.seed}
    return {"kind": "grid"}


def write_outputs(
    result: SweepResult,
    out: Path,
    *,
    config_source: str,
    settings_source: str | None,
    heatmap: Sequence[str] | None = None,
    verdict: Verdict | None = None,
    write_best_anyway: bool = False,
) -> dict[str, Path]:
    """``leaderboard.csv``, ``sweep.json``, ``timing.json``, ``sweep.html`` (a heatmap over
    ``heatmap``, two swept keys, or the first two that vary), and for the winner
    ``best_config.yaml`` (the whole bot YAML) and ``best_backtest.yaml`` (its settings) —
    unless the verdict is ``no_winner`` (then only with ``write_best_anyway``)."""
    verdict = verdict or judge(result)
    from backtest.report.outputs import write_json

    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot write into {out}: {exc.strerror}") from None
    paths = {
        "leaderboard": out / "leaderboard.csv",
        "summary": out / "sweep.json",
        "timing": out / "timing.json",
        "html": out / "sweep.html",
    }
    paths["leaderboard"].write_text(leaderboard_csv(result), encoding="utf-8")
    write_json(paths["summary"], summary_json(result, verdict))
    from backtest.sweep.html import render_sweep_html

    paths["html"].write_text(render_sweep_html(result, heatmap, verdict), encoding="utf-8")
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
    for stale in ("best_config.yaml", "best_backtest.yaml"):
        (out / stale).unlink(missing_ok=True)  # an earlier sweep's winner must not linger
    if best is not None and (verdict.verdict != "no_winner" or write_best_anyway):
        score = result.objective(best.index)
        note = (
            f"# Best of `solver backtest sweep` over {result.stream}: candidate {best.index}, "
            f"objective {result.spec.objective.kind} = {score}\n"
            f"# Verdict: {verdict.verdict}: {verdict.reason}\n"
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
