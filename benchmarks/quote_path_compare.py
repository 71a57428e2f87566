"""From the runs of a ``quote_path`` benchmark to its verdicts: percentiles over the repeats,
paired ratios, issue 10's "not slower than the baseline" and issue 11's targets.

Pure functions of the result's ``runs`` (one entry per system, phase and repeat, as
:func:`benchmarks.quote_path_driver.phase_figures` makes them), so they can be rerun on a saved
JSON. A ratio is taken within a repeat (bot and baseline ran the same phase back to back, so
they shared the machine's state), then summarised over the repeats.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from benchmarks.common import quantile

Run = Mapping[str, Any]


@dataclass(frozen=True)
class Metric:
    key: str
    label: str
    phase: str  # a phase name, or ``rate_*``: the worst of the fixed-rate phases
    figure: str  # a key of the run's figures; ``latency_ms.p99`` for a nested one
    higher_is_better: bool
    tolerance: float  # for "not slower": noise on a shared machine

    def of(self, run: Run) -> float | None:
        value: Any = run
        for part in self.figure.split("."):
            value = value.get(part) if isinstance(value, Mapping) else None
        return value if isinstance(value, int | float) else None


METRICS = [
    Metric(
        "saturation_answers_per_s", "saturation answers/s", "saturation", "answers_per_s",
        True, 0.05,
    ),
    Metric("p50_ms_at_500", "p50 ms at 500/s", "rate_500", "latency_ms.p50", False, 0.10),
    Metric("p99_ms_at_500", "p99 ms at 500/s", "rate_500", "latency_ms.p99", False, 0.10),
    Metric("p50_ms_at_2000", "p50 ms at 2,000/s", "rate_2000", "latency_ms.p50", False, 0.10),
    Metric("p99_ms_at_2000", "p99 ms at 2,000/s", "rate_2000", "latency_ms.p99", False, 0.10),
    Metric(
        "cpu_us_per_answer_at_2000", "CPU µs/answer at 2,000/s", "rate_2000",
        "cpu_us_per_answer", False, 0.05,
    ),
    Metric(
        "cpu_us_per_answer", "CPU µs/answer at saturation, with after-work", "saturation",
        "cpu_us_per_answer_with_after_work", False, 0.05,
    ),
    Metric(
        "largest_stall_ms_at_rates", "largest answer gap ms (500 and 2,000/s)", "rate_*",
        "largest_stall_ms", False, 0.10,
    ),
]  # fmt: skip
METRIC_LABELS = {m.key: m.label for m in METRICS}


def spread(values: Iterable[float | None]) -> dict[str, Any]:
    """p50 and the range of ``values`` over the repeats (None and NaN left out)."""
    clean = sorted(v for v in values if v is not None and not math.isnan(v))
    if not clean:
        return {"n": 0}
    return {
        "n": len(clean),
        "p50": round(quantile(clean, 0.5), 4),
        "min": round(clean[0], 4),
        "max": round(clean[-1], 4),
        "values": [round(v, 4) for v in clean],
    }


def _per_repeat(runs: Sequence[Run], system: str, metric: Metric) -> dict[int, float]:
    """The figure per repeat; for ``rate_*`` the worst of the fixed-rate phases."""
    out: dict[int, float] = {}
    for run in runs:
        if run["system"] != system or not _phase_matches(run["phase"], metric.phase):
            continue
        value = metric.of(run)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            continue
        out[run["repeat"]] = max(out.get(run["repeat"], value), value)
    return out


def _phase_matches(name: str, pattern: str) -> bool:
    return name.startswith(pattern[:-1]) if pattern.endswith("*") else name == pattern


def summaries(runs: Sequence[Run], systems: Sequence[str]) -> dict[str, dict[str, Any]]:
    """metric -> system -> spread over the repeats."""
    return {m.key: {s: spread(_per_repeat(runs, s, m).values()) for s in systems} for m in METRICS}


def ratios(runs: Sequence[Run], num: str, den: str) -> dict[str, dict[str, Any]]:
    """metric -> spread of ``num / den`` over the repeats, paired within each repeat."""
    out = {}
    for m in METRICS:
        a, b = _per_repeat(runs, num, m), _per_repeat(runs, den, m)
        values = [a[r] / b[r] for r in sorted(a.keys() & b.keys()) if b[r]]
        out[m.key] = spread(values) | {
            "higher_is_better": m.higher_is_better,
            "tolerance": m.tolerance,
        }
    return out


def not_slower(bot_over_baseline: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    """Issue 10: the quote path is not slower than the baseline, figure by figure.

    ``not slower``: the median paired ratio is within the tolerance on the good side
    (throughput and CPU 5 %, latencies 10 %: the spread of a shared 2-core machine);
    ``slower``: every repeat is beyond it; ``inconclusive``: the median is beyond it but the
    repeats disagree (some on the good side), which on a busy machine is noise until a quieter
    run says otherwise."""
    verdicts = {}
    for key, r in bot_over_baseline.items():
        if not r.get("n"):
            continue
        tol = r["tolerance"]

        def within(x: float, tol: float = tol, higher: bool = r["higher_is_better"]) -> bool:
            return x >= 1 - tol if higher else x <= 1 + tol

        if within(r["p50"]):
            verdict = "not slower"
        elif not any(within(x) for x in r["values"]):
            verdict = "slower"
        else:
            verdict = "inconclusive"
        verdicts[key] = {"ratio_p50": r["p50"], "verdict": verdict}
    found = {v["verdict"] for v in verdicts.values()}
    overall = next((v for v in ("slower", "inconclusive") if v in found), "not slower")
    return {"metrics": verdicts, "verdict": overall}


def _p50(summary: Mapping[str, Any], key: str, system: str) -> float:
    value = summary.get(key, {}).get(system, {}).get("p50")
    return float(value) if value is not None else math.nan


def issue11_targets(
    summary: Mapping[str, Any],
    worst_stall_ms: float,
    nonce_checks_per_lost: float | None,
) -> dict[str, Any]:
    """Issue 11's targets for the bot against the minimal solver (medians over the repeats)."""
    sat_bot, sat_min = (
        _p50(summary, "saturation_answers_per_s", "bot"),
        _p50(summary, "saturation_answers_per_s", "minimal"),
    )
    p99_bot = _p50(summary, "p99_ms_at_2000", "bot")
    p99_min = _p50(summary, "p99_ms_at_2000", "minimal")
    p99_limit = max(2.0, 1.5 * p99_min) if not math.isnan(p99_min) else 2.0
    p99_500 = _p50(summary, "p99_ms_at_500", "bot")
    cpu = _p50(summary, "cpu_us_per_answer", "bot")
    return {
        "saturation_vs_minimal": {
            "wanted": ">= 50 % of the minimal solver's answers/s",
            "measured": round(sat_bot / sat_min, 3) if sat_min else None,
            "met": bool(sat_min and sat_bot / sat_min >= 0.5),
        },
        "p99_ms_at_2000": {
            "wanted": f"<= max(2 ms, 1.5 x minimal's p99) = {p99_limit:.2f} ms",
            "measured": p99_bot,
            "met": bool(p99_bot <= p99_limit),
        },
        "p99_ms_at_500": {"wanted": "< 1 ms", "measured": p99_500, "met": bool(p99_500 < 1.0)},
        "cpu_us_per_answer": {
            "wanted": "<= 150 µs (saturation, with the after-work)",
            "measured": cpu,
            "met": bool(cpu <= 150.0),
        },
        "largest_stall_ms": {
            "wanted": "no stall over 5 ms (largest answer gap at 500 and 2,000/s, every repeat)",
            "measured": worst_stall_ms,
            "met": bool(worst_stall_ms <= 5.0),
        },
        "nonce_checks_per_lost_quote": {
            "wanted": "0 (a lost quote costs no RPC)",
            "measured": nonce_checks_per_lost,
            "met": nonce_checks_per_lost == 0,
        },
    }


def worst_stall(runs: Sequence[Run], system: str) -> float:
    values = [
        r["largest_stall_ms"]
        for r in runs
        if r["system"] == system and r["phase"].startswith("rate_")
    ]
    return max((v for v in values if not math.isnan(v)), default=math.nan)
