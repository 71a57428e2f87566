"""Each pair's strategy, loaded while the configuration is validated, its ``params`` checked by
the strategy's own frozen config class (STYLE 4).

So a bad parameter is a configuration problem like any other, reported with its YAML path
(``pairs.0.params.spread_bps: ...``) by every caller of :func:`~solver.config.validate_bot_config`
— ``solver config check``, ``solver run``, the backtest — rather than when the bot builds its
routes, and every bad pair is reported at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from solver.config.fields import Loc, strategy_ref
from solver.config.problems import pydantic_message
from solver.errors import SolverError


def strategy_problems(raw_pairs: Any) -> list[tuple[Loc, str]]:
    """``(loc, message)`` for each pair of raw YAML data whose strategy cannot be loaded with its
    params. Pairs whose ``strategy`` or ``params`` are malformed are skipped: the section model
    reports those."""
    # Lazy: the strategies (and a third-party plugin's module) load only when a config is
    # validated, not when ``solver --help`` imports this package.
    from strategies.registry import resolve_strategy

    problems: list[tuple[Loc, str]] = []
    for index, pair in enumerate(raw_pairs if isinstance(raw_pairs, list) else ()):
        if not isinstance(pair, Mapping):
            continue
        spec, params = pair.get("strategy"), pair.get("params", {})
        if not isinstance(spec, str) or not isinstance(params, Mapping):
            continue
        try:
            strategy_ref(spec)
        except ValueError:
            continue
        try:
            cls = resolve_strategy(spec)
        except SolverError as exc:
            problems.append((("pairs", index, "strategy"), str(exc)))
            continue
        try:
            config = cls.Config.model_validate(dict(params))
        except ValidationError as exc:
            problems.extend(
                (("pairs", index, "params", *err["loc"]), pydantic_message(err))
                for err in exc.errors()
            )
            continue
        try:
            cls(config)
        except Exception as exc:  # a plugin's own check (STYLE 5): a problem, not a crash
            detail = str(exc) if isinstance(exc, SolverError) else type(exc).__name__
            problems.append(
                (("pairs", index, "params"), f"strategy {spec!r} refused these params: {detail}")
            )
    return problems
