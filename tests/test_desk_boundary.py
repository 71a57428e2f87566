"""The desk's boundary (DESIGN "The shape"; issue 22): nothing outside ``solver/core`` changes
desk state. Everyone reads it through :class:`~solver.core.view.DeskView`; only the executor
feeds it events, and a driver's start rebuilds it from the journal.

Read on the source with :mod:`ast`, every module of the product outside ``solver/core``:

- no assignment, augmented assignment or ``del`` whose target goes through a ``desk`` or a
  ``view`` (``desk.stats.requests += 1``, ``bot.desk.state.salt = …``);
- no call of a changing method through a ``desk`` (``desk.pauses.add(…)``,
  ``bot.desk.inventory.reserve(…)``), but the executor's ``receive`` / ``tick`` and a driver's
  ``apply`` while it rebuilds the desk;
- no part of the desk handed to another object (``inventory=self.desk.inventory``): whoever
  holds a part can change it behind the desk's back.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("solver", "strategies", "backtest", "sandbox", "benchmarks")
CHANGING = frozenset(
    {
        "add", "remove", "reserve", "release", "settle", "restore", "release_expired",
        "set_price", "set_salt", "set_confirmed", "record_fill", "mark", "shift_baseline",
        "accept", "reconcile", "settled", "move", "add_markout", "drop_due", "take",
        "apply", "receive", "tick", "clear", "update", "pop", "append",
    }
)  # fmt: skip
"""Methods of the desk and its parts (and of their dicts) that change them."""
PARTS = frozenset(
    {"inventory", "pauses", "state", "book", "balances", "pnl", "pipeline", "stats",
     "pair_book", "recent_fills"}
)  # fmt: skip
"""The desk's parts that hold state (a bound method like ``desk.price`` is a read)."""
READERS = frozenset({"len", "list", "dict", "sorted", "reversed", "iter", "sum", "any", "all"})
ALLOWED_CALLS = {
    ("solver/runtime/executor.py", "receive"),
    ("solver/runtime/executor.py", "tick"),
    ("solver/runtime/recovery.py", "apply"),  # the desk rebuilt from the journal
}


def _chain(node: ast.AST) -> Iterator[str]:
    """The names along an attribute/subscript/call chain, innermost last: ``a.b[c].d`` →
    d, b, a."""
    while True:
        if isinstance(node, ast.Attribute):
            yield node.attr
            node = node.value
        elif isinstance(node, ast.Subscript):
            node = node.value
        elif isinstance(node, ast.Call):
            node = node.func
        elif isinstance(node, ast.Name):
            yield node.id
            return
        else:
            return


def _through_desk(node: ast.AST) -> bool:
    names = list(_chain(node))
    return any(name in ("desk", "view") for name in names[1:])


def _desk_part(node: ast.AST) -> str | None:
    """``part`` when ``node`` is ``….desk.part`` (a part of the desk itself)."""
    if isinstance(node, ast.Attribute):
        inner = node.value
        if (isinstance(inner, ast.Attribute) and inner.attr == "desk") or (
            isinstance(inner, ast.Name) and inner.id == "desk"
        ):
            return node.attr
    return None


def findings(source: str, path: str) -> tuple[list[str], set[tuple[str, str]]]:
    """What ``source`` (the text of ``path``) does to desk state: the violations, and the
    parts it hands out."""
    found: list[str] = []
    handed: set[tuple[str, str]] = set()
    for node in ast.walk(ast.parse(source)):
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = list(node.targets)
        for target in targets:
            if isinstance(target, ast.Attribute | ast.Subscript) and (
                _through_desk(target) or _desk_part(target) is not None
                or list(_chain(target))[-1:] == ["desk"]
            ):  # fmt: skip
                found.append(f"{path}:{getattr(node, 'lineno', 0)}: assigns {ast.unparse(target)}")
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in CHANGING:
                names = list(_chain(func.value))
                if "desk" in names and (path, func.attr) not in ALLOWED_CALLS:
                    found.append(f"{path}:{node.lineno}: calls {ast.unparse(func)}")
            if isinstance(func, ast.Name) and func.id in READERS:
                continue
            for arg in [*node.args, *(k.value for k in node.keywords)]:
                part = _desk_part(arg)
                if part in PARTS:
                    handed.add((path, part))
    return found, handed


def product_files() -> Iterator[Path]:
    for top in PRODUCT:
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith("solver/core/") or any(p.endswith(".tmp") for p in path.parts):
                continue  # the desk itself; benchmarks' scratch (other revisions' trees)
            yield path


def test_nothing_outside_core_changes_desk_state() -> None:
    found: list[str] = []
    handed: set[tuple[str, str]] = set()
    for path in product_files():
        rel = path.relative_to(ROOT).as_posix()
        more, parts = findings(path.read_text(encoding="utf-8"), rel)
        found += more
        handed |= parts
    assert found == []
    assert handed == set()


@pytest.mark.parametrize(
    "source",
    [
        "desk.stats.requests += 1",
        "bot.desk.state.salt = b''",
        "self.bot.view.stats.rejected = 3",
        "del desk.book.quotes['q']",
        "bot.desk.inventory.reserve(r)",
        "self.desk.pauses.add(p)",
        "desk.book.quotes.pop('q')",
    ],
)
def test_the_check_sees_each_kind_of_change(source: str) -> None:
    """The check above can fail: each form of change is reported."""
    found, _ = findings(source, "solver/x.py")
    assert len(found) == 1, found


def test_the_check_sees_a_part_handed_out_and_lets_reads_pass() -> None:
    found, handed = findings("Rebalancer(inventory=self.desk.inventory)", "solver/x.py")
    assert found == [] and handed == {("solver/x.py", "inventory")}
    reads = "n = len(bot.view.open_quotes)\nx = desk.stats.requests\nf(view.price('a'))"
    assert findings(reads, "solver/x.py") == ([], set())
