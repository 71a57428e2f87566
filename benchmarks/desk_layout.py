"""What the desk's data layout costs a quote: today's shapes against slot arrays (issue 29).

docs/performance.md ("What is left, and why") names one structural lever left for the
replay's cost a request: the desk's data model in slot arrays. Rewriting the desk to measure
it would be weeks; this measures it on models instead (:mod:`benchmarks.desk_layout_models`):
``today`` (the real ``Quote``, ``Reservation``, ``QuoteBook``, ``Inventory`` and deadline
buckets, with the glue of the replay's path), ``slots_str`` (slot arrays, assets as names) and
``slots`` (slot arrays, assets as small ints). All are driven over the replay's own sequence
of quotes and ticks, recorded at run time from the replay of the 10k stream that
:mod:`benchmarks.replay_instructions` uses (:func:`benchmarks.replay.stream_for`), and must end
in the same state with the same quotes lost in the same order.

Counts, not times (the machine is shared): opcodes a quote (``sys.settrace``, the driver's
own loop left out) and, with ``--callgrind``, instructions a quote (valgrind callgrind: a
run minus one that only sets the same model up, ``PYTHONHASHSEED=0``, one bytecode cache;
the median of ``--repeats`` rounds, each from a fresh temporary folder: the count moves by
up to ~4 % with the child's paths and environment, more than a model's own repeats).
The saving against ``today`` is a share of the replay's instructions a request
(``--replay-instructions``, from ``python -m benchmarks.replay_instructions``).

    python -m benchmarks.desk_layout [--callgrind [--repeats 3]] [--replay-instructions N]
        [--results DIR]
"""

from __future__ import annotations

import argparse
import gc
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest.mock import patch

from benchmarks.common import ROOT, Progress, md_table, scratch_dir, write_json
from benchmarks.desk_layout_models import slots, today
from benchmarks.desk_layout_models.drive import Desk, Event, drive
from benchmarks.quote_path_systems import tree_env
from benchmarks.replay_instructions import OpcodeCounter, collected

NAME = "desk_layout"
REQUESTS = 10_000
MODELS: dict[str, Callable[..., Desk]] = {
    "today": today.Desk,
    "slots_str": slots.StrAssetsDesk,
    "slots": slots.Desk,
}
INTERNED = {"slots"}
"""The models whose assets are small ints (the events carry the asset's index)."""
_BALANCE = 10**40  # every quote fits: the sequence's own refusals were the replay's
DRIVER = str(Path(drive.__code__.co_filename))

Step = tuple[Any, ...]
"""A recorded step: ``("t", now)``, a tick (the snapshot's ``release_expired``); or
``("q", now, deadline, quote_id, asset_in, asset_out, amount_in, amount_out, fee)``, a quote
the book filed."""

CHILD = """
import json, sys
from backtest.replay_start import collector_paced
from benchmarks.desk_layout import build
from benchmarks.desk_layout_models.drive import drive
model, run, path = sys.argv[1], sys.argv[2] == "run", sys.argv[3]
with open(path) as handle:
    steps = [tuple(step) for step in json.load(handle)]
desk, events = build(model, steps)
with collector_paced():
    if run:
        drive(desk, events)
"""
"""One child: read the recorded steps, build the model and its events, and drive it only when
asked (``run``): the two runs differ by the drive alone."""


@contextmanager
def recording(steps: list[Step]) -> Iterator[None]:
    """Append to ``steps`` what the replay's book files and each snapshot's release."""
    from solver.core.inventory import Inventory
    from solver.core.lifecycle import Quote, QuoteBook

    add, release = QuoteBook.add, Inventory.release_expired

    def filed(book: QuoteBook, q: Quote) -> None:
        steps.append(
            (
                "q",
                q.created_at,
                q.deadline,
                q.quote_id,
                q.asset_in,
                q.asset_out,
                q.amount_in,
                q.amount_out,
                q.fee,
            )
        )
        add(book, q)

    def released(inventory: Inventory, at: int) -> int:
        steps.append(("t", at))
        return release(inventory, at)

    with (
        patch.object(QuoteBook, "add", filed),
        patch.object(Inventory, "release_expired", released),
    ):
        yield


def record(stream: Path) -> list[Step]:
    """The replay's quotes and ticks, recorded while it replays ``stream`` (spread, signing
    off, as ``benchmarks.replay_instructions``)."""
    import benchmarks.replay as replay_bench
    from backtest.engine import Replay
    from backtest.settings import validate_settings
    from backtest.stream.read import read_stream

    settings = validate_settings({**replay_bench.SETTINGS, "sign": False})
    steps: list[Step] = []
    with recording(steps), read_stream(str(stream)) as reader:
        Replay(replay_bench._config("spread"), settings).run(reader, reader.header)
    return steps


def build(model: str, steps: Sequence[Step]) -> tuple[Desk, list[Event]]:
    """``model``'s desk (every asset of ``steps``, balances that refuse nothing) and the
    events it is driven with."""
    assets = sorted({s[4] for s in steps if s[0] == "q"} | {s[5] for s in steps if s[0] == "q"})
    desk = MODELS[model](
        assets,
        [_BALANCE] * len(assets),
        [1.0 + i for i in range(len(assets))],
        [10.0 ** (6 + 6 * i) for i in range(len(assets))],
    )
    index: dict[str, Any] = (
        {a: i for i, a in enumerate(assets)} if model in INTERNED else {a: a for a in assets}
    )
    events: list[Event] = [
        (
            "q",
            s[3],
            index[s[4]],
            index[s[5]],
            s[6],
            s[7],
            s[8],
            s[2] - s[1],
            s[1],
            b"salt",
            "h" + s[3],
            b"n" + s[3].encode(),
        )
        if s[0] == "q"
        else s
        for s in steps
    ]
    return desk, events


def opcodes_a_quote(model: str, steps: Sequence[Step]) -> tuple[float, Desk]:
    """The bytecodes ``model`` runs a quote over ``steps`` (the driver's loop left out), and
    the desk it ended with. The cyclic collector is off meanwhile: in a process that made
    garbage before (a test worker), a collection ran finalizers whose bytecode was counted
    (+8 opcodes a quote in one run of the suite)."""
    desk, events = build(model, steps)
    counter = OpcodeCounter()
    enabled = gc.isenabled()
    gc.disable()  # a collection would run other objects' finalizers, traced, in the count
    counter.start()
    try:
        drive(desk, events)
    finally:
        counter.stop()
        if enabled:
            gc.enable()
    quotes = sum(1 for e in events if e[0] == "q")
    spent = sum(n for (path, _), n in counter.counts.items() if path != DRIVER)
    return spent / quotes, desk


def _child_env(cache: Path, *, write: bool) -> dict[str, str]:
    """This tree first on the path, hashes fixed, the bytecode cache in ``cache`` (written
    only by the warm-up, so no counted run compiles)."""
    env = {**tree_env(ROOT), "PYTHONHASHSEED": "0", "PYTHONPYCACHEPREFIX": str(cache)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env if write else {**env, "PYTHONDONTWRITEBYTECODE": "1"}


def child(model: str, what: str, path: Path, cache: Path) -> int | None:
    """One :data:`CHILD` for ``model`` (``warm``: without valgrind, writing the bytecode
    cache; ``run`` or ``setup``: under callgrind, its total)."""
    counted = what != "warm"
    tool = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"] if counted else []
    argv = [*tool, sys.executable, "-c", CHILD, model, what, str(path)]
    env = _child_env(cache, write=not counted)
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, check=False)
    if done.returncode != 0:
        tail = done.stderr.decode(errors="replace").strip().splitlines()[-5:]
        raise RuntimeError(f"the {model} child failed: " + " | ".join(tail))
    return collected(done.stderr) if counted else None


def report(result: dict[str, Any]) -> str:
    """The results as markdown (``desk_layout.md``)."""
    per = result.get("replay_instructions_a_request")
    cg = result.get("callgrind")
    header = ["model", "opcodes a quote"]
    if cg:
        header += [
            f"instructions a quote (median of {result['callgrind_repeats']})",
            "min–max",
            "vs today",
            "share of the replay's a request",
        ]
    rows = []
    for model in MODELS:  # in their order, whatever the JSON's
        ops = result["opcodes_a_quote"][model]
        row: list[Any] = [f"`{model}`", f"{ops:,.1f}"]
        if cg:
            saving = cg[model]["saving"]
            share = f"{-saving / per:.2%}" if per and saving else "-"
            row += [cg[model]["a_quote"], f"{cg[model]['min']:,}–{cg[model]['max']:,}"]
            row += [saving or "-", share]
        rows.append(row)
    lines = [
        "# The desk's data layout, a quote (issue 29)",
        "",
        f"`{result['command']}` at `{result['commit']}` — {result['quotes']:,} quotes and "
        f"{result['ticks']} ticks recorded from the replay of `{result['stream']}` (spread, "
        "signing off); the models "
        "ended in the same state, the same quotes lost in the same order.",
        "",
        md_table(header, rows),
        "",
        "`today`: the real `Quote`, `Reservation`, `QuoteBook`, `Inventory` and deadline "
        "buckets, glued as the replay's path does; `slots_str`: slot arrays, assets as names; "
        "`slots`: slot arrays, assets interned to small ints (`benchmarks/desk_layout_models/`). "
        "The models do the desk's per-quote state work only (signing, relay, strategy and "
        "journal are the same in every layout): a saving here is what a desk rewritten to the "
        "layout could reach on that work, not a measured change of the replay.",
        "",
    ]
    if not cg:
        lines.append(f"No instruction counts: {result['callgrind_skipped']}.")
    elif per:
        lines.append(
            f"The replay's instructions a request: {per:,} (its net figure, "
            "`python -m benchmarks.replay_instructions`)."
        )
    else:
        lines.append(
            "Divide the saving by the replay's net instructions a request "
            "(`python -m benchmarks.replay_instructions`)."
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.desk_layout")
    parser.add_argument("--callgrind", action="store_true", help="instructions a quote too")
    parser.add_argument(
        "--replay-instructions",
        type=int,
        metavar="N",
        help="the replay's net instructions a request (replay_instructions)",
    )
    parser.add_argument("--repeats", type=int, default=3, help="callgrind rounds (median)")
    parser.add_argument("--results", type=Path, default=ROOT / "benchmarks")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, not {args.repeats}")
    from benchmarks.replay import stream_for

    progress = Progress(NAME)
    stream, _ = stream_for(scratch_dir(ROOT / "benchmarks", "replay"), REQUESTS, progress)
    progress.log(f"recording the replay of {stream.name}")
    steps = record(stream)
    ops: dict[str, float] = {}
    ends = {}
    for model in MODELS:
        ops[model], desk = opcodes_a_quote(model, steps)
        ends[model] = desk.end_state()
        print(f"{model}: {ops[model]:,.1f} opcodes a quote")
    if any(end != ends["today"] for end in ends.values()):
        raise SystemExit("the models ended in different states: fix them before counting")
    quotes = sum(1 for s in steps if s[0] == "q")
    result: dict[str, Any] = {
        "command": " ".join(["python -m benchmarks.desk_layout", *(argv or sys.argv[1:])]),
        "commit": _commit(),
        "stream": stream.name,
        "quotes": quotes,
        "ticks": len(steps) - quotes,
        "opcodes_a_quote": ops,
        "replay_instructions_a_request": args.replay_instructions,
    }
    if not args.callgrind:
        result["callgrind_skipped"] = "not asked (--callgrind)"
    elif shutil.which("valgrind") is None:
        result["callgrind_skipped"] = "valgrind is not installed (apt-get install valgrind)"
        print(result["callgrind_skipped"], file=sys.stderr)
    else:
        result["callgrind_repeats"] = args.repeats
        result["callgrind"] = _callgrind(
            steps, quotes, args.replay_instructions, args.repeats, progress
        )
    write_json(args.results / f"{NAME}.json", result)
    (args.results / f"{NAME}.md").write_text(report(result), encoding="utf-8")
    return 0


def _commit() -> str:
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, check=False
    )
    return done.stdout.decode().strip() or "?"


def _callgrind(
    steps: list[Step], quotes: int, per: int | None, repeats: int, progress: Progress
) -> dict[str, dict[str, Any]]:
    """Each model's callgrind counts (``repeats`` rounds, the models interleaved), its median
    instructions a quote with min–max, and the saving of the medians against today's.

    The counts move with the child's surroundings: three runs of one child with the same
    paths and environment agreed within 0.02 %, but eight runs from other temporary folders
    (one with one more environment variable) gave ``today`` 44,389–46,237 a quote (issue 29,
    session 38; the cause is not found). So each round
    writes the steps and the bytecode cache to a fresh temporary folder: the rounds sample
    that spread, and the median is the figure."""
    nets: dict[str, list[int]] = {model: [] for model in MODELS}
    text = json.dumps(steps)  # stdlib json: amounts beyond 64 bits
    for round_ in range(repeats):
        with tempfile.TemporaryDirectory(prefix="desk-layout-") as folder:
            path, cache = Path(folder) / "steps.json", Path(folder) / "pycache"
            path.write_text(text)
            child("today", "warm", path, cache)  # every model's modules: one cache
            for model in MODELS:
                progress.log(f"round {round_ + 1}/{repeats}: {model} under callgrind")
                ran, setup = child(model, "run", path, cache), child(model, "setup", path, cache)
                assert ran is not None and setup is not None
                nets[model].append(ran - setup)
    counts: dict[str, dict[str, Any]] = {}
    for model, got in nets.items():
        a_quote = round(statistics.median(got) / quotes)
        saving = a_quote - counts["today"]["a_quote"] if counts else 0
        counts[model] = {
            "nets": got,
            "a_quote": a_quote,
            "min": round(min(got) / quotes),
            "max": round(max(got) / quotes),
            "saving": saving,
        }
        share = f", {-saving / per:.2%} of {per:,}" if per and saving else ""
        print(
            f"{model}: {a_quote:,} instructions a quote (median of {len(got)}, "
            f"{min(got) / quotes:,.0f}–{max(got) / quotes:,.0f}), {saving:+,}{share}"
        )
    if not per:
        print(
            "divide the saving by the replay's net instructions a request "
            "(python -m benchmarks.replay_instructions)"
        )
    return counts


if __name__ == "__main__":
    raise SystemExit(main())
