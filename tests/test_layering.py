"""The dependency direction of DESIGN.md ("Packages"), checked on the source: ``protocol`` is the
bottom layer and imports nothing of ours from above it; ``core`` (the desk) imports only itself,
``protocol``, the standard library and numpy.

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
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the importing package
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                yield ".".join([*base, node.module] if node.module else base)
            else:
                assert node.module is not None
                yield node.module


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
