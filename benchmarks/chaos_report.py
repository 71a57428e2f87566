"""The chaos soak's summary (markdown) and timeline plot (:mod:`benchmarks.chaos`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from benchmarks.common import md_table

GOALS = (
    ("operator actions needed", "operator_actions", 0),
    ("false pauses", "pauses_false", 0),
    ("over-committed status samples", "overcommitted_samples", 0),
    ("quotes never terminal", "quotes_never_terminal", 0),
    ("answers the relay received missing from the journal", "answers_missing_from_journal", 0),
    ("duplicate nonces", "duplicate_nonces", 0),
)


def markdown(doc: dict[str, Any]) -> str:
    faults = ", ".join(f"{k} {v}" for k, v in sorted(doc["faults"].items())) or "none"
    rows = [
        [label, doc[key], goal, "ok" if doc[key] <= goal else "MISSED"]
        for label, key, goal in GOALS
    ]
    episodes = [
        [f"{p['from']:.0f}–{p['to']:.0f} s", "true" if p["explained"] else "FALSE", p["reasons"]]
        for p in doc["pause_episodes"]
    ]
    lines = [
        "# Chaos soak (issue 24)",
        "",
        f"{doc['seconds'] / 60:.0f} minutes on the sandbox with takers on "
        f"({doc['taker_requests']} taker requests, {doc['settled_batches']} batches settled, "
        f"{doc['relay_answers']} answers of the bot taken by the relay); "
        f"{sum(doc['faults'].values())} faults: {faults}; the bot started {doc['bot_starts']} "
        f"times. Skipped faults: {doc['faults_skipped'] or 'none'}.",
        "",
        md_table(["what", "count", "goal", "verdict"], rows),
        "",
        f"Pauses: {doc['pauses_true']} explained by a fault in force, {doc['pauses_false']} not.",
        "",
        md_table(["when", "explained", "reasons"], episodes) if episodes else "No pause.",
        "",
        f"Command: `{doc.get('command', 'python -m benchmarks.run --only chaos')}`.",
    ]
    return "\n".join(lines) + "\n"


def plot(doc: dict[str, Any], path: Path) -> None:
    fig, ax = plt.subplots(figsize=(11, 4))
    samples = [s for s in doc["samples"] if s.get("up")]
    ax.plot(
        [s["at"] / 60 for s in samples],
        [s.get("open_quotes") or 0 for s in samples],
        lw=0.8,
        label="open quotes",
    )
    for x in doc["faults_timeline"]:
        ax.axvspan(x["at"] / 60, (x["at"] + max(x["lasted_s"], 2)) / 60, color="red", alpha=0.15)
        ax.annotate(x["kind"], (x["at"] / 60, 0), rotation=90, fontsize=6, va="bottom")
    for p in doc["pause_episodes"]:
        color = "orange" if p["explained"] else "black"
        ax.axvspan(p["from"] / 60, max(p["to"], p["from"] + 1) / 60, color=color, alpha=0.3)
    for a in doc["operator_timeline"]:
        ax.axvline(a["at"] / 60, color="purple", ls="--", lw=1)
    ax.set_xlabel("minutes")
    ax.set_ylabel("open quotes")
    ax.set_title(
        "Chaos soak: faults (red), pauses (orange: explained, black: false), operator (purple)"
    )
    ax.legend(loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
