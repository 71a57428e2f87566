"""Issue 11's soak: is the bot's memory flat over a long run at 1,000 requests/s?

The bot (``solver run`` from this tree, the same generated config as ``quote_path``: journal
on, INFO logging) answers its loopback relay (this process, :class:`Relay` of
:mod:`benchmarks.quote_path_driver`) at a fixed 1,000 requests/s for ``--soak-seconds`` (600;
``--quick``: 30), with ``quote_path``'s request templates: every request is quotable and every
quote has ``quote_path``'s 1 s deadline, so quotes expire and are retired ``LOST`` at the rate
they are made. The sandbox (:mod:`benchmarks.sandbox_proc`) serves the ledger RPC and prices.

The run is cut into back-to-back windows of 10 s (``--quick``: 5 s) with no pause between them
(each window's answers are collected while the next one is sent). At every window's end the
driver samples the bot's RSS (``VmRSS`` of ``/proc/<pid>/status``, with ``RssAnon``,
``RssFile`` and ``VmHWM``), its open quotes (from its latest summary line, logged every
window), the journal's size on disk, and per window: answers/s, latency p50/p99, CPU of the
bot, the sandbox, this driver and every other process on the machine.

The first 30 s are warm-up, in every run: the RSS at *start* is the sample at its end (a
``--quick`` run, 30 s, tries the machinery and gets no verdict).
The bot's bounded structures fill within it: at 1,000 lost quotes a second, the recently lost
quotes a balance gap may come from (``RecentLost``, capped at 20,000: ~19 MB) are full after
~21 s, and the executor's last 20,000 response times after 20 s; the open book holds its
~3,000 quotes (~3 MB) within seconds. After warm-up, Python's objects stay within ~0.3 MB
(tracemalloc, in-process, 10 simulated minutes; issue 29).

The verdict is *flat* when the RSS after warm-up grew by less than 5 % of the start RSS or
10 MB, whichever is larger, counted both ways: the end's RSS minus the start's, and the growth
of a least-squares line through every sample from the start on (the slope is reported). A
line alone turned a step into a slope: a rise at t counts 6·p·(1−p) of its height, p being
t's place in the span (1.02 at the forced desk snapshot of a 10-minute run, 0.29 near the end).
Steps are listed (rises of at least 1 MB between two samples), beside the bot's desk snapshots
(its ``desk snapshot:`` log lines), its largest transient: the document and text of the open
book and the recently lost quotes (23,000 quotes here: ~8 MB of text since the lost ones are
rows, 11 MB before), built while the loop waits (84 ms in the soak; 220 ms when they were
dicts). At this rate a snapshot is
forced every 500,000 journal facts, ~476 s: a 10-minute run sees one, ``--soak-seconds 1200``
two — which is what shows whether each snapshot leaves memory behind.
Until issue 29 each did (SQLite kept the body bound to its cached statement; glibc kept the
freed heap): +24, +13, +2, +1, +10, +5 MB over six forced snapshots in-process.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from websockets.asyncio.server import serve

from benchmarks.common import (
    ROOT,
    CpuMeter,
    Progress,
    calibrate,
    machine_info,
    scratch_dir,
    stop_child,
    write_json,
)
from benchmarks.quote_path import sandbox_config
from benchmarks.quote_path_driver import (
    MIN_DEADLINE_MS,
    Phase,
    PhaseData,
    Relay,
    phase_figures,
    request_templates,
)
from benchmarks.quote_path_systems import (
    System,
    bot_config,
    fresh_store,
    funding,
    parse_summary,
    read_bot_log,
    start_bot,
    wait_subscribed,
)
from benchmarks.sandbox_proc import start_sandbox, stop_sandbox
from benchmarks.soak_report import markdown, plot
from solver.protocol.keys import SecretKey

NAME = "soak"
RATE_PER_S = 1000
DEFAULT_SECONDS = 600.0
QUICK_SECONDS = 30.0
FLAT_SHARE = 0.05  # of the start RSS ...
FLAT_MB = 10.0  # ... or this, whichever is larger
WARMUP_S = 30.0  # the bounded structures are full by ~21 s at this rate (module docstring)
STEP_MB = 1.0  # a rise between two samples listed as a step
SNAPSHOT_LINE = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO solver\.bot: desk snapshot: "
    r"(\d+) facts since the last, (\d+) open quotes, made in \d+ slices over \d+ ms, "
    r"the loop held (\d+) ms at most"
)
LOG_TAIL_BYTES = 64 * 1024


@dataclass(frozen=True)
class Options:
    seconds: float | None = None  # None: DEFAULT_SECONDS, QUICK_SECONDS with quick
    quick: bool = False
    command: str = ""
    quiet: dict[str, Any] | None = None

    @property
    def duration_s(self) -> float:
        if self.seconds is not None:
            return self.seconds
        return QUICK_SECONDS if self.quick else DEFAULT_SECONDS

    @property
    def window_s(self) -> float:
        return 5.0 if self.quick or self.duration_s < 120 else 10.0

    @property
    def warmup_s(self) -> float:
        """30 s in every run. It was at most a third of the run, so that a short one still had
        a fit: a ``--quick`` run judged from 10 s on, while the recently lost quotes were
        still filling up (+15 MB to 21 s), and said *growing*. A run too short for two samples
        after the warm-up gets no verdict."""
        return WARMUP_S


# ---------------------------------------------------------------------------- sampling


def proc_memory(pid: int) -> dict[str, float]:
    """VmRSS, RssAnon, RssFile and VmHWM of ``pid`` in MB (``/proc/<pid>/status``)."""
    out: dict[str, float] = {}
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return out
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile", "VmHWM"):
            out[key] = round(int(value.split()[0]) / 1024, 2)  # kB -> MB
    return out


def store_size_mb(path: Path) -> dict[str, float]:
    """The journal's files on disk (SQLite database, WAL), in MB."""
    sizes = {}
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(OSError):
            sizes["db" + suffix.replace("-", "_")] = Path(f"{path}{suffix}").stat().st_size / 1e6
    sizes["total"] = sizes.get("db", 0.0) + sizes.get("db_wal", 0.0)
    return {k: round(v, 2) for k, v in sizes.items()}


def latest_summary(log_path: Path) -> dict[str, Any] | None:
    """The bot's latest periodic summary line (from the log's tail), parsed."""
    try:
        with log_path.open("rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - LOG_TAIL_BYTES))
            tail = f.read().decode(errors="replace")
    except OSError:
        return None
    for line in reversed(tail.splitlines()):
        if " summary " in line or "stopped:" in line:
            parsed = parse_summary(line)
            if parsed is not None:
                return parsed
    return None


@dataclass
class Window:
    """One window of the run: its data until its answers are in, then its figures."""

    index: int
    data: PhaseData
    sample: dict[str, Any]
    drain: asyncio.Task[None] | None = None
    figures: dict[str, Any] = field(default_factory=dict)

    def finish(self) -> None:
        """Figures from the answers, then the raw latencies are dropped (memory of a long run)."""
        f = phase_figures(self.data, "bot")
        for key in ("cpu_us_per_answer_with_after_work", "kind", "system"):
            f.pop(key, None)
        self.figures = f
        self.data = PhaseData(self.data.phase)


def fit(samples: list[dict[str, Any]], warmup_s: float) -> dict[str, Any]:
    """The RSS after warm-up: its growth end minus start, a least-squares line, the steps;
    the verdict (module docstring)."""
    kept = [s for s in samples if s["t_s"] >= warmup_s - 1e-6 and "VmRSS" in s["memory_mb"]]
    if len(kept) < 2:
        return {
            "samples": len(kept),
            "verdict": f"not judged: fewer than 2 samples after the {warmup_s:g} s warm-up",
        }
    t = np.array([s["t_s"] for s in kept]) / 60.0
    rss = np.array([s["memory_mb"]["VmRSS"] for s in kept])
    slope, intercept = np.polyfit(t, rss, 1)
    span_min = float(t[-1] - t[0])
    growth = float(slope) * span_min
    start, end = float(rss[0]), float(rss[-1])
    threshold = max(FLAT_SHARE * start, FLAT_MB)
    residual = rss - (slope * t + intercept)
    steps = [
        {"t_s": b["t_s"], "mb": round(float(rb - ra), 2)}
        for a, b, ra, rb in zip(kept, kept[1:], rss, rss[1:], strict=False)
        if rb - ra >= STEP_MB
    ]
    return {
        "samples": len(kept),
        "from_s": kept[0]["t_s"],
        "to_s": kept[-1]["t_s"],
        "rss_start_mb": round(start, 2),
        "rss_end_mb": round(end, 2),
        "rss_min_mb": round(float(rss.min()), 2),
        "rss_max_mb": round(float(rss.max()), 2),
        "slope_mb_per_min": round(float(slope), 4),
        "intercept_mb": round(float(intercept), 2),
        "residual_sd_mb": round(float(residual.std()), 3),
        "fit_growth_mb": round(growth, 2),
        "rss_growth_mb": round(end - start, 2),
        "steps": steps,
        "flat_threshold_mb": round(threshold, 2),
        "verdict": "flat" if max(growth, end - start) < threshold else "growing",
    }


def desk_snapshots(log_path: Path, wall_t0: float) -> list[dict[str, Any]]:
    """The bot's desk snapshots from its log (``desk snapshot:`` lines, local time as the
    bot's text log writes it), at t seconds since the load started."""
    try:
        text = log_path.read_text(errors="replace")
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        m = SNAPSHOT_LINE.match(line)
        if m is None:
            continue
        stamp = m[1]
        at = time.mktime(time.strptime(stamp[:19], "%Y-%m-%d %H:%M:%S")) + int(stamp[20:]) / 1e3
        out.append(
            {
                "t_s": round(at - wall_t0, 1),
                "facts": int(m[2]),
                "open_quotes": int(m[3]),
                "loop_held_ms": int(m[4]),
            }
        )
    return out


def component_slopes(samples: list[dict[str, Any]], warmup_s: float) -> dict[str, Any]:
    """Least-squares slopes (MB/min) after warm-up of the RSS's parts: anonymous memory (the
    heap: Python objects, SQLite's page cache) and file-backed pages (code, and the journal's
    mapped ``-shm`` WAL index), with the ``-shm`` file's own size for comparison."""
    kept = [s for s in samples if s["t_s"] >= warmup_s - 1e-6]
    out: dict[str, Any] = {}
    series = {
        "RssAnon": [s["memory_mb"].get("RssAnon") for s in kept],
        "RssFile": [s["memory_mb"].get("RssFile") for s in kept],
        "journal_shm_file": [s["journal_mb"].get("db_shm") for s in kept],
    }
    for name, values in series.items():
        pairs = [(s["t_s"] / 60, v) for s, v in zip(kept, values, strict=True) if v is not None]
        if len(pairs) < 2:
            continue
        t, v = np.array(pairs).T
        slope = float(np.polyfit(t, v, 1)[0])
        out[name] = {
            "start_mb": round(float(v[0]), 2),
            "end_mb": round(float(v[-1]), 2),
            "slope_mb_per_min": round(slope, 4),
            "fit_growth_mb": round(slope * float(t[-1] - t[0]), 2),
        }
    return out


# ---------------------------------------------------------------------------- the run


async def run(results_dir: Path, options: Options) -> dict[str, Any]:
    progress = Progress(NAME)
    scratch = scratch_dir(results_dir, NAME)
    started = time.monotonic()
    duration, window_s, warmup_s = options.duration_s, options.window_s, options.warmup_s
    n_windows = max(1, math.ceil(duration / window_s))
    sandbox_cfg = sandbox_config(scratch)
    prices = {asset: spec.usd for asset, spec in sandbox_cfg.tokens.items()}
    templates = request_templates(prices)
    calibration = calibrate()
    key = SecretKey.generate()
    sandbox = await start_sandbox(
        scratch, sandbox_cfg, {key.public_key.implicit_account_id(): funding(prices)}
    )
    relay = Relay(templates, sandbox.info["verifier_contract"])
    bot = System("bot", relay, key)
    store = fresh_store(scratch / "bot.sqlite")
    windows: list[Window] = []
    idle: dict[str, Any] = {}
    wall_t0 = time.time()
    errors: list[str] = []
    store_at_end: dict[str, float] = {}
    try:
        async with serve(
            relay.handler, "127.0.0.1", 0, max_size=1 << 20, compression="deflate"
        ) as s:
            url = f"ws://127.0.0.1:{s.sockets[0].getsockname()[1]}/ws"
            config = bot_config(sandbox.info, url, bot.account, store, window_s)
            await start_bot(bot, config, ROOT, scratch)
            try:
                await wait_subscribed(bot)
                assert bot.child is not None
                pid = bot.child.pid
                progress.log(f"bot pid {pid} subscribed; {n_windows} windows of {window_s} s")
                pids: dict[str, int | None] = {
                    "bot": pid,
                    "sandbox": sandbox.child.pid,
                    "driver": None,
                }
                idle = {"memory_mb": proc_memory(pid), "journal_mb": store_size_mb(store)}
                t0, wall_t0 = time.monotonic(), time.time()
                for index in range(n_windows):
                    if bot.child.process.returncode is not None:
                        raise RuntimeError(f"the bot exited ({bot.child.process.returncode})")
                    phase = Phase(f"w{index}", "rate", window_s, rate=RATE_PER_S)
                    data = PhaseData(phase)
                    meter = CpuMeter(pids)
                    meter.start()
                    data.started_ns = time.perf_counter_ns()
                    await relay.run_rate(data, progress)
                    data.ended_ns = time.perf_counter_ns()
                    data.cpu = meter.stop()
                    sample = {
                        "t_s": round(time.monotonic() - t0, 2),
                        "memory_mb": proc_memory(pid),
                        "journal_mb": store_size_mb(store),
                        "bot_summary": latest_summary(bot.child.log_path),
                    }
                    window = Window(index, data, sample)
                    # The answers come in while the next window is sent.
                    window.drain = asyncio.create_task(relay.drain(data))
                    windows.append(window)
                    for w in windows:
                        if w.drain is not None and w.drain.done():
                            w.drain = None
                            w.finish()
                    progress.log(_line(window, windows))
                await asyncio.gather(*(w.drain for w in windows if w.drain is not None))
                for w in windows:
                    if w.drain is not None or not w.figures:
                        w.drain = None
                        w.finish()
                store_at_end = store_size_mb(store)
            finally:
                bot.shutdown = await stop_child(bot.child) if bot.child else None
                progress.log(f"bot stopped: {bot.shutdown}")
    except Exception as exc:
        errors.append(f"{type(exc).__name__}: {exc}")
        progress.log(f"error: {exc}")
    finally:
        for w in windows:  # an error half way: the windows still waiting for answers
            if w.drain is not None:
                w.drain.cancel()
                w.drain = None
                w.finish()
        sandbox_stop, sandbox_stats = await stop_sandbox(sandbox)
    if bot.shutdown is not None and not bot.shutdown["clean"]:
        errors.append(f"bot did not exit cleanly on SIGTERM: {bot.shutdown}")
    samples = [{**w.sample, **w.figures} for w in windows]
    log = read_bot_log(bot.child.log_path) if bot.child else {}
    views = sandbox_stats.get("view_calls") or {}
    result: dict[str, Any] = {
        "benchmark": NAME,
        "command": options.command,
        "quick": options.quick,
        "machine": {**machine_info(), "calibration": calibration, "quiet_check": options.quiet},
        "setup": {
            "seconds": duration,
            "rate_per_s": RATE_PER_S,
            "window_s": window_s,
            "warmup_s": warmup_s,
            "min_deadline_ms": MIN_DEADLINE_MS,
            "flat_rule": f"RSS growth after warm-up (end minus start, and the least-squares "
            f"fit's) < max({FLAT_SHARE:.0%} of start RSS, {FLAT_MB:.0f} MB)",
            "latency": "driver clock: before writing the event -> reading the quote_response",
        },
        "memory": {
            "idle_before_load_mb": idle.get("memory_mb"),
            **fit(samples, warmup_s),
            "vm_hwm_mb": (samples[-1]["memory_mb"].get("VmHWM") if samples else None),
            "components": component_slopes(samples, warmup_s),
        },
        "journal": {
            "path": str(store),
            "idle_before_load_mb": idle.get("journal_mb"),
            "at_end_of_load_mb": store_at_end,
            "after_shutdown_mb": store_size_mb(store),
        },
        "totals": _totals(samples),
        "samples": samples,
        "bot": {
            "pid": bot.child.pid if bot.child else None,
            "shutdown": bot.shutdown,
            "log": log,
            "lost_quotes": ((log.get("final_summary") or {}).get("outcomes") or {}).get("LOST"),
            "desk_snapshots": desk_snapshots(bot.child.log_path, wall_t0) if bot.child else [],
            "last_periodic_summary": next(
                (s["bot_summary"] for s in reversed(samples) if s.get("bot_summary")), None
            ),
            "answers_verified": {"checked": relay.verified, "invalid": dict(relay.invalid)},
            "driver_sent_total": relay.sent_total,
            "unknown_answers": relay.unknown_answers,
            "send_errors": relay.send_errors,
            "websocket_extensions": relay.extensions,
            "view_calls": {
                k.split(" ")[0]: v for k, v in views.items() if k.endswith(" " + bot.account)
            },
        },
        "sandbox": {"shutdown": sandbox_stop, "log_records": sandbox_stats.get("log_records")},
        "errors": errors,
        "runtime_s": round(time.monotonic() - started, 1),
    }
    write_json(results_dir / f"{NAME}.json", result)
    (results_dir / f"{NAME}.md").write_text(markdown(result))
    plot(result, results_dir / f"{NAME}.png")
    progress.log(f"wrote {NAME}.json/.md/.png in {result['runtime_s']} s")
    return result


def _line(window: Window, windows: list[Window]) -> str:
    s = window.sample
    mem = s["memory_mb"]
    summary = s.get("bot_summary") or {}
    done = next((w for w in reversed(windows) if w.figures), None)
    lat = done.figures["latency_ms"] if done else {}
    cpu = window.data.cpu
    return (
        f"t={s['t_s']:6.1f} s  RSS {mem.get('VmRSS', float('nan')):7.1f} MB  open "
        f"{summary.get('open_quotes', '-')}  journal {s['journal_mb']['total']:.1f} MB  "
        f"(w{done.index if done else '-'}: {done.figures['answers_per_s'] if done else '-'}/s "
        f"p50 {lat.get('p50', float('nan')):.2f} p99 {lat.get('p99', float('nan')):.2f} ms)  "
        f"bot {cpu.get('bot', 0):.2f} other procs {cpu.get('other_processes', 0):.2f} cores"
    )


def _totals(samples: list[dict[str, Any]]) -> dict[str, Any]:
    def values(get: Any) -> list[float]:
        out = []
        for s in samples:
            with contextlib.suppress(KeyError, TypeError):
                v = get(s)
                if v is not None and not (isinstance(v, float) and math.isnan(v)):
                    out.append(float(v))
        return out

    def spread(xs: list[float]) -> dict[str, float] | None:
        if not xs:
            return None
        return {
            "min": round(min(xs), 3),
            "median": round(float(np.median(xs)), 3),
            "max": round(max(xs), 3),
        }

    return {
        "sent": sum(s.get("sent", 0) for s in samples),
        "answered": sum(s.get("answered", 0) for s in samples),
        "missing": sum(s.get("missing", 0) for s in samples),
        "answers_per_s": spread(values(lambda s: s["answers_per_s"])),
        "p50_ms": spread(values(lambda s: s["latency_ms"]["p50"])),
        "p99_ms": spread(values(lambda s: s["latency_ms"]["p99"])),
        "max_ms": spread(values(lambda s: s["latency_ms"]["max"])),
        "bot_cores": spread(values(lambda s: s["cpu_utilisation"]["bot"])),
        "other_processes_cores": spread(values(lambda s: s["cpu_utilisation"]["other_processes"])),
        "open_quotes": spread(values(lambda s: s["bot_summary"]["open_quotes"])),
    }


# ---------------------------------------------------------------------------- report
