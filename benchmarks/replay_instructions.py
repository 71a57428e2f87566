"""The replay's cost per request as counts, not times: the figure issue 29's rounds decide by.

This machine is shared and its speed moves within a run (``benchmarks/replay.md``: three runs
of one tree read 14,917 / 12,056 / 11,179 requests a CPU second), so a change of 1–3 % cannot
be seen in CPU time without dozens of pairs. Two counts do not move:

- **instructions** (``valgrind --tool=callgrind``): the replay of the synthetic stream
  (``spread``, signing off, :func:`benchmarks.replay.stream_for`) minus a run that only sets it
  up (imports, config, the replay built), each in a fresh interpreter with
  ``PYTHONHASHSEED=0`` and no bytecode cache read or written. With ``--baseline REV`` the
  same two runs are made from ``git archive REV`` and the two trees' figures given side by
  side (the set-up run moves by ~±15 M between runs, so the runs' totals are given too).
- **opcodes** (``--opcodes``, no valgrind needed): the bytecode instructions a request runs, by
  function (``sys.settrace`` opcode events): where the interpreter's work is, which
  a sampling profiler spreads over the lines that miss the caches.

    python -m benchmarks.replay_instructions [--strategy spread] [--requests 10000]
        [--baseline REV] [--opcodes [--top 40]]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from benchmarks.common import ROOT, Progress, scratch_dir
from benchmarks.quote_path_systems import export_tree, tree_env

NAME = "replay_instructions"
STRATEGIES = ("spread", "amm")

CHILD = """
import sys
from pathlib import Path
import benchmarks.replay as R
from backtest.engine import Replay
from backtest.settings import validate_settings
from backtest.stream.read import read_stream
run, strategy, path = sys.argv[1] == "run", sys.argv[2], sys.argv[3]
replay = Replay(R._config(strategy), validate_settings({**R.SETTINGS, "sign": False}))
with read_stream(path) as reader:
    if run:
        replay.run(reader, reader.header)
"""
"""One child: set the replay up, and replay the stream only when asked (``run``). Written
against what every revision since the replay's benchmark has (``benchmarks.replay._config``,
``SETTINGS``), so a baseline tree runs it with its own code."""

_COLLECTED = re.compile(rb"Collected : (\d+)")


def collected(stderr: bytes) -> int:
    """The instructions callgrind counted, from its summary on stderr."""
    found = _COLLECTED.findall(stderr)
    if len(found) != 1:
        tail = stderr.decode(errors="replace").strip().splitlines()[-5:]
        raise RuntimeError("no callgrind total in the child's output: " + " | ".join(tail))
    return int(found[0])


def instructions(tree: Path, strategy: str, stream: Path, *, run: bool) -> int:
    """Instructions of one child from ``tree`` (callgrind; :data:`CHILD`)."""
    # No bytecode cache read or written: a tree with ``__pycache__`` folders would compile
    # less than one without (an empty cache prefix is searched instead of them).
    cache = Path(tempfile.mkdtemp(prefix="no-pycache-"))
    env = {
        **tree_env(tree),
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONPYCACHEPREFIX": str(cache),
    }
    done = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--callgrind-out-file=/dev/null",
            sys.executable,
            "-c",
            CHILD,
            "run" if run else "setup",
            strategy,
            str(stream),
        ],
        cwd=tree,
        env=env,
        capture_output=True,
        check=False,
    )
    shutil.rmtree(cache, ignore_errors=True)
    if done.returncode != 0:
        tail = done.stderr.decode(errors="replace").strip().splitlines()[-5:]
        raise RuntimeError(f"the child from {tree} failed: " + " | ".join(tail))
    return collected(done.stderr)


def net(tree: Path, strategy: str, stream: Path, progress: Progress) -> dict[str, int]:
    """The replay's run, its set-up and their difference, from ``tree``."""
    progress.log(f"{tree}: the replay under callgrind (~50x slower than without)")
    ran = instructions(tree, strategy, stream, run=True)
    progress.log(f"{tree}: the set-up alone")
    setup = instructions(tree, strategy, stream, run=False)
    return {"run": ran, "setup": setup, "net": ran - setup}


class OpcodeCounter:
    """Bytecode instructions by function (file, name), counted by ``sys.settrace``'s opcode
    events while installed (:meth:`start`, :meth:`stop`)."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()

    def _trace(self, frame: FrameType, event: str, arg: Any) -> Callable[..., Any]:
        frame.f_trace_opcodes = True
        code = frame.f_code
        key = (code.co_filename, code.co_qualname)
        counts = self.counts

        def local(frame: FrameType, event: str, arg: Any) -> Callable[..., Any]:
            if event == "opcode":
                counts[key] += 1
            return local

        return local

    def start(self) -> None:
        sys.settrace(self._trace)

    def stop(self) -> None:
        sys.settrace(None)


def opcodes(strategy: str, stream: Path) -> tuple[int, Counter[tuple[str, str]]]:
    """The replay of ``stream`` in this process with opcodes counted: its requests and the
    counts by function."""
    import benchmarks.replay as replay_bench
    from backtest.engine import Replay
    from backtest.settings import validate_settings
    from backtest.stream.read import read_stream

    settings = validate_settings({**replay_bench.SETTINGS, "sign": False})
    replay = Replay(replay_bench._config(strategy), settings)
    counter = OpcodeCounter()
    with read_stream(str(stream)) as reader:
        counter.start()
        try:
            result = replay.run(reader, reader.header)
        finally:
            counter.stop()
    return result.measures.requests, counter.counts


def _where(path: str) -> str:
    root = str(ROOT) + os.sep
    return path[len(root) :] if path.startswith(root) else path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.replay_instructions")
    parser.add_argument("--strategy", choices=STRATEGIES, default="spread")
    parser.add_argument("--requests", type=int, default=10_000, help="the stream's length")
    parser.add_argument("--baseline", metavar="REV", help="also count REV's tree (git archive)")
    parser.add_argument("--opcodes", action="store_true", help="opcodes by function instead")
    parser.add_argument("--top", type=int, default=40, help="functions listed by --opcodes")
    args = parser.parse_args(argv)
    if args.requests < 1:
        parser.error(f"--requests must be at least 1, not {args.requests}")
    from benchmarks.replay import stream_for

    progress = Progress(NAME)
    scratch = scratch_dir(ROOT / "benchmarks", NAME)
    stream, _ = stream_for(scratch_dir(ROOT / "benchmarks", "replay"), args.requests, progress)
    if args.opcodes:
        requests, counts = opcodes(args.strategy, stream)
        total = sum(counts.values())
        print(f"{total / requests:,.0f} opcodes a request ({requests:,} requests, {stream.name})")
        for (path, name), count in counts.most_common(args.top):
            print(f"{count / requests:9.1f}  {_where(path)}:{name}")
        return 0
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (apt-get install valgrind): no instruction counts; "
              "--opcodes counts bytecodes without it", file=sys.stderr)  # fmt: skip
        return 2
    trees = [("here", ROOT)]
    if args.baseline:
        tree, sha = export_tree(args.baseline, scratch)
        trees.append((f"{args.baseline} ({sha[:10]})", tree))
    results = {who: net(tree, args.strategy, stream, progress) for who, tree in trees}
    print(f"callgrind, {args.requests:,}-request stream, {args.strategy}, signing off (M instr.)")
    for who, got in results.items():
        print(
            f"  {who}: net {got['net'] / 1e6:,.1f} M ({got['net'] / args.requests:,.0f} a "
            f"request), run {got['run'] / 1e6:,.1f} M, set-up {got['setup'] / 1e6:,.1f} M"
        )
    if len(results) == 2:
        here, base = results["here"], results[trees[1][0]]
        print(
            f"  here / baseline: net {here['net'] / base['net']:.4f}, "
            f"run {here['run'] / base['run']:.4f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
