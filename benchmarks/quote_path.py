"""Issues 4, 10 and 11: the bot's quote path, end to end over a real websocket, against the bot
at a baseline commit and a minimal solver, in the same run.

Processes on this machine:

- the systems under test (:mod:`benchmarks.quote_path_systems`), each a child with its own key
  and account: the **bot** (``solver run`` from this tree), the **baseline** (``solver run``
  from a ``git archive`` of ``--baseline REV``, default ``77868b2``, the commit before the desk
  work; ``none`` leaves it out) and the **minimal** solver (:mod:`benchmarks.minimal_solver`);
- the **sandbox** (:mod:`benchmarks.sandbox_proc`): ledger RPC and prices, which the bots poll,
  counting every view call per account (``is_nonce_used`` included);
- this process, the **driver** (:mod:`benchmarks.quote_path_driver`): one loopback relay per
  system.

Phases (fixed rates 500 and 2000 requests/s, and saturation) are run system after system,
phase by phase (bot, baseline, minimal; the order rotates every repeat), ``repeats`` times, so
the systems share the machine's noise; ratios are paired within a repeat and summarised over the
repeats (:mod:`benchmarks.quote_path_compare`). After each run the driver waits until the
answers' deadlines and the bots' grace have passed and every system is quiet: the system's CPU
from the phase's start to then is its cost per answer *with the after-work* (expiry), and the
next run starts on a quiet machine.

The in-process path (:mod:`benchmarks.quote_path_inprocess`) is timed first; when a target is
missed (``--profile auto``) the bot, and the minimal solver beside it at saturation, are
profiled with py-spy (:mod:`benchmarks.quote_path_profile`): each stage in µs of CPU per
answer, the bot's beside the minimal's (``stage_costs`` in the results).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from websockets.asyncio.server import serve

from benchmarks.common import (
    ROOT,
    Child,
    CpuMeter,
    Measured,
    Progress,
    calibrate,
    cpu_seconds,
    machine_info,
    pin,
    scratch_dir,
    stop_child,
    two_core_layout,
    write_json,
)
from benchmarks.quote_path_compare import (
    issue11_targets,
    not_slower,
    ratios,
    summaries,
    worst_stall,
)
from benchmarks.quote_path_driver import (
    ANSWER_GRACE_S,
    MIN_DEADLINE_MS,
    SAT_INFLIGHT,
    Phase,
    PhaseData,
    Relay,
    phase_figures,
    request_templates,
    run_phase,
)
from benchmarks.quote_path_inprocess import (
    READ_SIZE,
    cprofile_desk_executor,
    desk_executor_only,
    reads_in_stages,
)
from benchmarks.quote_path_inside import loop_lag_figures, response_figures, scrape_histograms
from benchmarks.quote_path_pg import fence_cost, pg_names, pg_server
from benchmarks.quote_path_pg import figures as pg_figures
from benchmarks.quote_path_pg import overrides as pg_overrides
from benchmarks.quote_path_profile import profile_key, profile_runs, pyspy_profile, stage_costs
from benchmarks.quote_path_report import markdown, plot
from benchmarks.quote_path_signers import figures as signer_figures
from benchmarks.quote_path_signers import remote_overrides, signer_names, start_signer
from benchmarks.quote_path_systems import (
    System,
    bot_config,
    export_tree,
    free_port,
    fresh_store,
    funding,
    read_bot_log,
    start_bot,
    start_minimal,
    wait_subscribed,
)
from benchmarks.sandbox_proc import start_sandbox, stop_sandbox
from sandbox.config import SandboxConfig, load_sandbox_config
from solver.protocol.keys import SecretKey
from tests.pg.cluster import running_cluster

NAME = "quote_path"
DEFAULT_BASELINE = "77868b2"  # the commit before the desk work (issue 10)
AFTER_WORK_S = MIN_DEADLINE_MS / 1000 + 2.0 + 1.0  # deadline, the bots' grace, one check tick
QUIET_CORES = 0.05
QUIET_MAX_WAIT_S = 6.0


@dataclass(frozen=True)
class Options:
    quick: bool = False
    profile: str = "auto"  # auto | always | never
    pin: bool = False  # systems on the last core, driver and sandbox on the others
    deflate: bool = True  # accept permessage-deflate, as the sandbox relay (uvicorn) does
    baseline: str = DEFAULT_BASELINE  # a git revision, or "none"
    signers: bool = True  # issue 28: the bot through `solver signer serve` (file, token)
    pg: bool = True  # issue 27: the bot with its journal on PostgreSQL (bot_pg)
    command: str = ""
    quiet: dict[str, Any] | None = None


def phases(quick: bool) -> list[Phase]:
    s = 1.0 if quick else 6.0
    return [
        Phase("rate_500", "rate", s, rate=500),
        Phase("rate_2000", "rate", s, rate=2000),
        Phase("saturation", "saturation", s, inflight=SAT_INFLIGHT),
    ]


def repeats(quick: bool) -> int:
    return 1 if quick else 3


def sandbox_config(scratch: Path) -> SandboxConfig:
    cfg = load_sandbox_config(ROOT / "config/sandbox.yaml")
    return cfg.model_copy(
        update={
            "takers": cfg.takers.model_copy(update={"enabled": False}),
            "accounts": [],
            "state_dir": scratch / "sandbox-state",
            # Constant prices: the figures must not depend on a random walk.
            "tokens": {
                a: t.model_copy(update={"volatility_annual": 0.0}) for a, t in cfg.tokens.items()
            },
        }
    )


async def settle(systems: list[System], after_s: float, progress: Progress) -> None:
    """Let the last run's deadlines pass, then wait until every system is quiet."""
    await asyncio.sleep(after_s)
    pids = {s.name: s.child.pid for s in systems if s.child is not None}
    give_up = time.monotonic() + QUIET_MAX_WAIT_S
    while time.monotonic() < give_up:
        meter = CpuMeter(pids)
        meter.start()
        await asyncio.sleep(0.25)
        busy = {k: v for k, v in meter.stop().items() if k in pids and v > QUIET_CORES}
        if not busy:
            return
        progress.update(f"waiting for quiet systems: {busy}")


async def measured_run(
    system: System,
    systems: list[System],
    phase: Phase,
    pids: dict[str, Measured],
    progress: Progress,
    after_s: float,
) -> PhaseData:
    assert system.child is not None
    before = await scrape_histograms(system.metrics_url) if system.metrics_url else {}
    cpu_before = cpu_seconds(system.child.pid)
    data = await run_phase(system.relay, phase, progress, pids)
    await settle(systems, after_s, progress)
    data.cpu_s_with_after_work = cpu_seconds(system.child.pid) - cpu_before
    if system.metrics_url:
        after = await scrape_histograms(system.metrics_url)
        data.loop_lag = loop_lag_figures(before, after)
        data.inside = response_figures(before, after)
    return data


async def run(results_dir: Path, options: Options) -> dict[str, Any]:
    progress = Progress(NAME)
    scratch = scratch_dir(results_dir, NAME)
    started = time.monotonic()
    quick = options.quick
    layout = two_core_layout() if options.pin else None
    pinned = pin(0, layout[0]) if layout else False
    sandbox_cfg = sandbox_config(scratch)
    prices = {asset: spec.usd for asset, spec in sandbox_cfg.tokens.items()}
    templates = request_templates(prices)
    calibration = calibrate()
    progress.log(
        f"calibration: ed25519 sign {calibration['ed25519_sign_us']} µs, base58(64 B) "
        f"{calibration['b58encode_64B_us']} µs ({calibration['ratio_to_design']}x DESIGN's)"
    )
    progress.log("timing the in-process desk/executor path (no socket)")
    inprocess = await desk_executor_only(templates, 2000 if quick else 20000, scratch)
    inprocess["reads"] = await reads_in_stages(templates, 2000 if quick else 20000, scratch)
    progress.log(
        f"in-process, {READ_SIZE} requests a read: {inprocess['reads']['median_one_by_one']} µs "
        f"a request one by one, {inprocess['reads']['median_in_stages']} in stages"
    )
    progress.log(
        f"in-process: p50 {inprocess['per_quote_us']['p50']:.0f} µs, "
        f"{inprocess['throughput_per_s_one_core']} quotes/s incl. the OK reply"
    )
    names = ["bot", "minimal"] if options.baseline == "none" else ["bot", "baseline", "minimal"]
    signer_systems, signer_notes = signer_names() if options.signers else ([], [])
    names += signer_systems
    pg_systems, pg_notes = pg_names() if options.pg else ([], [])
    names += pg_systems
    trees: dict[str, Path] = {n: ROOT for n in names}
    fence: dict[str, Any] | None = None
    signer_children: dict[str, Child] = {}
    baseline_sha = None
    if "baseline" in names:
        trees["baseline"], baseline_sha = export_tree(options.baseline, scratch)
        progress.log(f"baseline {options.baseline} ({baseline_sha[:10]}) in {trees['baseline']}")
    keys = {n: SecretKey.generate() for n in names}
    fund = {k.public_key.implicit_account_id(): funding(prices) for k in keys.values()}
    sandbox = await start_sandbox(scratch, sandbox_cfg, fund)
    contract = sandbox.info["verifier_contract"]
    systems = [System(n, Relay(templates, contract), keys[n]) for n in names]
    runs: list[dict[str, Any]] = []
    kept: list[tuple[str, PhaseData]] = []  # for the plots
    profiles: dict[str, dict[str, Any]] = {}
    profiled: dict[str, dict[str, Any]] = {}
    errors: list[str] = []
    try:
        async with contextlib.AsyncExitStack() as stack:
            if pg_systems:  # a server of its own, stopped after its bot (the stack's order)
                cluster = stack.enter_context(running_cluster())
                progress.log("PostgreSQL started for bot_pg: timing the fence per group commit")
                fence = fence_cost(cluster, quick)
            for system in systems:
                server = await stack.enter_async_context(
                    serve(
                        system.relay.handler,
                        "127.0.0.1",
                        0,
                        max_size=1 << 20,
                        compression="deflate" if options.deflate else None,
                    )
                )
                url = f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}/ws"
                if system.name == "minimal":
                    await start_minimal(system, sandbox.info, prices, url, scratch)
                else:
                    store = fresh_store(scratch / f"{system.name}.sqlite")
                    config = bot_config(sandbox.info, url, system.account, store, 0)
                    if system.name in signer_systems:  # the signer outlives its bot
                        child, socket = await start_signer(
                            system.name, system.key, sandbox.info, scratch
                        )
                        signer_children[system.name] = child
                        stack.push_async_callback(stop_child, child)
                        config = config.with_overrides(remote_overrides(socket))
                    if system.name in pg_systems:
                        local = scratch / f"{system.name}-local"
                        config = config.with_overrides(pg_overrides(cluster, local))
                    if system.name == "bot":  # its control API and /metrics, as deployed
                        listen = f"127.0.0.1:{free_port()}"
                        config = config.with_overrides({"metrics.listen": listen})
                        system.metrics_url = f"http://{listen}/metrics"
                    await start_bot(system, config, trees[system.name], scratch)
                stack.push_async_callback(_stop, system, progress)
            for system in systems:
                await wait_subscribed(system)
                assert system.child is not None
                if layout:
                    pin(system.child.pid, layout[1])
                progress.log(
                    f"{system.name} pid {system.child.pid} subscribed; solver from "
                    f"{system.imports_from}"
                )
            pids: dict[str, Measured] = {s.name: s.child.pid for s in systems if s.child}
            pids |= {f"{n}_postgres": pg_server(cluster) for n in pg_systems}
            pids |= {"sandbox": sandbox.child.pid, "driver": None}
            pids |= {f"{n}_signer": c.pid for n, c in signer_children.items()}
            after_s = 0.0 if quick else AFTER_WORK_S
            warm = Phase("warm-up", "rate", 0.5 if quick else 2.0, rate=500)
            for system in systems:
                await measured_run(system, systems, warm, pids, progress, after_s)
            for rep in range(repeats(quick)):
                order = systems[rep % len(systems) :] + systems[: rep % len(systems)]
                for phase in phases(quick):
                    for system in order:
                        data = await measured_run(system, systems, phase, pids, progress, after_s)
                        figures = phase_figures(data, system.name)
                        runs.append({"repeat": rep, "phase": phase.name, **figures})
                        kept.append((system.name, data))
                        progress.log(_line(rep, system.name, phase.name, figures))
            summary = summaries(runs, names)
            missed = not all(
                t["met"] for k, t in issue11_targets(summary, worst_stall(runs, "bot"), 0).items()
            )
            # A quick run is a smoke run: it profiles only when asked to (always).
            if options.profile == "always" or (options.profile == "auto" and missed and not quick):
                by_name = {s.name: s for s in systems}
                for name, phase in profile_runs(quick):
                    spied = by_name[name].child
                    assert spied is not None
                    progress.log(f"profiling the {name} with py-spy: {phase.name}")
                    prof, figures_ = await pyspy_profile(
                        name, by_name[name].relay, spied, scratch, progress, phase, pids
                    )
                    if figures_ is not None:
                        profiled[profile_key(name, phase)] = figures_
                    if prof is None:
                        break
                    profiles[profile_key(name, phase)] = prof
                    await settle(systems, after_s, progress)
                if not profiles:
                    progress.log("py-spy unavailable: cProfile of the in-process path instead")
                    profiles["in-process path"] = await cprofile_desk_executor(
                        templates, 5000, scratch
                    )
    except Exception as exc:
        errors.append(f"{type(exc).__name__}: {exc}")
        progress.log(f"error: {exc}")
    finally:
        for system in systems:  # stopped already unless the start failed half way
            if system.child is not None and system.shutdown is None:
                await _stop(system, progress)
        sandbox_stop, sandbox_stats = await stop_sandbox(sandbox)
        if pinned:
            pin(0, set(range(os.cpu_count() or 1)))
    for system in systems:
        if system.shutdown is not None and not system.shutdown["clean"]:
            errors.append(f"{system.name} did not exit cleanly on SIGTERM: {system.shutdown}")
    views = sandbox_stats.get("view_calls") or {}
    described = {s.name: _describe(s, views, trees[s.name], baseline_sha) for s in systems}
    summary = summaries(runs, names)
    bot_nonce = described["bot"].get("nonce_checks_per_lost_quote")
    result: dict[str, Any] = {
        "benchmark": NAME,
        "command": options.command,
        "quick": quick,
        "machine": {**machine_info(), "calibration": calibration, "quiet_check": options.quiet},
        "setup": {
            "systems": names,
            "baseline_rev": None if baseline_sha is None else options.baseline,
            "repeats": repeats(quick),
            "phases": [p.name for p in phases(quick)],
            "phase_seconds": phases(quick)[0].seconds,
            "order": "phase by phase, one system after the other, the order rotating per repeat",
            "after_work_wait_s": 0.0 if quick else AFTER_WORK_S,
            "cpu_pinning": {"driver_and_sandbox": sorted(layout[0]), "systems": sorted(layout[1])}
            if layout and pinned
            else None,
            "min_deadline_ms": MIN_DEADLINE_MS,
            "signer_notes": signer_notes,
            "pg_notes": pg_notes,
            "answer_grace_s": ANSWER_GRACE_S,
            "saturation_inflight": SAT_INFLIGHT,
            "latency": "driver clock: before writing the event -> reading the quote_response",
        },
        "summary": summary,
        "ratios": {
            "bot/minimal": ratios(runs, "bot", "minimal"),
            **({"bot/baseline": ratios(runs, "bot", "baseline")} if baseline_sha else {}),
        },
        "issue10_not_slower": not_slower(ratios(runs, "bot", "baseline")) if baseline_sha else None,
        "issue11_targets": issue11_targets(summary, worst_stall(runs, "bot"), bot_nonce),
        "issue28_signers": signer_figures(runs, ["bot", *signer_systems])
        if signer_systems
        else None,
        "issue27_pg": {"figures": pg_figures(runs, ["bot", *pg_systems]), "fence": fence}
        if pg_systems
        else None,
        "runs": runs,
        "systems": described,
        "desk_executor_only": inprocess,
        "sandbox": {"shutdown": sandbox_stop, "log_records": sandbox_stats.get("log_records")},
        "profiles": profiles,
        "profiled_phases": profiled,
        # Issue 29: each stage in µs of CPU per answer, the bot's beside the minimal's.
        "stage_costs": stage_costs(profiles),
        "errors": errors,
        "runtime_s": round(time.monotonic() - started, 1),
    }
    write_json(results_dir / f"{NAME}.json", result)
    (results_dir / f"{NAME}.md").write_text(markdown(result))
    plot(result, kept, results_dir / f"{NAME}.png", results_dir / f"{NAME}_profile.png")
    progress.log(f"wrote {NAME}.json/.md/.png in {result['runtime_s']} s")
    return result


async def _stop(system: System, progress: Progress) -> None:
    """SIGTERM while its relay is still up, as in production."""
    if system.child is None or system.shutdown is not None:
        return
    system.shutdown = await stop_child(system.child)
    progress.log(f"{system.name} stopped: {system.shutdown}")


def _line(rep: int, system: str, phase: str, f: dict[str, Any]) -> str:
    lat = f["latency_ms"]
    return (
        f"#{rep} {phase:<10} {system:<8} {f['answers_per_s']:>8.1f}/s  p50 "
        f"{lat.get('p50', float('nan')):.2f} p99 {lat.get('p99', float('nan')):.2f} ms  "
        f"missing {f['missing']}  CPU {f['cpu_us_per_answer']} µs/answer "
        f"({f['cpu_us_per_answer_with_after_work']} with after-work)  other procs "
        f"{f['cpu_utilisation'].get('other_processes', 0):.2f} cores"
    )


def _describe(
    system: System, views: dict[str, int], tree: Path, baseline_sha: str | None
) -> dict[str, Any]:
    relay = system.relay
    out: dict[str, Any] = {
        "imports_solver_from": system.imports_from,
        "tree": str(tree),
        "commit": baseline_sha if system.name == "baseline" else None,
        "shutdown": system.shutdown,
        "answers_verified": {"checked": relay.verified, "invalid": dict(relay.invalid)},
        "driver_sent_total": relay.sent_total,
        "unknown_answers": relay.unknown_answers,
        "other_frames": dict(relay.other_frames),
        "send_errors": relay.send_errors,
        "websocket_extensions": relay.extensions,
        "view_calls": {
            k.split(" ")[0]: v for k, v in views.items() if k.endswith(" " + system.account)
        },
    }
    if system.name == "minimal" or system.child is None:
        return out
    log = read_bot_log(system.child.log_path)
    final = log.get("final_summary") or {}
    lost = final.get("outcomes", {}).get("LOST", 0)
    checks = out["view_calls"].get("is_nonce_used", 0)
    out["log"] = log
    out["lost_quotes"] = lost
    out["nonce_checks_per_lost_quote"] = round(checks / lost, 4) if lost else None
    return out
