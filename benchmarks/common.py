"""Shared pieces of the benchmarks: statistics, progress lines, child processes, CPU time.

Child processes are started with asyncio, stopped with SIGTERM and given ``STOP_TIMEOUT_S`` to
exit before they are killed; how they ended is part of every result (``exit_code``,
``shutdown_s``, ``killed``). CPU time of a process is read from ``/proc/<pid>/stat`` so a result
can say which process was busy, not only how fast the answers came back.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import orjson

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "benchmarks"
SCRATCH_NAME = "scratch.tmp"  # ignored by git (benchmarks/*.tmp)
STOP_TIMEOUT_S = 10.0
CLK_TCK = os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------------- statistics


def quantile(ordered: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile of an already sorted sequence (numpy's default method)."""
    if not ordered:
        return math.nan
    pos = q * (len(ordered) - 1)
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def summarize(values: Sequence[float], digits: int = 3) -> dict[str, Any]:
    """n, mean, p50, p90, p99, p99.9 and max of ``values`` (same unit as given)."""
    ordered = sorted(values)
    if not ordered:
        return {"n": 0}

    def r(x: float) -> float:
        return round(x, digits)

    return {
        "n": len(ordered),
        "mean": r(sum(ordered) / len(ordered)),
        "p50": r(quantile(ordered, 0.50)),
        "p90": r(quantile(ordered, 0.90)),
        "p99": r(quantile(ordered, 0.99)),
        "p99_9": r(quantile(ordered, 0.999)),
        "max": r(ordered[-1]),
    }


# ---------------------------------------------------------------------------- output


def write_json(path: Path, data: Any) -> None:
    path.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n")


def fmt(value: Any, digits: int = 2) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        return f"{value:,.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def md_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(fmt(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


class Progress:
    """One status line per ``every_s`` on stderr (rewritten in place on a terminal)."""

    def __init__(self, name: str, every_s: float = 1.0, stream: TextIO | None = None) -> None:
        self.name = name
        self.every_s = every_s
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self._last = 0.0
        self._open = False

    def update(self, text: str, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last < self.every_s:
            return
        self._last = now
        line = f"[{self.name}] {text}"
        if self.tty:
            self.stream.write("\r\x1b[2K" + line)
            self._open = True
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def log(self, text: str) -> None:
        """A line that stays."""
        if self._open:
            self.stream.write("\n")
            self._open = False
        self.stream.write(f"[{self.name}] {text}\n")
        self.stream.flush()


# ---------------------------------------------------------------------------- environment


def machine_info() -> dict[str, Any]:
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    commit = ""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        ).stdout.strip()
    dirty: list[str] = []
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        ).stdout
        dirty = [line[3:] for line in status.splitlines() if "benchmarks/" not in line]
    return {
        "git_uncommitted_files": dirty,  # tracked files changed since the commit (not ours)
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "cpu_model": model,
        "cpus": os.cpu_count(),
        "git_commit": commit,
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def calibrate() -> dict[str, Any]:
    """Two hot-path primitives timed here and now (best of 5), against DESIGN's budgets: a
    machine that is slower, or busy with other work, shows a ratio above 1."""
    import timeit

    from solver.protocol.encoding import b58encode
    from solver.protocol.keys import SecretKey

    key = SecretKey(bytes(range(32)))
    digest = bytes(range(32, 64))
    signature = key.sign(digest)
    sign_us = min(timeit.repeat(lambda: key.sign(digest), number=2000, repeat=5)) / 2000 * 1e6
    b58_us = min(timeit.repeat(lambda: b58encode(signature), number=5000, repeat=5)) / 5000 * 1e6
    # DESIGN's 17 and 5 µs were the code before issue 29; scaled by the ratios new/old of
    # benchmarks/signing_path.md (0.90 and 0.12), so that the gauge still reads 1 there.
    sign_budget, b58_budget = 15.3, 0.6
    return {
        "ed25519_sign_us": round(sign_us, 1),
        "b58encode_64B_us": round(b58_us, 2),
        "design_budget_us": {"ed25519_sign": sign_budget, "b58encode_64B": b58_budget},
        "ratio_to_design": round((sign_us / sign_budget + b58_us / b58_budget) / 2, 2),
    }


def _proc_stat() -> tuple[float, float]:
    """(busy, steal) CPU seconds of the whole machine since boot."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq) / CLK_TCK, steal / CLK_TCK


@dataclass(frozen=True)
class ProcessTree:
    """A process and its children, measured together (a PostgreSQL server: the postmaster and
    its backends; see :func:`tree_cpu_seconds`)."""

    pid: int


Measured = int | ProcessTree | None
"""What :class:`CpuMeter` measures under a name: a process, a tree, or this process (None)."""


def cpu_of(what: Measured) -> float:
    return tree_cpu_seconds(what.pid) if isinstance(what, ProcessTree) else cpu_seconds(what)


class CpuMeter:
    """CPU used over an interval, in cores: by each named process, by the whole machine, and
    by everything else (other users of a shared machine: the figure that says whether a run
    was disturbed)."""

    def __init__(self, pids: Mapping[str, Measured]) -> None:
        self.pids = dict(pids)
        self._start: dict[str, float] = {}
        self._machine = (0.0, 0.0)
        self._wall = 0.0

    def start(self) -> None:
        self._start = {name: cpu_of(pid) for name, pid in self.pids.items()}
        self._machine = _proc_stat()
        self._wall = time.monotonic()

    def stop(self) -> dict[str, float]:
        wall = max(time.monotonic() - self._wall, 1e-9)
        used = {name: (cpu_of(pid) - self._start[name]) / wall for name, pid in self.pids.items()}
        busy, steal = _proc_stat()
        machine = (busy - self._machine[0]) / wall
        out = {name: round(v, 3) for name, v in used.items()}
        out["machine_busy"] = round(machine, 3)
        out["other_processes"] = round(
            max(0.0, machine - sum(v for v in used.values() if not math.isnan(v))), 3
        )
        out["steal"] = round((steal - self._machine[1]) / wall, 3)
        return out


DISTURBED_CORES = 0.3


def disturbed(cpu: Mapping[str, float], threshold: float = DISTURBED_CORES) -> bool:
    """Did processes outside the benchmark use more than ``threshold`` cores (see CpuMeter)?"""
    return cpu.get("other_processes", 0.0) > threshold


async def background_load(seconds: float = 1.0) -> float:
    """Cores busy on the machine over ``seconds`` (call it while the benchmark is idle)."""
    meter = CpuMeter({"self": None})
    meter.start()
    await asyncio.sleep(seconds)
    got = meter.stop()
    return round(got["machine_busy"], 3)


async def wait_for_quiet(
    max_wait_s: float, threshold_cores: float = 0.25, progress: Progress | None = None
) -> dict[str, Any]:
    """Wait (at most ``max_wait_s``) until the machine's background load is below threshold."""
    started = time.monotonic()
    load = await background_load()
    while load > threshold_cores and time.monotonic() - started < max_wait_s:
        if progress is not None:
            progress.update(f"waiting for a quiet machine: {load:.2f} cores busy elsewhere")
        load = await background_load()
    return {
        "background_cores_at_start": load,
        "waited_s": round(time.monotonic() - started, 1),
        "quiet": load <= threshold_cores,
        "threshold_cores": threshold_cores,
    }


def dirty_note(machine: Mapping[str, Any]) -> str:
    """`` plus uncommitted changes to N files`` when the tree differed from the commit."""
    files = machine.get("git_uncommitted_files") or []
    return f" plus uncommitted changes to {len(files)} files (see the JSON)" if files else ""


def cpu_seconds(pid: int | None = None) -> float:
    """User + system CPU seconds used so far by process ``pid`` (default: this process)."""
    if pid is None:
        t = os.times()
        return t.user + t.system
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return math.nan
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def _stat_fields(pid: int | str) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (field 3 onwards)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2 :].split()


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of ``pid`` and of its children: its own, its live children's, and those of
    the children it has reaped (``cutime``/``cstime``: a PostgreSQL backend that ended still
    counts). Grandchildren are not looked for (a postmaster's children do not fork)."""
    own = _stat_fields(pid)
    if own is None:
        return math.nan
    total = sum(int(x) for x in own[11:15])  # utime, stime, cutime, cstime
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and entry.name != str(pid):
            fields = _stat_fields(entry.name)
            if fields is not None and fields[1] == str(pid):  # ppid
                total += int(fields[11]) + int(fields[12])
    return total / CLK_TCK


def pin(pid: int, cpus: set[int]) -> bool:
    """Restrict ``pid`` (0: this process) to ``cpus``; False where that is not possible."""
    try:
        available = os.sched_getaffinity(0 if pid == 0 else pid)
        if not cpus <= available | os.sched_getaffinity(0):
            return False
        os.sched_setaffinity(pid, cpus)
    except (AttributeError, OSError):
        return False
    return True


def two_core_layout() -> tuple[set[int], set[int]] | None:
    """(cores of the driver, core of the process under test), or None on a 1-core machine."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except AttributeError:
        return None
    if len(cpus) < 2:
        return None
    return set(cpus[:-1]), {cpus[-1]}


def scratch_dir(results_dir: Path, name: str) -> Path:
    path = results_dir / SCRATCH_NAME / name
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


# ---------------------------------------------------------------------------- child processes


@dataclass
class Child:
    """A child process started by a benchmark, with where its output goes."""

    name: str
    process: asyncio.subprocess.Process
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid


async def start_child(
    name: str,
    argv: Sequence[str],
    log_path: Path,
    *,
    env: Mapping[str, str] | None = None,
    stdout_pipe: bool = False,
    cwd: Path = ROOT,
) -> Child:
    """Start ``argv`` in ``cwd``; stderr (and stdout unless piped) go to ``log_path``."""
    log = log_path.open("wb")
    try:
        process = await asyncio.create_subprocess_exec(
            *argv,
            cwd=cwd,
            env={**os.environ, **(env or {})},
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE if stdout_pipe else log,
            stderr=log,
            start_new_session=True,  # a Ctrl-C of the benchmark does not reach it directly
        )
    finally:
        log.close()
    return Child(name, process, log_path)


async def read_json_line(child: Child, timeout_s: float) -> dict[str, Any]:
    """The first stdout line of ``child``, as a JSON object (the child's ready signal)."""
    assert child.process.stdout is not None
    try:
        line = await asyncio.wait_for(child.process.stdout.readline(), timeout_s)
    except TimeoutError:
        raise RuntimeError(f"{child.name} did not become ready in {timeout_s:.0f} s") from None
    if not line:
        code = await child.process.wait()
        tail = child.log_path.read_text(errors="replace")[-2000:]
        raise RuntimeError(f"{child.name} exited ({code}) before it was ready:\n{tail}")
    data = orjson.loads(line)
    if not isinstance(data, dict):
        raise RuntimeError(f"{child.name} printed {line[:200]!r}, not a JSON object")
    return data


async def stop_child(child: Child, timeout_s: float = STOP_TIMEOUT_S) -> dict[str, Any]:
    """SIGTERM, wait up to ``timeout_s``, then SIGKILL. Returns how it ended."""
    process = child.process
    started = time.monotonic()
    killed = False
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), timeout_s)
        except TimeoutError:
            killed = True
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
    return {
        "exit_code": process.returncode,
        "shutdown_s": round(time.monotonic() - started, 3),
        "killed_after_timeout": killed,
        "clean": process.returncode == 0 and not killed,
    }


def log_tail(path: Path, lines: int = 20) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return []


# ---------------------------------------------------------------------------- py-spy profiles

Stages = Sequence[tuple[str, Callable[[str], bool]]]

_SCAFFOLD = (
    "<module> (",
    "_run_module_as_main (",
    "_run_code (",
    "main (",
    "run_bot (",
    "serve (benchmarks/",
    "run (asyncio/runners.py",
    "Runner.run (",
    "BaseEventLoop.run_until_complete",
    "BaseEventLoop.run_forever",
    "BaseEventLoop._run_once",
    "Handle._run (",
)


def pyspy_binary() -> str | None:
    """py-spy next to this interpreter (``.venv/bin/pip install py-spy``), or on PATH."""
    local = Path(sys.executable).parent / "py-spy"
    return str(local) if local.exists() else shutil.which("py-spy")


async def pyspy_start(
    pid: int, seconds: int, out: Path, rate: int = 250, *, nonblocking: bool = False
) -> Child | None:
    """Sample ``pid`` for ``seconds``, idle included, into collapsed stacks at ``out``; None
    when py-spy is not installed. By default py-spy pauses the process for each sample (exact
    stacks); ``nonblocking`` never pauses it, at the price of some stacks cut short."""
    binary = pyspy_binary()
    if binary is None:
        return None
    _remove(out)
    argv = [binary, "record", "--pid", str(pid), "--duration", str(seconds), "--rate", str(rate)]
    argv += ["--format", "raw", "--function", "--idle", "--output", str(out)]
    if nonblocking:
        argv.append("--nonblocking")
    child = await start_child("py-spy", argv, out.with_suffix(".log"))
    await asyncio.sleep(0.3)
    return child


async def pyspy_finish(child: Child, out: Path, timeout_s: float = 30.0) -> str | None:
    """Wait for py-spy to write its output; the collapsed stacks, or None if it failed."""
    try:
        await asyncio.wait_for(child.process.wait(), timeout_s)
    except TimeoutError:
        await stop_child(child)
    return _read_text(out) if child.process.returncode == 0 else None


def _remove(path: Path) -> None:
    path.unlink(missing_ok=True)


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return None


def short_frame(frame: str) -> str:
    """``func (/abs/site-packages/pkg/mod.py:12)`` -> ``func (pkg/mod.py)``."""
    name, _, where = frame.partition(" (")
    where = re.sub(r":\d+$", "", where.rstrip(")"))
    for marker in ("site-packages/", "/lib/python3.11/", f"{ROOT}/"):
        if marker in where:
            where = where.split(marker, 1)[1]
    return f"{name} ({where})" if where else name


def _idle(frame: str) -> bool:
    """The event loop waiting for I/O: ``EpollSelector.select (selectors.py)``; under uvloop
    the loop runs in C below ``Runner.run`` / ``run (uvloop/__init__.py)``, so a stack ending
    there is counted idle too (with it the few samples of libuv's own work, which has no
    Python frame)."""
    name = frame.partition(" (")[0]
    if "selectors.py" in frame and name.endswith(("select", "poll")):
        return True
    return frame.startswith(("Runner.run (asyncio/runners.py", "run (uvloop/__init__.py"))


def analyse_collapsed(text: str, stages: Stages, top: int = 25) -> dict[str, Any]:
    """Shares of the main thread's busy samples, from py-spy's collapsed (``raw``) stacks: per
    function (self and inclusive) and per stage (the first of ``stages`` whose test matches a
    frame of the stack). Idle samples (the loop in ``select``) and other threads (idle
    executor workers) are counted apart. Each stage also keeps its count of samples, so that
    a caller can turn it into a cost without the rounding of the shares."""
    main_total = idle = other_threads = 0
    self_counts: Counter[str] = Counter()
    incl_counts: Counter[str] = Counter()
    groups: Counter[str] = Counter()
    for line in text.splitlines():
        stack_text, _, count_text = line.rpartition(" ")
        if not stack_text or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [short_frame(f) for f in stack_text.split(";") if f]
        if not frames:
            continue
        if any(f.startswith("Thread._bootstrap") for f in frames):
            other_threads += count
            continue
        main_total += count
        if _idle(frames[-1]):
            idle += count
            continue
        self_counts[frames[-1]] += count
        for name in set(frames):
            incl_counts[name] += count
        stage = next((label for label, test in stages if any(test(f) for f in frames)), "other")
        groups[stage] += count
    busy = main_total - idle

    def share(c: int) -> float:
        return round(100 * c / busy, 1) if busy else 0.0

    inclusive = [
        {"function": k, "pct_of_busy": share(v)}
        for k, v in incl_counts.most_common()
        if not k.startswith(_SCAFFOLD)
    ]
    return {
        "samples_main_thread": main_total,
        "samples_idle": idle,
        "samples_other_threads": other_threads,
        "samples_busy": busy,
        "busy_share_pct": round(100 * busy / main_total, 1) if main_total else 0.0,
        "top_self": [
            {"function": k, "pct_of_busy": share(v)} for k, v in self_counts.most_common(top)
        ],
        "top_inclusive": inclusive[:top],
        "groups": [
            {"group": k, "samples": v, "pct_of_busy": share(v)} for k, v in groups.most_common()
        ],
    }


def stage_table(profiles: Mapping[str, dict[str, Any]]) -> str:
    """Stage shares of several profiles side by side (stages in the first profile's order)."""
    names = list(profiles)
    order: list[str] = []
    for prof in profiles.values():
        order += [g["group"] for g in prof.get("groups", []) if g["group"] not in order]
    shares = {
        n: {g["group"]: g["pct_of_busy"] for g in p.get("groups", [])} for n, p in profiles.items()
    }
    rows = [[stage] + [shares[n].get(stage, 0.0) for n in names] for stage in order]
    return md_table(["stage", *[f"% of busy, {n}" if n else "% of busy" for n in names]], rows)


def profile_markdown(
    prof: dict[str, Any], what: str, rows: int = 20, level: str = "###", stages: bool = True
) -> list[str]:
    """The profile section of a summary: stages, then top functions inclusive and self."""
    lines = [f"Tool: {prof['tool']}.", ""]
    if "busy_share_pct" in prof:
        lines += [
            f"{prof['samples_main_thread']:,} samples of {what}'s main thread; busy in "
            f"{prof['busy_share_pct']}% of them (the rest: the event loop waiting for I/O). "
            "Shares below are of the busy samples.",
            "",
        ]
        if stages:
            lines += [f"{level} By stage", "", stage_table({"": prof}), ""]
        lines += [
            f"{level} Top functions, inclusive (time in the function and below)",
            "",
            md_table(
                ["function", "% of busy"],
                [[f"`{t['function']}`", t["pct_of_busy"]] for t in prof["top_inclusive"][:rows]],
            ),
            "",
        ]
    lines += [
        f"{level} Top functions, self time",
        "",
        md_table(
            ["function", "% of busy"],
            [[f"`{t['function']}`", t["pct_of_busy"]] for t in prof["top_self"][:rows]],
        ),
        "",
    ]
    return lines


def plot_stages(
    profiles: Mapping[str, dict[str, Any]],
    path: Path,
    title: str,
    value: str = "pct_of_busy",
    xlabel: str = "% of busy samples of the main thread (py-spy)",
) -> None:
    """Horizontal bars of the stages of one or more py-spy profiles: their shares of the busy
    samples, or another figure of each stage (``value``, a key of its ``groups`` entries, such
    as a cost per answer); a stage without that figure is left out of its profile's bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    staged = {n: p for n, p in profiles.items() if p.get("groups")}
    if not staged:
        return
    order: list[str] = []
    for prof in staged.values():
        order += [g["group"] for g in prof["groups"] if g["group"] not in order]
    order.reverse()
    height = 0.8 / len(staged)
    fig, ax = plt.subplots(figsize=(11, 0.45 * len(order) * max(1, len(staged) * 0.7) + 1.5))
    y = np.arange(len(order))
    for i, (name, prof) in enumerate(staged.items()):
        share = {g["group"]: g.get(value) or 0.0 for g in prof["groups"]}
        values = [share.get(stage, 0.0) for stage in order]
        offset = (i - (len(staged) - 1) / 2) * height
        label = f"{name} (busy {prof['busy_share_pct']}%)" if name else None
        ax.barh(y + offset, values, height=height, label=label)
        pct = value == "pct_of_busy"
        unit, pad = ("%", 0.3) if pct else ("", max(values, default=0.0) / 100)
        for yy, v in zip(y + offset, values, strict=True):
            if v:
                ax.text(v + pad, yy, f"{v:.1f}{unit}", va="center", fontsize=7)
    ax.set_yticks(y, [textwrap.fill(stage, 60) for stage in order], fontsize=8)
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    if len(staged) > 1 or next(iter(staged)):
        ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
