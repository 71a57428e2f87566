"""The report of :mod:`benchmarks.sandbox_load`: its markdown (``sandbox_load.md``) and plot
(``sandbox_load.png``), from the result it wrote to ``sandbox_load.json``. A move out of the
benchmark's module, which keeps the load and the measurements."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from benchmarks.common import dirty_note, fmt, md_table, profile_markdown

if TYPE_CHECKING:
    from benchmarks.sandbox_load import Outcome


def _slash(d: dict[str, Any], keys: tuple[str, ...]) -> str:
    return " / ".join(fmt(d.get(k, "-")) for k in keys)


def markdown(r: dict[str, Any]) -> str:
    c = r["quote_status_check"]
    u = r["unhandled_errors"]
    bus = r.get("bus_stats") or {}
    m = r["machine"]
    setup = r["setup"]
    phases = r["phases"]
    names = list(phases)
    pct = ("p50", "p90", "p99", "max")
    quiet = (m.get("quiet_check") or {}).get("background_cores_at_start", "-")
    lines = [
        "# Sandbox load test (issue 3)",
        "",
        f"Run: `{r['command']}`{' (quick)' if r['quick'] else ''}, {m['date_utc']}, commit "
        f"`{m['git_commit']}`{dirty_note(m)}, {m['cpu_model']} × {m['cpus']}, "
        f"Python {m['python']}. "
        f"Total {r['runtime_s']} s.",
        "",
        f"{setup['solvers']} scripted solvers on the real `/ws`; `quote` requests through `/rpc` "
        f"from {setup['httpx_clients']} httpx clients (caller wait {setup['quote_wait_ms']} ms, "
        f"HTTP timeout {setup['http_timeout_s']:.0f} s), each followed by `publish_intent` of the "
        f"best offer by one of {setup['users_per_phase']} funded users. Two phases: "
        + ", ".join(
            f"`{n}` {p['rate_per_s']:.0f}/s for {p['seconds']:.0f} s"
            for n, p in setup["phases"].items()
        )
        + " (issue 3's load). Sandbox, solvers and load generator each run in their own "
        "process. See `benchmarks/README.md`.",
        "",
        f"Machine check: ed25519 sign {m['calibration']['ed25519_sign_us']} µs "
        f"({m['calibration']['ratio_to_design']}× DESIGN's budgets); other processes used "
        f"{quiet} cores before the run.",
        "",
        "## Figures",
        "",
    ]

    def row(label: str, get: Any) -> list[Any]:
        return [label] + [get(phases[n]) for n in names]

    def fig(p: dict[str, Any]) -> dict[str, Any]:
        figures_: dict[str, Any] = p["figures"]
        return figures_

    rows = [
        row(
            "requests sent (rate/s)",
            lambda p: f"{fig(p)['requests']:,} ({fig(p)['achieved_rate_per_s']})",
        ),
        row(
            "arrivals not sent (why)",
            lambda p: p["arrivals_not_sent"] or 0,
        ),
        row(
            "quote answered / failed or cancelled",
            lambda p: f"{fig(p)['quote_answered']:,} / {fig(p)['quote_failed_or_unfinished']:,}",
        ),
        row(
            "quote round trip p50 / p90 / p99 / max (ms)",
            lambda p: _slash(fig(p)["quote_round_trip_ms"], pct),
        ),
        row(
            "offers per request: mean / min; all 20",
            lambda p: (
                _slash(fig(p)["offers_per_request"], ("mean", "min"))
                + f"; {fig(p)['offers_per_request'].get('all_20_share_pct', '-')} %"
            ),
        ),
        row(
            "publish round trip p50 / p90 / p99 / max (ms)",
            lambda p: _slash(fig(p)["publish_round_trip_ms"], pct),
        ),
        row(
            "publish OK: of attempted / of answered",
            lambda p: (
                f"{fig(p)['publish']['ok_rate_pct']} % of {fig(p)['publish']['attempted']:,} / "
                f"{fig(p)['publish']['ok_rate_of_answered_pct']} % of "
                f"{fig(p)['publish']['answered']:,}"
            ),
        ),
        row("request outcomes", lambda p: fig(p)["publish"]["outcomes"]),
        row("most requests in flight at once", lambda p: p["max_requests_in_flight"]),
        row(
            "runs (other processes' cores in each)",
            lambda p: (
                f"{len(p.get('attempts_other_processes_cores') or [1])} "
                f"({', '.join(f'{c:.2f}' for c in p.get('attempts_other_processes_cores') or [])})"
            ),
        ),
        row(
            "CPU cores during arrivals: sandbox / solvers / load / others",
            lambda p: _slash(
                p["cpu_cores"].get("arrivals", {}),
                ("sandbox", "solvers", "load", "other_processes"),
            ),
        ),
        row(
            "sandbox CPU per request → requests/s per sandbox core",
            lambda p: (
                f"{p['capacity_estimate']['sandbox_cpu_ms_per_request']} ms → "
                f"**{p['capacity_estimate']['requests_per_s_per_sandbox_core']}**"
                if p["capacity_estimate"]
                else "-"
            ),
        ),
    ]
    lines += [md_table(["measure", *[f"`{n}`" for n in names]], rows), ""]
    lines += [
        "Round trips count only the requests that got an answer. At most "
        f"{setup['max_in_flight']} requests are in flight (one per client connection); an "
        "arrival beyond that is not sent and is counted. A request is cancelled when it still "
        "has no answer "
        f"{setup['http_timeout_s'] + 5:.0f} s after the phase's last arrival. Requests per "
        "sandbox core: sandbox CPU seconds over the phase (arrivals and drain) per completed "
        "request — each one quote with 20 answers checked, one publish and one settlement.",
        "",
        "## Checks",
        "",
        md_table(
            ["check", "result"],
            [
                [
                    "every settled intent's winner got exactly one quote_status",
                    "PASS" if c["ok"] else "**FAIL**",
                ],
                [
                    "intents in the sandbox by status; settled quotes checked",
                    f"{c['intents_in_sandbox_by_status']}; {c['settled_quotes_checked']:,}",
                ],
                [
                    "quote_status lost / duplicated / to another solver / unexpected",
                    f"{c['lost']} / {c['duplicated']} / "
                    f"{c['sent_to_a_solver_that_did_not_quote_it']} / "
                    f"{c['not_matching_any_published_intent']}",
                ],
                [
                    "publish OK seen by the client but unknown to the sandbox",
                    c["client_ok_missing_in_sandbox"],
                ],
                [
                    "no unhandled exception (client disconnects apart)",
                    "PASS" if u["ok"] else "**FAIL**",
                ],
                [
                    "sandbox ERROR records (of which ClientDisconnect) / tracebacks / "
                    "internal RPC errors",
                    f"{u['sandbox_error_records']} ({u['of_which_client_disconnect']}) / "
                    f"{u['sandbox_tracebacks_in_output']} / {u['internal_rpc_errors']}",
                ],
                ["sandbox WARNING records", u["sandbox_warning_records"]],
                ["load generator errors", u["load_generator_errors"] or "none"],
            ],
        ),
        "",
        f"Bus counters (both phases): {fmt(bus.get('quote_requests', '-'))} quote requests, "
        f"{fmt(bus.get('quote_answers_ok', '-'))} answers accepted, rejected "
        f"{bus.get('quote_answers_rejected') or 'none'}; {fmt(bus.get('published', '-'))} "
        f"published, {fmt(bus.get('settled', '-'))} settled, settlement failures "
        f"{bus.get('settlement_failed') or 'none'}; {fmt(bus.get('quote_status_sent', '-'))} "
        f"quote_status sent, {bus.get('quote_status_undeliverable', '-')} undeliverable; "
        f"frames dropped by full outboxes: {r['sandbox_at_stop'].get('dropped_frames')}.",
        "",
        f"Shutdown on SIGTERM: solvers {r['shutdown']['solvers']}, "
        f"sandbox {r['shutdown']['sandbox']}.",
        "",
    ]
    prof = (phases.get("load") or {}).get("profile")
    if prof:
        lines += ["## Where the sandbox's time goes", ""]
        lines += profile_markdown(prof, "the sandbox")
    if r["errors"]:
        lines += ["## Errors", ""] + [f"- {e}" for e in r["errors"]] + [""]
    lines.append(
        "Plots: `sandbox_load.png` (round trips, offers per request)"
        + (", `sandbox_load_profile.png` (sandbox CPU by stage)" if prof else "")
        + ". All figures: `sandbox_load.json`."
    )
    return "\n".join(lines) + "\n"


def plot(phases: list[tuple[str, list[Outcome], float]], path: Path, solvers: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(15, 4.5))
    drawn = False
    for name, outcomes, started in phases:
        quoted = [o for o in outcomes if o.quote_ms is not None]
        if not quoted:
            continue
        drawn = True
        t = np.array([o.sent_at - started for o in quoted])
        q = np.array([o.quote_ms for o in quoted], dtype=float)
        n = np.array([o.offers for o in quoted])
        ordered = np.sort(q)
        ax1.plot(ordered, np.arange(1, len(q) + 1) / len(q), label=f"{name} (n={len(q):,})")
        secs = np.floor(t)
        xs = np.unique(secs)
        (line,) = ax2.plot(xs, [np.percentile(q[secs == s], 50) for s in xs], label=f"{name} p50")
        ax2.plot(
            xs,
            [np.percentile(q[secs == s], 99) for s in xs],
            ls="--",
            color=line.get_color(),
            label=f"{name} p99",
        )
        ax3.plot(
            xs, [n[secs == s].mean() for s in xs], color=line.get_color(), label=f"{name} mean"
        )
        ax3.plot(
            xs,
            [n[secs == s].min() for s in xs],
            ls=":",
            color=line.get_color(),
            label=f"{name} min",
        )
    if not drawn:
        plt.close(fig)
        return
    ax1.set_xscale("log")
    ax1.set_xlabel("quote round trip (ms, log)")
    ax1.set_ylabel("fraction of requests")
    ax1.set_title("Quote round trip, CDF")
    ax1.axhline(0.99, color="grey", ls=":", lw=1)
    ax1.grid(alpha=0.3, which="both")
    ax1.legend(fontsize=8)
    ax2.set_yscale("log")
    ax2.set_xlabel("second of the phase the request was sent in")
    ax2.set_ylabel("quote round trip (ms, log)")
    ax2.set_title("Round trip by send time")
    ax2.grid(alpha=0.3, which="both")
    ax2.legend(fontsize=8)
    ax3.set_ylim(0, solvers + 1)
    ax3.set_xlabel("second of the phase the request was sent in")
    ax3.set_ylabel("offers per request")
    ax3.set_title(f"Offers per request (of {solvers} solvers)")
    ax3.grid(alpha=0.3)
    ax3.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
