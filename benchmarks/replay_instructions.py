"""The replay's cost per request as counts, not times: the figure issue 29's rounds decide by.

This machine is shared and its speed moves within a run (``benchmarks/replay.md``: three runs
of one tree read 14,917 / 12,056 / 11,179 requests a CPU second), so a change of 1–3 % cannot
be seen in CPU time without dozens of pairs. Two counts do not move:

- **instructions** (``valgrind --tool=callgrind``): the replay of the synthetic stream
  (``spread``, signing off, :func:`benchmarks.replay.stream_for`) minus a run that only sets it
  up (imports, config, the replay built), each in a fresh interpreter with
  ``PYTHONHASHSEED=0`` and one bytecode cache, warmed first. With ``--baseline REV`` the
  same two runs are made from ``git archive REV`` and the two trees' figures given side by
  side, with the runs' totals (the set-up runs of two trees then match within ~0.2 %).
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


def _env(tree: Path, cache: Path, *, write: bool) -> dict[str, str]:
    """The child's environment: ``tree`` first on the path, hashes fixed, and the bytecode
    cache in ``cache`` (:func:`net`), written only by the warm-up."""
    env = {**tree_env(tree), "PYTHONHASHSEED": "0", "PYTHONPYCACHEPREFIX": str(cache)}
    if write:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    else:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _child(
    tree: Path, strategy: str, stream: Path, env: dict[str, str], *, run: bool, valgrind: bool
) -> bytes:
    """Run :data:`CHILD` from ``tree`` (under callgrind when ``valgrind``); its stderr."""
    tool = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"] if valgrind else []
    argv = [*tool, sys.executable, "-c", CHILD, "run" if run else "setup", strategy, str(stream)]
    done = subprocess.run(argv, cwd=tree, env=env, capture_output=True, check=False)
    if done.returncode != 0:
        tail = done.stderr.decode(errors="replace").strip().splitlines()[-5:]
        raise RuntimeError(f"the child from {tree} failed: " + " | ".join(tail))
    return done.stderr


def net(tree: Path, strategy: str, stream: Path, progress: Progress) -> dict[str, int]:
    """The replay's run, its set-up and their difference, from ``tree``.

    Both counted runs read one bytecode cache, written by a warm-up run of the replay just
    before (in a folder of its own, not the tree's ``__pycache__``): each compiles nothing, so
    the set-up's imports cost the same in both, whichever tree had caches of its own (issue 29:
    a tree with ``__pycache__`` folders compiled less than one without, and the net moved by
    tens of M; compiling everything, the set-up run alone is ~8.7 G instructions)."""
    with tempfile.TemporaryDirectory(prefix="pycache-") as folder:
        cache = Path(folder)
        progress.log(f"{tree}: a warm-up run (writes the bytecode cache)")
        _child(tree, strategy, stream, _env(tree, cache, write=True), run=True, valgrind=False)
        env = _env(tree, cache, write=False)
        progress.log(f"{tree}: the replay under callgrind (~50x slower than without)")
        ran = collected(_child(tree, strategy, stream, env, run=True, valgrind=True))
        progress.log(f"{tree}: the set-up alone")
        setup = collected(_child(tree, strategy, stream, env, run=False, valgrind=True))
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
