"""The live quote path takes its limits from the config (issue 10: the salt's maximum age is
``chain.salt_max_age_ms``, no longer derived from the refresh period inside the app)."""

from __future__ import annotations

from solver.config import validate_bot_config
from solver.runtime.wiring import pipeline_settings
from tests.config.helpers import minimal


def test_the_salt_max_age_comes_from_the_config() -> None:
    data = minimal()
    data["chain"].update(salt_refresh_ms=5000, salt_max_age_ms=12_500)
    assert pipeline_settings(validate_bot_config(data)).salt_max_age_s == 12.5


def test_the_default_salt_max_age_is_twice_the_refresh_period() -> None:
    data = minimal()
    data["chain"]["salt_refresh_ms"] = 5000
    assert pipeline_settings(validate_bot_config(data)).salt_max_age_s == 10.0


def test_the_strategy_budget_comes_from_the_config() -> None:
    """``quote.strategy_budget_ms``: 5 ms unless told (the live tests give a busy machine 1 s)."""
    data = minimal()
    assert pipeline_settings(validate_bot_config(data)).strategy_budget_ms == 5.0
    data["quote"] = {"strategy_budget_ms": 250}
    assert pipeline_settings(validate_bot_config(data)).strategy_budget_ms == 250.0
