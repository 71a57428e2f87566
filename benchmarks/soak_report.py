"""The report of :mod:`benchmarks.soak`: its markdown (``soak.md``) and plot (``soak.png``),
from the result it wrote to ``soak.json``. A move out of the benchmark's module, which keeps
the run, the samples and the fit."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import dirty_note, fmt, md_table
from solver.io.store.sqlite_store import WAL_LIMIT_BYTES


def markdown(r: dict[str, Any]) -> str:
    m, setup, mem, journal = r["machine"], r["setup"], r["memory"], r["journal"]
    tot, bot = r["totals"], r["bot"]
    cal = m["calibration"]

    def sp(d: dict[str, float] | None, digits: int = 2) -> str:
        if not d:
            return "-"
        return f"{d['median']:,.{digits}f} (min {d['min']:,.{digits}f}, max {d['max']:,.{digits}f})"

    verdict = mem.get("verdict", "-")
    lines = [
        "# Soak: memory at 1,000 requests/s (issue 11)",
        "",
        f"Run: `{r.get('command') or 'python -m benchmarks.run --only soak'}`"
        f"{' (quick)' if r['quick'] else ''}, {m['date_utc']}, commit `{m['git_commit']}`"
        f"{dirty_note(m)}, {m['cpu_model']} × {m['cpus']}, Python {m['python']}. "
        f"Total {r['runtime_s']} s. Calibration: ed25519 sign {cal['ed25519_sign_us']} µs, "
        f"base58 {cal['b58encode_64B_us']} µs ({cal['ratio_to_design']}× DESIGN's budgets).",
        "",
        f"The bot (`python -m solver.cli run`, this tree, INFO logging, journal on) answers its "
        f"loopback relay (this driver) at a fixed {setup['rate_per_s']:,} requests/s for "
        f"{setup['seconds']:.0f} s, `quote_path`'s request templates (every request quotable, "
        f"`min_deadline_ms` {setup['min_deadline_ms']}, so quotes expire and are retired LOST "
        f"at the rate they are made). Samples every {setup['window_s']:.0f} s (windows back to "
        f"back); the first {setup['warmup_s']:.0f} s are warm-up. RSS is `VmRSS` of "
        "`/proc/<pid>/status`; open quotes are from the bot's latest summary line (logged every "
        "window). t = 0 s in the plot is the bot subscribed, before the load.",
        "",
        "## Memory",
        "",
        f"**Verdict: {verdict}** (flat when the {setup['flat_rule']}).",
        "",
        md_table(
            ["figure", "value"],
            [
                ["RSS before load (subscribed, idle)", _mb(mem.get("idle_before_load_mb") or {})],
                [
                    f"RSS at start (t = {mem.get('from_s', '-')} s, after warm-up)",
                    _mb_v(mem.get("rss_start_mb")),
                ],
                [f"RSS at end (t = {mem.get('to_s', '-')} s)", _mb_v(mem.get("rss_end_mb"))],
                [
                    "RSS min / max after warm-up",
                    f"{fmt(mem.get('rss_min_mb'))} / {fmt(mem.get('rss_max_mb'))} MB",
                ],
                ["peak RSS (VmHWM)", _mb_v(mem.get("vm_hwm_mb"))],
                [
                    "slope (least squares after warm-up)",
                    f"{fmt(mem.get('slope_mb_per_min'), 3)} MB/min",
                ],
                ["growth after warm-up (end minus start)", _mb_v(mem.get("rss_growth_mb"))],
                ["fit growth over the run after warm-up", _mb_v(mem.get("fit_growth_mb"))],
                ["flat threshold", _mb_v(mem.get("flat_threshold_mb"))],
                ["residual SD around the fit", _mb_v(mem.get("residual_sd_mb"), 3)],
            ],
        ),
        "",
        *_steps(mem.get("steps"), r["bot"].get("desk_snapshots")),
        *_components(mem.get("components") or {}),
        f"**Journal on disk** (`{Path(journal['path']).name}`, SQLite, with its WAL): "
        f"{fmt((journal.get('at_end_of_load_mb') or {}).get('total'))} MB at the end of the load, "
        f"{fmt((journal.get('after_shutdown_mb') or {}).get('total'))} MB after shutdown "
        f"(before load: {fmt((journal.get('idle_before_load_mb') or {}).get('total'))} MB). "
        "It grows with the quotes by design: every quote and its outcome are journaled, on "
        "disk, not in the bot's memory, until `storage.retain_days` (30 days by default; "
        'docs/operations.md, "Disk").',
        "",
        *_journal_notes(r),
        "## Over the run",
        "",
        f"Answers/s per window: {sp(tot['answers_per_s'], 1)}; p50 {sp(tot['p50_ms'])} ms; "
        f"p99 {sp(tot['p99_ms'])} ms; max {sp(tot['max_ms'])} ms. "
        f"Sent {tot['sent']:,}, answered {tot['answered']:,}, missing {tot['missing']:,}. "
        f"Open quotes {sp(tot['open_quotes'], 0)}. Bot CPU {sp(tot['bot_cores'])} cores.",
        "",
        f"**Other processes** (not the bot, the sandbox or this driver; the machine has "
        f"{m['cpus']} cores and is shared): {sp(tot['other_processes_cores'])} cores per window. "
        "Latency grows when they take the bot's core; memory should not.",
        "",
        md_table(
            [
                "t (s)",
                "RSS MB",
                "anon MB",
                "open quotes",
                "answers/s",
                "p50 ms",
                "p99 ms",
                "max ms",
                "missing",
                "bot cores",
                "other procs cores",
                "db MB",
                "WAL MB",
            ],
            [
                [
                    s["t_s"],
                    s["memory_mb"].get("VmRSS", "-"),
                    s["memory_mb"].get("RssAnon", "-"),
                    (s.get("bot_summary") or {}).get("open_quotes", "-"),
                    s.get("answers_per_s", "-"),
                    s.get("latency_ms", {}).get("p50", "-"),
                    s.get("latency_ms", {}).get("p99", "-"),
                    s.get("latency_ms", {}).get("max", "-"),
                    s.get("missing", "-"),
                    s.get("cpu_utilisation", {}).get("bot", "-"),
                    s.get("cpu_utilisation", {}).get("other_processes", "-"),
                    s["journal_mb"].get("db", "-"),
                    s["journal_mb"].get("db_wal", "-"),
                ]
                for s in r["samples"]
            ],
        ),
        "",
        "## The bot",
        "",
    ]
    final, which = _final_summary(r)
    log = bot.get("log") or {}
    lines += [
        f"{which}: requests {fmt(final.get('requests', '-'))}, quoted "
        f"{fmt(final.get('quoted', '-'))}, skipped {final.get('skipped') or 'none'} (a skip is "
        f"an outcome the driver counts as missing), outcomes {final.get('outcomes', '-')}, open "
        f"{final.get('open_quotes', '-')}. Log: {log.get('lines', '-')} lines, by level "
        f"{log.get('by_level', {})}, tracebacks {log.get('tracebacks', '-')}; warnings and "
        f"errors {log.get('warnings_and_errors') or 'none'}. Answers verified "
        f"{bot['answers_verified']['checked']:,}, invalid {bot['answers_verified']['invalid'] or 0}"
        f"; `is_nonce_used` calls {bot['view_calls'].get('is_nonce_used', 0)}. "
        f"Shutdown: {bot.get('shutdown')}.",
        "",
    ]
    if r["errors"]:
        lines += ["## Errors", "", *[f"- {e}" for e in r["errors"]], ""]
    return "\n".join(lines)


def _final_summary(r: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The bot's summary at shutdown, or its last periodic one when it did not log one
    (killed after the stop timeout)."""
    final = ((r["bot"].get("log") or {}).get("final_summary")) or {}
    if final:
        return final, "Final summary (at shutdown)"
    last = next((s["bot_summary"] for s in reversed(r["samples"]) if s.get("bot_summary")), None)
    if last:
        return last, "No summary at shutdown; the last periodic one"
    return {}, "No summary"


def _steps(steps: list[dict[str, Any]] | None, snapshots: list[dict[str, Any]] | None) -> list[str]:
    """The RSS's steps after warm-up beside the bot's desk snapshots (its largest transient)."""
    if steps is None and snapshots is None:  # a result from before issue 29 had neither
        return []
    said = ", ".join(f"{s['mb']:+.2f} MB at t = {s['t_s']} s" for s in steps or []) or "none"
    taken = (
        "; ".join(
            f"t = {s['t_s']} s ({s['facts']:,} facts since the last, {s['open_quotes']:,} open "
            f"quotes, the loop held {s['loop_held_ms']} ms)"
            for s in snapshots or []
        )
        or "none"
    )
    return [
        f"RSS steps after warm-up (a rise of at least 1 MB between two samples): {said}. "
        f"The bot's desk snapshots (its log): {taken}.",
        "",
    ]


def _components(parts: dict[str, Any]) -> list[str]:
    if not parts:
        return []
    labels = {
        "RssAnon": "RSS, anonymous (heap: Python objects, SQLite's page cache)",
        "RssFile": "RSS, file-backed (code, the journal's mapped `-shm` WAL index)",
        "journal_shm_file": "the journal's `-shm` file (size on disk, for comparison)",
    }
    rows = [
        [labels.get(k, k), v["start_mb"], v["end_mb"], v["slope_mb_per_min"], v["fit_growth_mb"]]
        for k, v in parts.items()
    ]
    return [
        "Where the RSS goes (after warm-up):",
        "",
        md_table(["part", "start MB", "end MB", "slope MB/min", "fit growth MB"], rows),
        "",
    ]


def _journal_notes(r: dict[str, Any]) -> list[str]:
    """The database's growth per quote, and whether the WAL was ever reset during the load."""
    journal, samples = r["journal"], r["samples"]
    final, _ = _final_summary(r)
    db = (journal.get("after_shutdown_mb") or {}).get("db")
    wal = [s["journal_mb"].get("db_wal", 0.0) for s in samples]
    out = []
    if db and final.get("quoted"):
        out.append(
            f"Database file after shutdown (the WAL aside): {db * 1e3 / final['quoted']:.2f} kB "
            f"per quote ({final['quoted']:,} quotes)."
        )
    shutdown = r["bot"].get("shutdown") or {}
    if shutdown and not shutdown.get("clean"):
        out.append(
            f"The bot did not exit within {shutdown.get('shutdown_s')} s of SIGTERM and was "
            "killed: the WAL was left on disk, not folded into the database (SQLite does that "
            "on the next open)."
        )
    if len(wal) >= 2:
        bound_mb = 2 * WAL_LIMIT_BYTES / 1e6  # journal_size_limit: the file's ceiling
        out.append(
            f"WAL: {fmt(wal[0])} MB at the first sample, {fmt(max(wal))} MB at most, "
            f"{fmt(wal[-1])} MB at the last; "
            + (
                f"within its bound of {fmt(bound_mb)} MB: the bot restarts it from its "
                f"beginning past {WAL_LIMIT_BYTES >> 20} MiB in use, and the file is written "
                "over rather than grown (solver/io/store/sqlite_store.py)."
                if max(wal) <= bound_mb
                else f"past its bound of {fmt(bound_mb)} MB: the WAL was not restarted from "
                "its beginning during the load. Disk, not RSS; the `-shm` index (mapped, so in "
                "`RssFile`) grows with it: "
                f"{fmt((samples[-1]['journal_mb']).get('db_shm', 0.0))} MB at the end."
            )
        )
    return [*out, ""] if out else []


def _mb(d: dict[str, float]) -> str:
    return _mb_v(d.get("VmRSS"))


def _mb_v(v: float | None, digits: int = 2) -> str:
    return "-" if v is None else f"{fmt(float(v), digits)} MB"


def plot(r: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = [s for s in r["samples"] if "VmRSS" in s["memory_mb"]]
    if not samples:
        return
    mem, warmup = r["memory"], r["setup"]["warmup_s"]
    idle = r["memory"].get("idle_before_load_mb") or {}
    if "VmRSS" in idle:
        samples = [{"t_s": 0.0, "memory_mb": idle}, *samples]
    t = np.array([s["t_s"] for s in samples])
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(11, 7.5), sharex=True)
    ax1.plot(t, [s["memory_mb"]["VmRSS"] for s in samples], "o-", ms=3, label="VmRSS")
    ax1.plot(
        t,
        [s["memory_mb"].get("RssAnon", math.nan) for s in samples],
        ".-",
        ms=2,
        alpha=0.6,
        label="RssAnon",
    )
    if "slope_mb_per_min" in mem:
        tt = t[t >= warmup - 1e-6]
        ax1.plot(
            tt,
            mem["intercept_mb"] + mem["slope_mb_per_min"] * tt / 60,
            "k--",
            lw=1,
            label=f"fit {mem['slope_mb_per_min']:+.3f} MB/min ({mem['verdict']})",
        )
    ax1.axvspan(0, warmup, color="grey", alpha=0.15, label="warm-up")
    for i, snap in enumerate(r["bot"].get("desk_snapshots") or []):
        ax1.axvline(
            snap["t_s"], color="C2", lw=1, ls=":", label="desk snapshot" if i == 0 else None
        )
    ax1.set_ylabel("bot memory (MB)")
    ax1.set_ylim(bottom=0)
    ax1.grid(alpha=0.3)
    ax1.legend(fontsize=8, loc="lower right")
    ax1.set_title(
        f"Soak at {r['setup']['rate_per_s']:,} requests/s: bot RSS and latency per "
        f"{r['setup']['window_s']:.0f} s window"
    )
    lat = [s for s in samples if (s.get("latency_ms") or {}).get("n")]
    tl = [s["t_s"] for s in lat]
    ax2.plot(tl, [s["latency_ms"]["p99"] for s in lat], "o-", ms=3, color="C3", label="p99")
    ax2.plot(tl, [s["latency_ms"]["p50"] for s in lat], ".-", ms=3, color="C1", label="p50")
    ax2.set_ylabel("request → answer latency (ms)")
    ax2.set_xlabel("time since the load started (s)")
    ax2.set_ylim(bottom=0)
    ax2.grid(alpha=0.3)
    twin = ax2.twinx()
    twin.plot(tl, [s["answers_per_s"] for s in lat], color="C0", alpha=0.5, lw=1, label="answers/s")
    twin.set_ylabel("answers/s", color="C0")
    twin.set_ylim(0, r["setup"]["rate_per_s"] * 1.2)
    handles = ax2.get_legend_handles_labels()
    extra = twin.get_legend_handles_labels()
    ax2.legend(handles[0] + extra[0], handles[1] + extra[1], fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
