"""Configuration problems as ``<source>: <yaml path>: <message>`` lines, one per problem, so one
edit-check cycle fixes a whole file.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from solver.config.fields import Loc
from solver.config.prices import SOURCE_KINDS
from solver.errors import ConfigError


class BotConfigError(ConfigError):
    """Every problem of one configuration: ``problems`` holds ``path: message`` lines."""

    def __init__(
        self, source: str, problems: Sequence[str], overridden: Sequence[str] = ()
    ) -> None:
        self.source = source
        self.problems = tuple(problems)
        self.overridden = tuple(overridden)
        super().__init__("\n".join(self.lines()))

    def lines(self) -> list[str]:
        """One line per problem, ``<source>: <yaml path>: <message>``; a problem at or under a
        key given with ``--set`` (``overridden``) is ``--set <yaml path>: <message>``: the file
        did not say it, so it must not be blamed."""
        return [f"{self._origin(problem)}{problem}" for problem in self.problems]

    def _origin(self, problem: str) -> str:
        for key in self.overridden:
            if problem.startswith((f"{key}:", f"{key}.", f"{key} (key)")):
                return "--set "
        return f"{self.source}: "

    def with_overrides(self, keys: Sequence[str]) -> BotConfigError:
        """The same problems, those under ``keys`` blamed on ``--set``."""
        return BotConfigError(self.source, self.problems, keys)


def yaml_path(loc: Loc) -> str:
    """``pairs.0.max_notional_usd`` from a pydantic location (union tags dropped)."""
    parts: list[str] = []
    for i, part in enumerate(loc):
        previous = loc[i - 1] if i else None
        if part in SOURCE_KINDS and isinstance(previous, int):
            continue  # the discriminated union's tag, not a YAML key
        if part == "[key]":
            parts[-1:] = [f"{parts[-1]} (key)"] if parts else ["(key)"]
            continue
        parts.append(str(part))
    return ".".join(parts) or "(top level)"


def pydantic_message(err: Mapping[str, Any]) -> str:
    msg = str(err["msg"])
    for prefix in ("Value error, ", "Assertion failed, "):
        msg = msg.removeprefix(prefix)
    if err["type"] == "extra_forbidden":
        msg = "unknown key (not allowed here; check its spelling and indentation)"
    return msg
