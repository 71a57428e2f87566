"""The report of :mod:`benchmarks.replay`: its markdown (``replay.md``, with the analysis of
why the target is missed) and plot (``replay.png``), from the result it wrote to
``replay.json``. A move out of the benchmark's module, which keeps the streams and the runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.common import dirty_note, fmt, md_table


def markdown(r: dict[str, Any], *, seed: int, rate: float) -> str:
    """``seed`` and ``rate``: the synthetic streams' (not in the result's JSON)."""
    t = r["targets"]
    target = t["requests_per_cpu_s_signing_off"]
    m = r["machine"]
    big = max(int(n) for n in r["setup"]["streams"])
    small = min(int(n) for n in r["setup"]["streams"])
    st = r["setup"]["streams"]
    rows = [
        [
            x["strategy"], "on" if x["sign"] else "off", f"{x['n']:,}", x["reader"],
            x["requests_per_cpu_s"],
            " / ".join(f"{y['requests_per_cpu_s']:,}" for y in x.get("repeats", [x])),
            x["cpu_s"], x["reader_process_cpu_s"], x["requests_per_s"],
            f"{x['quoted'] / max(1, x['requests']):.0%}", f"{x['won'] / max(1, x['quoted']):.0%}",
            x["max_rss_mb"], x["machine_busy_cores"],
        ]
        for x in r["runs"]
    ]  # fmt: skip
    flat = {True: "yes", False: "NO"}.get(
        t["memory_flat"],
        f"not judged ({small:,} requests end before the desk's bounded books are full)",
    )
    verdict = (
        f"met by {', '.join(t['met_by'])} (best {t['best_signing_off']:,})"
        if t["met_by"]
        else f"not met (best {t['best_signing_off']:,})"
    )
    lines = [
        "# Backtest replay speed",
        "",
        f"Run: `{r['command']}`{' (quick)' if r['quick'] else ''}, {m['date_utc']}, commit "
        f"`{m['git_commit']}`{dirty_note(m)}, {m['cpu_model']} × {m['cpus']}, "
        f"Python {m['python']}. Total {r['runtime_s']} s. Machine check: ed25519 sign "
        f"{m['calibration']['ed25519_sign_us']} µs ({m['calibration']['ratio_to_design']}× "
        f"DESIGN's budgets); background load at start "
        f"{(m.get('quiet_check') or {}).get('background_cores_at_start', '-')} cores.",
        "",
        f"Streams: synthetic, seed {seed}, wNEAR/USDC and ETH/USDC at {rate:g} requests/s with "
        f"bursts, cut at exactly {big:,} requests ({fmt(st[str(big)]['bytes'] / 1e6, 1)} MB gzip; "
        f"events {st[str(big)]['events']}) and {small:,} requests. Config: `config/default.yaml` "
        "with `amm` (30 bps) or `spread` (25 bps) on both pairs and the limits out of the way; "
        "competitor fill model; kill switch off; 10 M USD per token. Signing on runs on the "
        f"{small:,}-request stream. `inproc`: the stream is read in the replay's process "
        "(`Replay.run`); `prefetch`: read and parsed in a second process "
        "(`backtest.stream.prefetch`, `Replay.run_records`). Each run is its own process.",
        "",
        f"**Target ≥ {target:,} requests per CPU second with signing off** (the "
        f"{t['stream']:,}-request stream, `spread`, all CPU counted: the replay process's and "
        f"the prefetch reader's; median of {t['repeats']} runs): {verdict}. "
        f"**Memory flat in stream length**: {flat}.",
        "",
        md_table(
            [
                "strategy",
                "signing",
                "requests",
                "reader",
                "requests/CPU s (median)",
                "each run",
                "replay CPU s",
                "reader process CPU s",
                "requests/s (wall)",
                "quoted",
                "won/quoted",
                "max RSS MB",
                "machine busy cores",
            ],
            rows,
        ),
        "",
        "`requests/CPU s` counts requests over all the CPU the replay used: its own process's "
        "and, with prefetch, the reader process's (the columns beside it are the median run's). "
        f"Every run was made {t['repeats']} times, interleaved; the table shows the median "
        "run and each run's figure. `requests/s` counts requests over the wall time of the "
        "replay, reading included; `machine busy cores` is the whole machine's load over the "
        "run (this benchmark included): above the cores a run can use (1, or 2 with prefetch) "
        "others were busy too.",
        "",
        "## Memory",
        "",
        "Peak RSS (`VmHWM`, the replay process; the prefetch reader process is separate and "
        "listed in the JSON) with signing off:",
        "",
        md_table(
            ["run", f"{small:,} requests", f"{big:,} requests", "ratio"],
            [
                [k, v[str(small)], v[str(big)], v["ratio"]]
                for k, v in r["memory_max_rss_mb"].items()
            ],
        ),
        "",
        "The stream is read in batches of 256 lines (or of 4,096 records through a pipe) and "
        "never held; "
        "pending work is bounded by the open quotes and the markout horizon; the report keeps "
        "fixed-size histograms and downsampled series. Ten times the requests, the same memory.",
    ]
    prof = r.get("profile")
    if prof and prof.get("profile"):
        p = prof["profile"]
        reqs = p["requests"]
        lines += [
            "",
            f"## Where the time goes ({reqs:,} requests, spread, signing off, in-process)",
            "",
            f"cProfile over the whole replay ({p['total_s']} s under the profiler: it roughly "
            "doubles the cost of every Python call, so read the shares, not the seconds). "
            "Without the profiler: reading "
            f"the stream alone takes {prof['read_only_cpu_s']} s of CPU "
            f"({prof['read_only_cpu_s'] / reqs * 1e6:.1f} µs a request); "
            f"`QuotePipeline.decide` with a strategy that returns a constant costs "
            f"{prof['decide_const_us']} µs a call (solver/core's own share)"
            + (
                f"; a simulated user's price limit (`TakerModel.accepts`) "
                f"{prof['taker_limit_us']} µs an answer."
                if "taker_limit_us" in prof
                else "."
            ),
            "",
            md_table(
                ["stage", "share", "µs/request (profiled)"],
                [[k, f"{v['share']:.0%}", v["us_per_request"]] for k, v in p["stages"].items()],
            ),
            "",
            md_table(
                ["function (top self time)", "calls", "self s", "cumulative s"],
                [
                    [f["function"], f["calls"], f["self_s"], f["cumulative_s"]]
                    for f in p["top_self"]
                ],
            ),
        ]
    base = r.get("baseline")
    if base:
        lines += [
            "",
            f"## Against `{base['rev']}` (`{base['commit'][:10]}`)",
            "",
            f"The same {base['setup']['n']:,}-request stream ({base['setup']['strategy']}, signing "
            "off, read in-process) replayed by that revision's tree and by this one, alternated, "
            f"three pairs: median ratio **{base['median_ratio']}** of requests per CPU second "
            f"({'not slower' if base['not_slower'] else 'slower'}).",
            "",
            md_table(
                ["pair", "here, requests/CPU s", "baseline, requests/CPU s", "ratio"],
                [
                    [i + 1, p["here"], p["baseline"], p["ratio"]]
                    for i, p in enumerate(base["pairs"])
                ],
            ),
        ]
    lines += ["", CORE_NOTES]
    return "\n".join(lines) + "\n"


CORE_NOTES = """## What a request costs, and what is left (issue 29)

50,000 requests per CPU second is 20 µs a request, everything counted: reading the stream, the
live desk and executor (`solver/core`, `solver/runtime`: the replay drives the very objects
the bot runs, no vectorised stand-in), the strategy, the simulated relay and fill model, the
measurements. Where it went at `07ff898` (py-spy, 700 Hz, over the 100k stream, `spread`,
signing off, in-process, ~85 µs a request on this busy machine, each sample counted for the
innermost frame of this project's code):

| part | share |
|---|---|
| the desk (`solver/core`) | 46 % |
| the executor (`solver/runtime`) and the nonce source | 7 % |
| the engine, simulated ports, fill and taker models, measurements (`backtest/`) | 25 % |
| reading (`backtest/stream`, and `QuoteRequestParser.parse` of `solver/protocol`: 3 %) | 15 % |
| the strategy (`strategies/spread.py`, `pricing.py`) | 7 % |

Done in `backtest/` and `strategies/` for issue 29, with the same decisions, fills and
summaries (compared on nine replays: both strategies, signing on and off, both readers, the
three fill models, fixed and lognormal latency): the reader parses each line straight into a
record (a tuple with the time in µs and the request's one `QuoteRequest`), reads the writer's
timestamps without a `datetime`, and takes a short way for lines of the usual shape; the
engine runs on records with µs integers, one `datetime` per request (the desk's `now`) and per
tick; latency draws come a block at a time with their µs; the relay decides every due answer
in one loop; the taker draws no limit for an answer it must accept or refuse anyway and copies
its keyed hash; the competition model finds an observation's four buckets at once; the
competitor book expires entries without a queue; measurements queue a tuple per request or
outcome and count them a batch at a time; the cyclic collector's youngest generation is
10,000 objects during a replay (the default walked the replay's young objects ~270 times per
100k requests: 4.5 % of the CPU); `spread` works out a constant spread once. About 1.3× the
requests per CPU second of `2331a8e`.

What is left, by size:

1. **The desk and executor (~half of a request).** The heaviest, per request: `decide` (about
   8 µs here without the strategy: frozen `Skip`/`Quote`/`Reservation` dataclasses set field by
   field, `datetime` arithmetic for every age check and the deadline, the open exposure walked
   per decision), the quote's lifecycle (`_apply_opened`, the book's `add`/`move`/`_account`,
   `RecentLost.add`), the deadline heaps (`QuoteBook.past_deadline`,
   `Inventory.release_expired` at each balance snapshot), the executor's layers around an
   answer (`request`, `_sign_and_queue`, `_queue_signed`, the flush).
2. **`QuoteRequest` (`solver/protocol`)**: a frozen dataclass of seven fields costs about 1 µs
   to build (each field through `object.__setattr__`), a third of the request parser.
3. **Time at the desk's door**: the desk takes a `datetime`; the replay builds one per request
   and per tick (about 0.5 µs each). A desk on µs integers would drop them.
4. **In `backtest/`**, what remains is per-answer model work (a keyed hash and an inverse
   normal for the taker's limit, four bucket appends for the competition, the win-rate bins)
   and CPython's cost of a call and an attribute: a few µs in all.
"""


def plot(r: dict[str, Any], path: Path) -> None:
    target = r["targets"]["requests_per_cpu_s_signing_off"]
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 7))
    top, bottom = fig.subplots(2, 1, gridspec_kw={"height_ratios": [3, 2]})
    runs = r["runs"]
    labels = [
        f"{x['strategy']} {'sign' if x['sign'] else 'no sign'} {x['n'] // 1000}k" for x in runs
    ]
    colors = ["tab:green" if x["reader"] == "prefetch" else "tab:blue" for x in runs]
    top.bar(range(len(runs)), [x["requests_per_cpu_s"] for x in runs], color=colors)
    top.axhline(
        target,
        color="tab:red",
        linestyle="--",
        label=f"target {target:,}/CPU s (spread, signing off, {r['targets']['stream']:,})",
    )
    top.set_xticks(range(len(runs)), labels, fontsize=8, rotation=35, ha="right")
    top.set_ylabel("requests / CPU s (all processes)")
    top.set_title("Replay speed, median run (blue: stream read in-process, green: prefetch)")
    top.legend(loc="upper right")
    top.grid(axis="y", alpha=0.3)
    memory = r["memory_max_rss_mb"]
    names = list(memory)
    sizes = [k for k in next(iter(memory.values())) if k != "ratio"]
    width = 0.38
    for i, size in enumerate(sizes):
        bottom.bar(
            [j + (i - 0.5) * width for j in range(len(names))],
            [memory[n][size] for n in names],
            width=width,
            label=f"{int(size):,} requests",
        )
    bottom.set_xticks(range(len(names)), names)
    bottom.set_ylabel("max RSS (MB)")
    bottom.set_title("Memory against stream length (signing off)")
    bottom.legend(loc="lower right")
    bottom.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
