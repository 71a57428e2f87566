"""The report of :mod:`benchmarks.replay`: its markdown (``replay.md``, with the analysis of
why the target is missed) and plot (``replay.png``), from the result it wrote to
``replay.json``. A move out of the benchmark's module, which keeps the streams and the runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.common import dirty_note, fmt, md_table


def markdown(r: dict[str, Any], *, seed: int, rate: float) -> str:
    """``seed`` and ``rate``: the synthetic streams' (not in the result's JSON)."""
    target_rps = r["targets"]["requests_per_s_signing_off"]
    m = r["machine"]
    big = max(int(n) for n in r["setup"]["streams"])
    small = min(int(n) for n in r["setup"]["streams"])
    st = r["setup"]["streams"]
    rows = [
        [
            x["strategy"], "on" if x["sign"] else "off", f"{x['n']:,}", x["reader"],
            x["requests_per_s"], x["requests_per_cpu_s"], x["cpu_s"], x["reader_process_cpu_s"],
            f"{x['quoted'] / max(1, x['requests']):.0%}", f"{x['won'] / max(1, x['quoted']):.0%}",
            x["max_rss_mb"], x["machine_busy_cores"],
        ]
        for x in r["runs"]
    ]  # fmt: skip
    t = r["targets"]
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
        f"**Target ≥ {target_rps:,} requests/s with signing off**: "
        + (
            f"met by {', '.join(t['met_by'])} (best {t['best_signing_off']:,}/s)."
            if t["met_by"]
            else f"not met (best {t['best_signing_off']:,}/s on the {big:,}-request stream)."
        )
        + f" **Memory flat in stream length**: {'yes' if t['memory_flat'] else 'NO'}.",
        "",
        md_table(
            [
                "strategy",
                "signing",
                "requests",
                "reader",
                "requests/s (wall)",
                "requests/CPU s",
                "replay CPU s",
                "reader process CPU s",
                "quoted",
                "won/quoted",
                "max RSS MB",
                "machine busy cores",
            ],
            rows,
        ),
        "",
        "`requests/s` counts requests over the wall time of the replay, reading included; "
        "`machine busy cores` is the whole machine's load over the run (this benchmark "
        "included): above the cores a run can use (1, or 2 with prefetch) others were busy "
        "too and the figure understates the replay.",
        "",
        "## Memory",
        "",
        "Max RSS (`resource.getrusage`, the replay process; the prefetch reader process is "
        "separate and listed in the JSON) with signing off:",
        "",
        md_table(
            ["run", f"{small:,} requests", f"{big:,} requests", "ratio"],
            [
                [k, v[str(small)], v[str(big)], v["ratio"]]
                for k, v in r["memory_max_rss_mb"].items()
            ],
        ),
        "",
        "The stream is read line by line (or in batches of 4,096 through a pipe) and never held; "
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


CORE_NOTES = """## Why the target is missed, and what would close the gap

Since issue 10 the replay drives the live desk (`solver/core/desk.py`), not a bare
`QuotePipeline`: each quote also gets its `QuoteOpened` fact and tracked quote, ends LOST or
SETTLED through a `QuoteMoved` fact at a tick, and each settlement is followed by a balance
snapshot. On a 100k stream (signing off, `spread`) that took the replay from about 55 to about
100 µs of CPU a request; `Inventory.release_expired` walking every reservation at each snapshot
is about 15 % of the run (a deadline heap in `Inventory` removes it). The notes below predate
that change (they describe the bare-pipeline engine).

100,000 requests/s is 10 µs a request, everything included. The decision code the replay
shares with the live bot costs about that alone: `QuotePipeline.decide` ≈ 5.5 µs plus the
strategy ≈ 4-5 µs (below), before the desk's lifecycle, reading and measuring. On this 2-core
machine, in CPython, the target cannot be met by a replay that runs the live decision code per
request (the product's rule); it would take a separate, vectorised model of the strategies, or
a different target. Measured here (the table, the profile, and the profiler-free figures
above), per request on the 1,000,000-request stream with signing off (the figures of the
bare-pipeline engine; the desk adds its lifecycle on top):

- **reading** ≈ 11 µs of CPU in-process (gzip, JSON, ISO timestamps, the checks of
  `backtest/stream/read.py`, two frozen dataclasses per request). Prefetch moves it to the second
  core — the reader process's CPU column — leaving the replay process 1-2 µs to rebuild a
  `QuoteRequest` and a `datetime` per request;
- **`QuotePipeline.decide`** (solver/core) ≈ 5.5 µs, plus the **strategy** ≈ 4-5 µs;
- **the engine around them** ≈ 20 µs: the resolution FIFO and the expiry heap, the competitor
  book, the fill model, the tracker's per-quote histograms, and each win's settlement on the
  ledger (under cProfile a win costs about ten times a lost quote: the verifier's
  debit/credit under its undo journal, balance reads, the tracker's equity, inventory and
  exposure updates, a `FillRecord`, three markout entries): 15 % of quotes win with
  `spread`, 29 % with `amm`, which is why `amm` is slower.

So the replay process needs about 30-40 µs a request with prefetch (the "requests/CPU s"
column) and the best wall-clock rate is about half the target. Memory is flat.

Done here, with identical results (the tests of `tests/strategies` and `tests/backtest` pass
unchanged; an equivalence check of 700,000 random quotes against the previous Fraction code
found no difference): `spread` and `amm` price with one integer numerator and denominator
instead of a `Fraction` per operation (`spread` about 3× faster: 15 → 5 µs a quote);
resolutions (a constant delay after their request) go through a FIFO merged with the heap
instead of the heap; the stream can be parsed in a second process (`backtest.stream.prefetch`,
`solver backtest run --prefetch`).

What would close the gap, in order of gain:

1. **The engine (backtest/, ~20 → ~8 µs)**: settle wins on a lighter path (direct balance
   updates with the same fee and overflow checks, instead of the ledger's journaled
   `_credit`/`_debit` and two balance reads before and after); compute markouts from the price
   series when they come due instead of three heap entries per fill; update the per-quote
   histograms in arrays indexed by bin; count events in plain ints instead of `Counter`s;
   carry µs integers instead of `datetime`s through the engine.
2. **solver/core (owned by the lead, not changed here), ~5.5 → ~3 µs per `decide`**:
   - `Skip`, `Quote` and `Reservation` are frozen dataclasses: every field is set through
     `object.__setattr__` (about 0.2 µs a field; `Quote` + `Reservation` ≈ 2 µs). Plain
     slotted classes would halve that.
   - Every age check builds `timedelta`s: `(now - state.salt_at).total_seconds()`,
     `inventory.balance_age_s(now)`, `price.age_s(now)` twice, `now.timestamp()` for the token
     bucket, `now + timedelta(...)` for the deadline. Passing `now` also as float seconds would
     replace six datetime operations with float compares.
   - `_open_exposure_usd()` walks every reserved asset and re-reads its price on every
     decision; a running total kept by `Inventory.reserve/release` would make it O(1).
   - `10 ** dec` (float power) twice per decision and once per reserved asset; a per-asset
     scale table in `MarketState` would avoid it.
   - `LiveMarketView` is built per decision; it could be reused with its `now` set per call.
3. **Reading (in-process, ~11 µs)**: only matters without prefetch (sweeps): frozen event
   dataclasses and per-line dict lookups; a reader that builds the engine's compact records
   directly would save about a third.
"""


def plot(r: dict[str, Any], path: Path) -> None:
    target_rps = r["targets"]["requests_per_s_signing_off"]
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 7))
    top, bottom = fig.subplots(2, 1, gridspec_kw={"height_ratios": [3, 2]})
    runs = r["runs"]
    labels = [
        f"{x['strategy']} {'sign' if x['sign'] else 'no sign'} {x['n'] // 1000}k" for x in runs
    ]
    colors = ["tab:green" if x["reader"] == "prefetch" else "tab:blue" for x in runs]
    top.bar(range(len(runs)), [x["requests_per_s"] for x in runs], color=colors)
    top.axhline(
        target_rps, color="tab:red", linestyle="--", label=f"target {target_rps:,}/s (signing off)"
    )
    top.set_xticks(range(len(runs)), labels, fontsize=8, rotation=35, ha="right")
    top.set_ylabel("requests / s (wall)")
    top.set_title("Replay speed (blue: stream read in-process, green: prefetch process)")
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
