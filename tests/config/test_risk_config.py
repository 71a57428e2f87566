"""Issue 14 "pricing and risk for real money" in the config: loss limits in percent of the
starting equity, the price guard per pair, several price sources with a divergence guard,
partner allow / deny lists. Validated with YAML paths; defaults keep the previous behaviour;
the desk is wired from them (solver/runtime/wiring.py)."""

from __future__ import annotations

from typing import Any

import pytest

from solver.config import load_bot_config, validate_bot_config
from solver.core.quoting import PartnerFilter
from solver.runtime.wiring import build_routes, partner_filter, pipeline_settings, risk_limits
from tests.config.helpers import ETH, REPO, USDC, WNEAR, minimal, paths_of, problems_of

SANDBOX = {"kind": "sandbox", "url": "http://127.0.0.1:8762/prices"}


def test_defaults_keep_the_previous_behaviour() -> None:
    config = validate_bot_config(minimal())
    assert config.risk.max_daily_loss_pct is None and config.risk.max_drawdown_pct is None
    assert config.quote.max_giveaway_bps == 300.0
    assert config.prices.max_divergence_bps == 200.0
    pair = config.pairs[0]
    assert pair.max_giveaway_bps is None and pair.partners is None
    routes = build_routes(config)
    assert {(r.max_giveaway_bps, r.partners) for r in routes.values()} == {(300.0, None)}
    limits = risk_limits(config)
    assert (limits.max_daily_loss_pct, limits.max_drawdown_pct) == (None, None)
    assert pipeline_settings(config).max_price_divergence_bps == 200.0
    assert config.prices.sources[0].label(0) == "sources.0"


def test_new_keys_reach_the_desk() -> None:
    data = minimal()
    data["risk"] = {"max_daily_loss_pct": 2.5, "max_drawdown_pct": 10}
    data["quote"] = {"max_giveaway_bps": 150}
    data["prices"]["max_divergence_bps"] = None
    data["prices"]["sources"] = [
        {**SANDBOX, "name": "sandbox"},
        {"kind": "static", "prices": {USDC: 1.0}},
    ]
    data["pairs"][0].update(max_giveaway_bps=40, partners={"allow": ["wallet-a"], "deny": ["x"]})
    data["pairs"].append(
        {"base": ETH, "quote": USDC, "strategy": "spread",
         "max_notional_usd": 10.0, "partners": {"deny": ["bad"]}}
    )  # fmt: skip
    config = validate_bot_config(data)
    limits = risk_limits(config)
    assert (limits.max_daily_loss_pct, limits.max_drawdown_pct) == (2.5, 10.0)
    assert pipeline_settings(config).max_price_divergence_bps is None
    assert [s.label(i) for i, s in enumerate(config.prices.sources)] == ["sandbox", "sources.1"]
    routes = build_routes(config)
    near = routes[(WNEAR, USDC)]
    assert near.max_giveaway_bps == 40.0
    assert near.partners == PartnerFilter(frozenset({"wallet-a"}), frozenset({"x"}))
    eth = routes[(USDC, ETH)]
    assert eth.max_giveaway_bps == 150.0  # the global guard
    assert eth.partners == PartnerFilter(None, frozenset({"bad"}))


def test_an_empty_partner_spec_checks_nothing() -> None:
    data = minimal()
    data["pairs"][0]["partners"] = {"deny": []}
    (route, _) = build_routes(validate_bot_config(data)).values()
    assert route.partners is None
    assert partner_filter(None) is None


@pytest.mark.parametrize(
    ("change", "path"),
    [
        ({"risk": {"max_daily_loss_pct": 0}}, "risk.max_daily_loss_pct"),
        ({"risk": {"max_daily_loss_pct": 101}}, "risk.max_daily_loss_pct"),
        ({"risk": {"max_drawdown_pct": -1}}, "risk.max_drawdown_pct"),
        ({"risk": {"max_drawdown_pct": "nan"}}, "risk.max_drawdown_pct"),
        ({"quote": {"max_giveaway_bps": -1}}, "quote.max_giveaway_bps"),
        ({"quote": {"max_giveaway_bps": 10_001}}, "quote.max_giveaway_bps"),
        ({"pair": {"max_giveaway_bps": -5}}, "pairs.0.max_giveaway_bps"),
        ({"pair": {"partners": {"allow": []}}}, "pairs.0.partners"),
        ({"pair": {"partners": {"allow": ["a"], "deny": ["a"]}}}, "pairs.0.partners"),
        ({"pair": {"partners": {"allow": [""]}}}, "pairs.0.partners.allow.0"),
        ({"pair": {"partners": {"alow": ["a"]}}}, "pairs.0.partners.alow"),
        ({"prices": {"max_divergence_bps": 0}}, "prices.max_divergence_bps"),
        ({"prices": {"sources": [{**SANDBOX, "name": "1st"}]}}, "prices.sources.0.name"),
        (
            {"prices": {"sources": [{**SANDBOX, "name": "a"}, {**SANDBOX, "name": "a"}]}},
            "prices",
        ),
    ],
)
def test_bad_values_are_reported_with_their_path(change: dict[str, Any], path: str) -> None:
    data = minimal()
    for section, values in change.items():
        target = data["pairs"][0] if section == "pair" else data.setdefault(section, {})
        target.update(values)
    assert paths_of(data) == [path]


def test_the_problems_say_what_is_wrong() -> None:
    data = minimal()
    data["pairs"][0]["partners"] = {"allow": ["a", "b"], "deny": ["b"]}
    assert problems_of(data) == ["pairs.0.partners: in both allow and deny: ['b']"]
    data = minimal()
    data["pairs"][0]["partners"] = {"allow": []}
    (problem,) = problems_of(data)
    assert "admits nobody" in problem and "enabled: false" in problem
    data = minimal()
    data["prices"]["sources"] = [{**SANDBOX, "name": "a"}, {**SANDBOX, "name": "a"}]
    assert problems_of(data) == ["prices: source names must be unique: ['a']"]


def test_the_guarded_spread_example() -> None:
    config = load_bot_config(REPO / "config" / "examples" / "guarded_spread.yaml")
    assert config.risk.max_daily_loss_pct == 1.0 and config.prices.max_divergence_bps == 50
    assert [s.name for s in config.prices.sources] == ["sandbox", "usdc-peg"]
    routes = build_routes(config)
    assert routes[(WNEAR, USDC)].max_giveaway_bps == 100.0
    assert routes[(USDC, ETH)].max_giveaway_bps == 200.0
    assert routes[(USDC, ETH)].partners == PartnerFilter(frozenset({"wallet-a", "wallet-b"}))
    assert config.pairs[0].params["exposure_vol_mult"] == 2
