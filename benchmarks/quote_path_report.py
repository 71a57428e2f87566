"""The ``quote_path`` summary (markdown) and plots, from the result the benchmark writes.

The profile section (issue 29) is one table of µs of CPU per answer by stage, the bot beside
the minimal solver at saturation, with their difference and the bot at 500/s
(``stage_costs``, :func:`benchmarks.quote_path_profile.stage_costs`): shares of busy samples
alone do not compare across two processes whose totals differ. Results written before it (no
``stage_costs``) still render as the shares they carry.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import dirty_note, md_table, plot_stages, profile_markdown, stage_table
from benchmarks.quote_path_compare import METRIC_LABELS, spread
from benchmarks.quote_path_driver import SAT_INFLIGHT, PhaseData
from benchmarks.quote_path_inside import inside_share, own_lag
from benchmarks.quote_path_pg import section as pg_section
from benchmarks.quote_path_profile import COMPARED
from benchmarks.quote_path_signers import section as signer_section
from solver.runtime.upkeep import TICK_S


def _cell(s: dict[str, Any] | None, digits: int = 2) -> str:
    """``p50 [min–max]`` of a spread over the repeats."""
    if not s or not s.get("n"):
        return "-"
    if s["n"] == 1:
        return f"{s['p50']:,.{digits}f}"
    return f"{s['p50']:,.{digits}f} [{s['min']:,.{digits}f}–{s['max']:,.{digits}f}]"


def _mark(met: bool | None) -> str:
    return "-" if met is None else ("met" if met else "**MISSED**")


def _header(r: dict[str, Any]) -> list[str]:
    m, setup = r["machine"], r["setup"]
    cal = m["calibration"]
    others = spread(run["cpu_utilisation"].get("other_processes") for run in r["runs"])
    base = r["systems"].get("baseline")
    extensions = "; ".join(
        f"{n} {', '.join(s['websocket_extensions']) or 'none'}" for n, s in r["systems"].items()
    )
    return [
        "# Quote path benchmark (issues 4, 10, 11)",
        "",
        f"Run: `{r.get('command') or 'python -m benchmarks.run --only quote_path'}`"
        f"{' (quick)' if r['quick'] else ''}, {m['date_utc']}, commit `{m['git_commit']}`"
        f"{dirty_note(m)}, {m['cpu_model']} × {m['cpus']}, Python {m['python']}. "
        f"Total {r['runtime_s']} s.",
        "",
        "Systems, each a child process answering its own loopback relay (this driver) over a "
        f"websocket (extensions: {extensions}): "
        "**bot** (`python -m solver.cli run`, this tree, INFO logging, journal on), "
        + (
            f"**baseline** (the same command from `git archive {setup['baseline_rev']}` = "
            f"`{(base or {}).get('commit', '')[:10]}`, importing `solver` from "
            f"`{(base or {}).get('imports_solver_from')}`), "
            if base
            else ""
        )
        + "**minimal** (`benchmarks/minimal_solver.py`: orjson, websockets, the same signer, "
        "nothing else). "
        f"{setup['repeats']} repeats of {', '.join(setup['phases'])} ({setup['phase_seconds']} s "
        "each), phase by phase, one system after the other (the order rotates per repeat); "
        "after each run the driver waits for the answers' deadlines and the bots' grace "
        f"({setup['after_work_wait_s']} s) and for quiet systems. Cells are the median over the "
        "repeats [min–max]. See `benchmarks/README.md`.",
        "",
        f"Machine check: ed25519 sign {cal['ed25519_sign_us']} µs, base58(64 B) "
        f"{cal['b58encode_64B_us']} µs ({cal['ratio_to_design']}× DESIGN's budgets); other "
        f"processes used {(m.get('quiet_check') or {}).get('background_cores_at_start', '-')} "
        f"cores before the run and {_cell(others, 2)} cores during the runs (median [min–max]; "
        "per run: `other procs` in the table of runs). On this 2-core machine the driver and "
        "the sandbox need most of one core, so every core another process takes comes out of "
        "the system under test: rates and latencies then measure the machine as much as the "
        "system, while CPU µs per answer hardly moves — it is the figure to compare.",
        "",
    ]


def _issue11(r: dict[str, Any]) -> list[str]:
    summ, systems = r["summary"], r["setup"]["systems"]
    t = r["issue11_targets"]
    rows = [
        ("saturation_answers_per_s", "saturation_vs_minimal", 0),
        ("p99_ms_at_2000", "p99_ms_at_2000", 2),
        ("p99_ms_at_500", "p99_ms_at_500", 2),
        ("cpu_us_per_answer", "cpu_us_per_answer", 0),
        ("largest_stall_ms_at_rates", None, 2),
    ]
    table = []
    for key, target, digits in rows:
        ratio = r["ratios"]["bot/minimal"][key]
        table.append(
            [METRIC_LABELS[key]]
            + [
                _cell(summ[key].get(s), digits)
                for s in ("bot", "minimal", "baseline")
                if s in systems
            ]
            + [_cell(ratio, 2)]
            + ([t[target]["wanted"], _mark(t[target]["met"])] if target else ["", ""])
        )
    stall, nonce = t["largest_stall_ms"], t["nonce_checks_per_lost_quote"]
    bot = r["systems"]["bot"]
    header = ["", *[s for s in ("bot", "minimal", "baseline") if s in systems]]
    return [
        "## Issue 11: the bot against the minimal solver",
        "",
        md_table([*header, "bot / minimal", "target", ""], table),
        "",
        f"- **Event-loop stalls**: {stall['wanted']}: worst {stall['measured']} ms → "
        f"{_mark(stall['met'])}. Measured from the driver: for each answer, the time since the "
        "previous answer or since its request was sent, whichever is later (nothing was "
        "added to the bot). It includes the driver's own loop and both socket stacks, so it "
        "bounds the bot's stalls from above; the minimal solver's column is the floor of "
        "this method on this machine. In-process (no socket), a 1 ms timer woke at worst "
        f"{r['desk_executor_only']['loop_lateness_ms'].get('max', '-')} ms late "
        f"(p99 {r['desk_executor_only']['loop_lateness_ms'].get('p99', '-')} ms). "
        + own_lag(r["runs"]),
        f"- **The bot's own part of the latency**: {inside_share(r['runs'])}",
        f"- **Lost quotes cost no RPC**: `is_nonce_used` calls by the bot's account, counted "
        f"by the sandbox process: {bot['view_calls'].get('is_nonce_used', 0):,} for "
        f"{bot.get('lost_quotes', 0):,} quotes retired LOST → {nonce['measured']} per lost "
        f"quote → {_mark(nonce['met'])}"
        + (
            f" (baseline: {r['systems']['baseline']['view_calls'].get('is_nonce_used', 0):,} "
            f"for {r['systems']['baseline'].get('lost_quotes', 0):,})."
            if "baseline" in r["systems"]
            else "."
        ),
        "",
    ]


def _issue10(r: dict[str, Any]) -> list[str]:
    verdict = r.get("issue10_not_slower")
    if not verdict:
        return []
    rows = []
    for key, v in verdict["metrics"].items():
        ratio = r["ratios"]["bot/baseline"][key]
        better = "higher" if ratio["higher_is_better"] else "lower"
        rows.append(
            [
                METRIC_LABELS[key],
                _cell(r["summary"][key].get("bot")),
                _cell(r["summary"][key].get("baseline")),
                _cell(ratio, 3),
                f"{better} is better; ±{ratio['tolerance']:.0%}",
                v["verdict"] if v["verdict"] == "not slower" else f"**{v['verdict']}**",
            ]
        )
    return [
        "## Issue 10: not slower than the baseline (same harness, same run)",
        "",
        md_table(["", "bot", "baseline", "bot / baseline (paired)", "", "verdict"], rows),
        "",
        f"Verdict: **{verdict['verdict']}**. A ratio is taken within each repeat, the two "
        "systems having run the same phase back to back. A figure is *not slower* when the "
        "median over the repeats is not worse than the tolerance, *slower* when every repeat "
        "is worse, *inconclusive* when the repeats disagree.",
        "",
    ]


def _runs(r: dict[str, Any]) -> list[str]:
    rows = []
    for run in r["runs"]:
        lat = run["latency_ms"]
        rows.append(
            [
                run["repeat"],
                run["phase"],
                run["system"],
                run["offered_rate_per_s"],
                run["answers_per_s"],
                run["missing"],
                lat.get("p50", math.nan),
                lat.get("p99", math.nan),
                lat.get("max", math.nan),
                run["largest_stall_ms"],
                run["cpu_us_per_answer"],
                run["cpu_us_per_answer_with_after_work"],
                f"{run['cpu_utilisation'].get('other_processes', 0):.2f}",
            ]
        )
    header = ["#", "phase", "system", "offered/s", "answered/s", "missing", "p50 ms", "p99 ms"]
    header += ["max ms", "largest gap ms", "CPU µs/answer", "with after-work", "other procs"]
    return [
        "## Every run",
        "",
        md_table(header, rows),
        "",
        "`answered/s` counts answers within the phase's sending window; `missing`: unanswered "
        f"{r['setup']['answer_grace_s']:.0f} s after it. `CPU µs/answer`: the system's CPU "
        "(from /proc) over the window per answer; `with after-work`: from the phase's start "
        "until the system was quiet again (deadline expiry included). `other procs`: cores used "
        "by processes outside the benchmark during the window.",
        "",
    ]


def _inprocess_and_logs(r: dict[str, Any]) -> list[str]:
    e = r["desk_executor_only"]
    pq = e["per_quote_us"]
    lines = [
        "## The bot's own cost (in-process desk/executor, no socket)",
        "",
        f"`bot.ws.handle_frame(event)` → desk → sign → journal append and commit → answer "
        f"frame handed over, for {e['requests']:,} requests ({e['signed']:,} signed): p50 "
        f"{pq['p50']:.1f} µs, p99 {pq['p99']:.1f} µs, max {pq['max']:.0f} µs; with the relay's "
        f"OK reply and `desk.tick` every {TICK_S * 1000:.0f} ms, "
        f"**{e['throughput_per_s_one_core']:,} quotes/s "
        "on one core** without any network. Garbage collection: "
        + "; ".join(
            f"{g}: {v['count']} passes, longest {v['max_ms']} ms"
            for g, v in e["garbage_collections"].items()
        )
        + f"; {e['open_quotes_at_end']:,} quotes open at the end.",
        "",
    ]
    reads = e.get("reads")
    if reads:
        runs = reads["cpu_us_per_request"]
        lines += [
            f"The quotes of one read of the socket, {reads['read_size']} a read "
            f"({reads['requests']:,} requests, fresh bots, interleaved): one by one "
            f"{reads['median_one_by_one']} µs of CPU a request "
            f"({' / '.join(str(x) for x in runs['one_by_one'])}), in stages (every decision, "
            f"then every signature, then every record: `Executor.request_many`) "
            f"{reads['median_in_stages']} ({' / '.join(str(x) for x in runs['in_stages'])}): "
            f"**{reads['ratio']}×**.",
            "",
        ]
    projection = e.get("projection")
    if projection:
        lines += [
            f"The query tables, caught up at once afterwards (`Store.project()`, the after-work "
            f"of a burst): {projection['entries']:,} journal entries for "
            f"{projection['answers']:,} answers ({projection['lost']:,} of them lost) in "
            f"{projection['cpu_ms']:,} ms of CPU, **{projection['us_per_answer']} µs an "
            "answer**.",
            "",
        ]
    for name, s in r["systems"].items():
        log, final = s.get("log") or {}, (s.get("log") or {}).get("final_summary")
        shutdown = s.get("shutdown") or {}
        text = (
            f"- **{name}**: SIGTERM → exit {shutdown.get('exit_code')} after "
            f"{shutdown.get('shutdown_s')} s; answers verified {s['answers_verified']['checked']}, "
            f"invalid {s['answers_verified']['invalid'] or 'none'}; solver from "
            f"`{s['imports_solver_from']}`"
        )
        if final:
            text += (
                f"; at shutdown {final['requests']:,} requests of {s['driver_sent_total']:,} sent, "
                f"{final['quoted']:,} quoted, skipped {final['skipped'] or 'none'}, outcomes "
                f"{final['outcomes']}, {final['open_quotes']:,} open; log {log['lines']} lines "
                f"{log['by_level']}, {log['tracebacks']} tracebacks"
            )
            if log.get("warnings_and_errors"):
                text += "; " + "; ".join(
                    f"{n}× `{m}`" for m, n in log["warnings_and_errors"].items()
                )
        lines.append(text + ".")
    return [*lines, ""]


def _profiles(r: dict[str, Any]) -> list[str]:
    profiles = r.get("profiles") or {}
    if not profiles:
        return []
    costs = r.get("stage_costs")
    title = "the time goes, per stage: the bot beside the minimal solver"
    lines = [f"## Where {title}" if costs else "## Where the bot's time goes", ""]
    staged = {n: p for n, p in profiles.items() if p.get("groups")}
    if costs:
        lines += _stage_costs(costs, profiles)
    elif staged:  # results written before the costs per answer (issue 29)
        runs = r.get("profiled_phases") or {}
        lines += [
            "py-spy on the bot during extra phases ("
            + "; ".join(
                f"{n}: {runs.get(n, {}).get('answers_per_s', '-')} answers/s, "
                f"{runs.get(n, {}).get('cpu_us_per_answer', '-')} µs CPU per answer, "
                f"main thread busy in {p['busy_share_pct']}% of samples"
                for n, p in staged.items()
            )
            + "). Each busy sample goes to the first stage of this table's order found in "
            "its stack; shares are of busy samples.",
            "",
            stage_table(staged),
            "",
        ]
    for name, prof in profiles.items():
        lines += [f"### {name}", ""]
        what = f"the {prof.get('system', 'bot')}"
        lines += profile_markdown(prof, what, rows=15, level="####", stages=False)
    return lines


def _column(name: str) -> str:
    """``bot, saturation (profiled)`` -> ``bot, saturation``."""
    return name.removesuffix(" (profiled)")


def _us(value: float | None, pct: float | None = None) -> str:
    """``12.3 (9.8 %)``; ``—`` for a stage the system has not."""
    if value is None:
        return "—"
    if value == 0:
        return "0"
    return f"{value:,.1f}" + ("" if pct is None else f" ({pct:.1f} %)")


def _signed(value: float | None) -> str:
    """``+12.3`` / ``−4.5``; ``0``; ``—`` when there is nothing to compare."""
    if value is None:
        return "—"
    if round(value, 1) == 0:
        return "0"
    return f"{value:+,.1f}".replace("-", "−")


def _stage_costs(costs: dict[str, Any], profiles: dict[str, dict[str, Any]]) -> list[str]:
    """Issue 29's table: each stage in µs of CPU per answer, the bot beside the minimal
    solver at saturation, their difference, and the bot at 500/s."""
    columns, totals = costs["columns"], costs["totals"]
    compared = [c for c in columns if c in COMPARED]
    rest = [c for c in columns if c not in compared]
    with_diff = len(compared) == 2  # the bot's and the minimal's

    def line(first: str, cells: dict[str, str], diff: str) -> list[str]:
        return [first, *[cells[c] for c in compared], *([diff] if with_diff else [])] + [
            cells[c] for c in rest
        ]

    header = line(
        "stage", {c: f"{_column(c)}: µs/answer (% of busy)" for c in columns}, "bot − minimal, µs"
    )
    rows = [
        line(
            row["stage"],
            {c: _us(row["us_per_answer"][c], row["pct_of_busy"][c]) for c in columns},
            _signed(row["bot_minus_minimal"]),
        )
        for row in costs["rows"]
    ]
    rows.append(
        line(
            "**total: the process's CPU per answer (measured)**",
            {c: f"**{_us(totals[c]['cpu_us_per_answer'])}**" for c in columns},
            f"**{_signed(costs['total_bot_minus_minimal'])}**",
        )
    )
    runs = "; ".join(
        f"{_column(c)}: {_us(totals[c]['answers_per_s'])} answers/s, "
        f"{_us(totals[c]['cpu_us_per_answer'])} µs of CPU per answer, main thread busy in "
        f"{totals[c]['busy_share_pct']} % of {profiles[c]['samples_main_thread']:,} samples"
        for c in columns
    )
    return [
        "py-spy on the bot during two extra phases (500 requests/s, then saturation) and on "
        "the minimal solver right after, at saturation too (the same driver, "
        f"{SAT_INFLIGHT} requests in flight): {runs}.",
        "",
        "**How a stage's µs are counted.** py-spy samples the process's main thread 250 times "
        "a second; a sample is *busy* unless the event loop is waiting for I/O. Each busy "
        "sample goes to the first stage, in the system's list order "
        "(`benchmarks/quote_path_profile.py`: `STAGES` for the bot, `MINIMAL_STAGES` for the "
        "minimal solver), found anywhere in its stack. A stage's **µs of CPU per answer = its "
        "share of the busy samples × the phase's measured CPU µs per answer** (the process's "
        "user + system CPU from /proc over the phase's sending window, divided by the answers "
        "in that window), so a column adds up to its total. That spreads the measured CPU "
        "over the stages as the busy samples are spread: a busy sample may be off the CPU "
        "(waiting for a core on this shared machine, py-spy's pause, a blocking system "
        "call) and other threads are not sampled, so a stage's figure is its part of the "
        "measured total, not a measurement of its own. A stage both systems have (parse, "
        "decide, sign, send, websockets, asyncio) is the same step of the answer in both, "
        "done the bot's way or the floor's (the bot's parse also validates and dispatches; "
        "its decide runs filters, a strategy, limits and a reservation where the minimal "
        "solver multiplies by a fixed price); `bot − minimal` is what the bot spends on it "
        "above the floor, and all of a stage the minimal solver has not (—: no journal, "
        "desk book, ticker, jobs or executor). The sign stage runs "
        "the same `QuoteSigner` in both (only the nonce differs), so its difference shows "
        "what this attribution cannot resolve (sampling error, the bot's larger working set "
        "in the caches, time off the CPU spread evenly) rather than work the bot adds.",
        "",
        md_table(header, rows),
        "",
    ]


def markdown(r: dict[str, Any]) -> str:
    lines = _header(r)
    if r["runs"]:
        lines += _issue11(r) + _issue10(r) + signer_section(r) + pg_section(r) + _runs(r)
    lines += _inprocess_and_logs(r) + _profiles(r)
    if r["errors"]:
        lines += ["## Errors", "", *[f"- {e}" for e in r["errors"]], ""]
    lines += [
        "Plots: `quote_path.png` (latency CDFs per system at 500 and 2,000/s; saturation "
        "answers/s and CPU per answer per repeat)"
        + (
            ", `quote_path_profile.png` (µs of CPU per answer by stage at saturation)"
            if r.get("stage_costs")
            else ", `quote_path_profile.png` (profiles by stage)"
            if r.get("profiles")
            else ""
        )
        + ". All figures: `quote_path.json`."
    ]
    return "\n".join(lines) + "\n"


def plot(
    r: dict[str, Any], kept: list[tuple[str, PhaseData]], path: Path, profile_path: Path
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    systems = r["setup"]["systems"]
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8))
    for ax, phase in zip(axes[:2], ("rate_500", "rate_2000"), strict=True):
        for system in systems:
            lat = [
                x for s, d in kept if s == system and d.phase.name == phase for x in d.latencies_ns
            ]
            if not lat:
                continue
            ordered = np.sort(np.array(lat) / 1e6)
            ax.plot(ordered, np.arange(1, len(ordered) + 1) / len(ordered), label=system)
        ax.axhline(0.99, color="grey", ls=":", lw=1)
        ax.set_xscale("log")
        ax.set_xlabel("request → answer latency (ms, log)")
        ax.set_ylabel("fraction of answers (all repeats)")
        ax.set_title(f"Latency CDF, {phase}")
        ax.grid(alpha=0.3, which="both")
        if kept:
            ax.legend(fontsize=8)
    ax = axes[2]
    sat = [run for run in r["runs"] if run["phase"] == "saturation"]
    x = np.arange(len(systems))
    for i, system in enumerate(systems):
        values = [run["answers_per_s"] for run in sat if run["system"] == system]
        ax.scatter([i] * len(values), values, color="C0", zorder=3)
        if values:
            ax.bar(i, float(np.median(values)), color="C0", alpha=0.35)
    ax.set_xticks(x, systems)
    ax.set_ylabel("answers/s at saturation (bars: median)", color="C0")
    twin = ax.twinx()
    for i, system in enumerate(systems):
        values = [
            run["cpu_us_per_answer_with_after_work"] for run in sat if run["system"] == system
        ]
        twin.scatter([i + 0.15] * len(values), values, color="C3", marker="x", zorder=3)
    twin.set_ylabel("CPU µs per answer, with after-work (×)", color="C3")
    ax.set_title("Saturation, every repeat")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    profiles = {n: p for n, p in (r.get("profiles") or {}).items() if p.get("groups")}
    compared = [n for n in (r.get("stage_costs") or {}).get("columns", []) if n in COMPARED]
    if compared:  # the saturation pair only: the bot at 500/s would dwarf it (see the table)
        plot_stages(
            {_column(n): profiles[n] for n in compared},
            profile_path,
            "CPU per answer by stage at saturation: the bot beside the minimal solver",
            value="us_per_answer",
            xlabel="µs of CPU per answer (share of busy py-spy samples × measured CPU)",
        )
    elif profiles:  # results written before the costs per answer (issue 29)
        plot_stages(profiles, profile_path, "Bot CPU by stage")
