"""The dependency direction of DESIGN.md ("Packages"), checked on the source: ``protocol`` is the
bottom layer and imports nothing of ours from above it; ``core`` (the desk) imports only itself,
``protocol``, the standard library and numpy. Inside ``runtime``, only the live driver
(``bot.py``) and the wiring know the :class:`~solver.runtime.bot.LiveBot`: the operator, the
upkeep and the status are handed what they use (issue 22, "Reaching in").

Every ``import`` / ``from ... import`` of every module is read with :mod:`ast`, including those
inside functions and under ``TYPE_CHECKING``: a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIRST_PARTY = frozenset({"solver", "strategies", "backtest", "sandbox", "benchmarks", "tests"})


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(source: str, module: str, *, is_package: bool = False) -> Iterator[str]:
    """The absolute name of every module ``source`` (the text of ``module``) imports from."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            yield from_module(node, module, is_package=is_package)


def from_module(node: ast.ImportFrom, module: str, *, is_package: bool = False) -> str:
    """The absolute name of the module a ``from ... import`` in ``module`` imports from."""
    if not node.level:
        assert node.module is not None
        return node.module
    package = module if is_package else module.rpartition(".")[0]
    base = package.split(".")  # relative: resolved against the importing package
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def violations(package: str, allowed: object) -> list[str]:
    """``module: imported`` for each import of a module of ``package`` that ``allowed`` refuses."""
    assert callable(allowed)
    found = []
    files = sorted((ROOT / package.replace(".", "/")).rglob("*.py"))
    assert files, f"no modules under {package}"
    for path in files:
        module = module_name(path)
        source = path.read_text(encoding="utf-8")
        for name in imported_modules(source, module, is_package=path.name == "__init__.py"):
            if not allowed(name):
                found.append(f"{module}: {name}")
    return found


def bot_imports(source: str, module: str, *, is_package: bool = False) -> list[str]:
    """Each import in ``source`` (the text of ``module``) that reaches the live bot: its module
    ``solver.runtime.bot`` (however spelled), or a name ``LiveBot`` from anywhere."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if within(a.name, "solver.runtime.bot")]
        elif isinstance(node, ast.ImportFrom):
            base = from_module(node, module, is_package=is_package)
            for alias in node.names:
                # ``from solver.runtime import bot`` names the bot module itself.
                name = f"{base}.{alias.name}"
                if within(name, "solver.runtime.bot") or alias.name == "LiveBot":
                    found.append(name)
    return found


def protocol_allows(name: str) -> bool:
    """Third-party libraries and the standard library, but nothing of ours outside protocol."""
    return name.split(".", maxsplit=1)[0] not in FIRST_PARTY or within(name, "solver.protocol")


def core_allows(name: str) -> bool:
    top = name.split(".", maxsplit=1)[0]
    return (
        name == "__future__"
        or top in sys.stdlib_module_names
        or top == "numpy"
        or within(name, "solver.core")
        or within(name, "solver.protocol")
    )


def test_protocol_imports_nothing_from_above_it() -> None:
    assert violations("solver.protocol", protocol_allows) == []


def test_core_imports_only_core_protocol_stdlib_and_numpy() -> None:
    assert violations("solver.core", core_allows) == []


def test_only_the_driver_and_the_wiring_import_the_live_bot() -> None:
    """The operator, the upkeep, the status and the executor take narrow ports, never the bot."""
    allowed = {"solver/runtime/bot.py", "solver/runtime/wiring.py"}
    found = []
    for path in sorted((ROOT / "solver" / "runtime").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel in allowed:
            continue
        source = path.read_text(encoding="utf-8")
        module = module_name(path)
        is_package = path.name == "__init__.py"
        found += [f"{rel}: {name}" for name in bot_imports(source, module, is_package=is_package)]
    assert found == []


@pytest.mark.parametrize(
    "source",
    [
        "from solver.runtime.bot import LiveBot",
        "if TYPE_CHECKING:\n    from solver.runtime.bot import LiveBot\n",
        "def f():\n    from solver.runtime.bot import utc_now\n",
        "import solver.runtime.bot",
        "from solver.runtime import bot",
        "from . import bot",
        "from .bot import LiveBot as Bot",
        "from tests.app.harness import LiveBot",
    ],
)
def test_the_bot_check_sees_every_form(source: str) -> None:
    """The check above can fail: each way of reaching the bot is reported."""
    assert len(bot_imports(source, "solver.runtime.operator")) == 1


def test_the_bot_check_lets_other_runtime_imports_pass() -> None:
    source = "from solver.runtime import executor\nfrom .ports import Ports\nimport solver.runtime"
    assert bot_imports(source, "solver.runtime.operator") == []


@pytest.mark.parametrize(
    ("source", "module", "expected"),
    [
        ("from solver.errors import ConfigError", "solver.protocol.keys", "solver.errors"),
        (
            "def f():\n    import solver.io.store.sqlite_store\n",
            "solver.protocol.x",
            "solver.io.store.sqlite_store",
        ),
        ("from ..io import store", "solver.protocol.keys", "solver.io"),
        ("from . import ids", "solver.protocol.keys", "solver.protocol"),
    ],
)
def test_the_import_reader_sees_every_form(source: str, module: str, expected: str) -> None:
    """The checks above can fail: lazy and relative imports are resolved, not skipped."""
    assert expected in list(imported_modules(source, module))


def test_the_rules_refuse_what_the_design_forbids() -> None:
    assert not protocol_allows("solver.errors")
    assert not protocol_allows("sandbox.ledger")
    assert protocol_allows("pydantic") and protocol_allows("solver.protocol.ids")
    assert not core_allows("solver.io.store.sqlite_store")
    assert not core_allows("pydantic")
    assert not core_allows("strategies.registry")
    assert core_allows("numpy.typing") and core_allows("datetime")
