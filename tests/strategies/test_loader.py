"""Loading strategies by built-in name or dotted path, and config errors that name the key."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from solver.errors import ConfigError
from strategies import (
    BUILTINS,
    AmmConfig,
    AmmStrategy,
    InventorySkewStrategy,
    SpreadStrategy,
    load_strategy,
    resolve_strategy,
)
from tests.strategies import broken


def test_builtins_by_name() -> None:
    assert set(BUILTINS) == {"amm", "spread", "inventory_skew"}
    assert isinstance(load_strategy("amm", {}), AmmStrategy)
    assert isinstance(load_strategy("spread", None), SpreadStrategy)
    skew = load_strategy("inventory_skew", {"targets": {"nep141:a": 0.5}, "gamma": 10})
    assert isinstance(skew, InventorySkewStrategy)
    assert skew.config.gamma == 10
    amm = load_strategy("amm", {"margin_bps": 12})
    assert isinstance(amm, AmmStrategy) and amm.config.margin_bps == 12
    assert amm.stated_edge_bps() == 12


def test_dotted_path() -> None:
    strategy = load_strategy("tests.strategies.broken:Raising", {"message": "kaput"})
    assert isinstance(strategy, broken.Raising)
    assert strategy.config.message == "kaput"
    assert resolve_strategy("strategies.amm:AmmStrategy") is AmmStrategy
    assert broken.Raising.name == "Raising"  # defaulted from the class name


@pytest.mark.parametrize(
    ("spec", "params", "key"),
    [
        ("spread", {"spread_bps": -1}, "spread_bps"),
        ("spread", {"spred_bps": 5}, "spred_bps"),
        ("spread", {"max_price_age_s": "soon"}, "max_price_age_s"),
        ("amm", {"margin_bps": float("nan")}, "margin_bps"),
        ("amm", {"margin_bps": 10_000}, "margin_bps"),
        ("inventory_skew", {"targets": {"nep141:a": 1.5}}, "targets.nep141:a"),
        ("inventory_skew", {"target_amounts": {"nep141:a": -1}}, "target_amounts"),
        ("inventory_skew", {"min_spread_bps": 50, "max_spread_bps": 10}, "max_spread_bps"),
        ("tests.strategies.broken:Raising", {"mesage": "x"}, "mesage"),
    ],
)
def test_bad_params_name_the_key(spec: str, params: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError, match="bad parameter") as info:
        load_strategy(spec, params)
    assert key in str(info.value)


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("nope", "unknown strategy 'nope'"),
        ("amm2", "amm, inventory_skew, spread"),
        ("no.such.module:Thing", "cannot import module 'no.such.module'"),
        ("tests.strategies.broken:Missing", "has no 'Missing'"),
        ("tests.strategies.broken:NotAStrategy", "not a Strategy subclass"),
        ("strategies.base:Strategy", "abstract"),
        ("tests.strategies.broken:", "unknown strategy"),
    ],
)
def test_bad_specs(spec: str, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        load_strategy(spec, {})


def test_params_must_be_a_mapping() -> None:
    with pytest.raises(ConfigError, match="mapping"):
        load_strategy("amm", [("margin_bps", 1)])  # type: ignore[arg-type]


def test_configs_are_frozen_and_typed() -> None:
    cfg = AmmConfig(margin_bps=5)
    with pytest.raises(ValidationError):
        cfg.margin_bps = 6  # type: ignore[misc]
    with pytest.raises(ConfigError, match="needs a AmmConfig"):
        AmmStrategy(broken.RaisingConfig())
    assert AmmStrategy().config == AmmConfig()
