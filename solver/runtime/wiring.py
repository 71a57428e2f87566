"""The desk from the bot's YAML config: routes, pipeline settings, risk limits.

Shared by the live runtime and the backtest (which must not import the runtime), so both build
the very same desk from the same file.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from solver.config import BotConfig
from solver.config.sections import PartnersSpec
from solver.core.desk import Desk, DeskSettings
from solver.core.quoting import PartnerFilter, PipelineSettings, Route
from solver.core.risk import RiskLimits
from strategies.registry import load_strategy


def partner_filter(spec: PartnersSpec | None) -> PartnerFilter | None:
    """None when the pair serves everyone (the quote path then checks nothing)."""
    if spec is None or (spec.allow is None and not spec.deny):
        return None
    allow = None if spec.allow is None else frozenset(spec.allow)
    return PartnerFilter(allow, frozenset(spec.deny))


def build_routes(config: BotConfig) -> dict[tuple[str, str], Route]:
    routes: dict[tuple[str, str], Route] = {}
    for pair in config.pairs:
        strategy = load_strategy(pair.strategy, pair.params)
        giveaway = pair.max_giveaway_bps
        if giveaway is None:
            giveaway = config.quote.max_giveaway_bps
        partners = partner_filter(pair.partners)
        directions = {
            "both": [(pair.base, pair.quote), (pair.quote, pair.base)],
            "buy_base": [(pair.base, pair.quote)],
            "sell_base": [(pair.quote, pair.base)],
        }[pair.directions]
        for asset_in, asset_out in directions:
            routes[(asset_in, asset_out)] = Route(
                asset_in,
                asset_out,
                strategy,
                pair.min_notional_usd,
                pair.max_notional_usd,
                pair.enabled,
                max_giveaway_bps=giveaway,
                partners=partners,
            )
    return routes


def pipeline_settings(config: BotConfig) -> PipelineSettings:
    return PipelineSettings(
        deadline_margin_ms=config.quote.deadline_margin_ms,
        max_min_deadline_ms=config.quote.max_min_deadline_ms,
        strategy_budget_ms=config.quote.strategy_budget_ms,
        balance_max_age_s=config.chain.balance_max_age_ms / 1000,
        price_max_age_s=config.prices.max_age_ms / 1000,
        salt_max_age_s=config.chain.salt_max_age_s,
        max_price_divergence_bps=config.prices.max_divergence_bps,
        max_open_exposure_usd=config.risk.max_open_exposure_usd,
        max_open_per_token=dict(config.risk.max_open_per_token),
        max_quotes_per_s=config.risk.max_quotes_per_s,
    )


def risk_limits(config: BotConfig) -> RiskLimits:
    risk = config.risk
    return RiskLimits(
        risk.max_daily_loss_usd,
        risk.max_drawdown_usd,
        dict(risk.max_reconciliation_mismatch),
        risk.halt_on_mismatch,
        risk.max_stale_s,
        max_daily_loss_pct=risk.max_daily_loss_pct,
        max_drawdown_pct=risk.max_drawdown_pct,
    )


def build_desk(
    config: BotConfig,
    *,
    shadow: bool = False,
    kill_switch: bool = True,
    timer: Callable[[], float] = time.perf_counter,
) -> Desk:
    """``timer``: the strategy's wall-clock budget (the backtest passes one that never
    advances: a budget measured on the machine would make replays differ)."""
    settings = DeskSettings(
        pipeline=pipeline_settings(config),
        limits=risk_limits(config),
        kill_switch=kill_switch,
        shadow=shadow,
        history_size=config.prices.history_size,
    )
    return Desk(
        settings,
        build_routes(config),
        {asset: token.decimals for asset, token in config.tokens.items()},
        floors=dict(config.risk.floors),
        symbols={asset: token.symbol for asset, token in config.tokens.items()},
        pairs=[(pair.base, pair.quote) for pair in config.pairs],
        timer=timer,
    )
