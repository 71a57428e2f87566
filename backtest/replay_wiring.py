"""The live desk and executor wired to the replay's simulated ports (DESIGN "The shape").

:func:`wire` builds what the replay drives, once per replay: the very
:class:`~solver.core.desk.Desk` the live bot runs (:func:`solver.runtime.wiring.build_desk`, from
the bot's own YAML) and the live :class:`~solver.runtime.executor.Executor`, whose ports are the
simulated ones (:mod:`backtest.ports`): the relay with the fill and taker models, settlement on the
sandbox ledger (:mod:`backtest.settle`), statuses, nonce checks, and the measurements the
executor's facts feed. The driver (:mod:`backtest.engine`) keeps only the stream, the clock and
the desk's inputs, and hands in what reads them (``clock``, ``balances``, ``salt``).

- **Signing**: the executor signs the decision's ``Quote`` as live — the live nonce source over a
  sequence derived from the seed, and the live :class:`QuoteSigner` when signing is on (else a
  stand-in signature whose hash is the nonce); the desk hears the signature through ``Desk.signed``.
- **Not wired, on purpose**: no journal (the executor's fact observers feed the measurements),
  no metrics; the strategy's wall-clock budget is not enforced (:func:`_no_time`: a timing would
  make runs differ; the bench measures speed instead).

Kept apart from the driver so that what the desk runs with is read in one place, and the
driver's module is its loop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from backtest.fills import LatencyModel, make_fill_model
from backtest.measure.detail import pair_names
from backtest.measure.fill_record import FillRecord
from backtest.measure.measurements import Measurements
from backtest.ports import (
    ImmediateLoop,
    LedgerNonceOracle,
    SimulatedRelay,
    StandInSigner,
    seeded_sequence,
)
from backtest.replay_result import RiskHalt
from backtest.settings import BacktestSettings
from backtest.settle import LedgerSettler
from backtest.unobserved import Coverage
from solver.config import BotConfig
from solver.core import facts as f
from solver.core.clock import Micros
from solver.core.desk import Desk
from solver.core.view import DeskView
from solver.protocol.nonce import QuoteNonces
from solver.runtime.executor import Executor
from solver.runtime.ports import Ports, Refresh
from solver.runtime.wiring import build_desk

__all__ = ["Wired", "wire"]


@dataclass(frozen=True, slots=True)
class Wired:
    """What :func:`wire` built: the desk, its executor and the simulated ports it drives."""

    desk: Desk
    executor: Executor
    settler: LedgerSettler
    relay: SimulatedRelay
    measures: Measurements
    latency: LatencyModel
    halt: RiskHalt
    """The executor's alert port: whether (and why) a risk pause halted the replay."""


def wire(
    config: BotConfig,
    settings: BacktestSettings,
    *,
    clock: Callable[[], Micros],
    balances: Callable[[], None],
    salt: Callable[[], None],
    on_fill: Callable[[FillRecord], None] | None = None,
    observe: Callable[[float, str | None, bool], None] | None = None,
) -> Wired:
    """The desk of ``config`` and its executor on the simulated ports of ``settings``.

    ``clock`` is the executor's (the replay's simulated time); ``balances`` and ``salt`` answer
    its ``RefreshBalances``/``RefreshSalt`` (the driver tells the desk the ledger's). ``on_fill``
    and ``observe`` are :class:`~backtest.engine.Replay`'s."""
    desk = build_desk(config, kill_switch=settings.kill_switch, timer=_no_time)
    settler = LedgerSettler(
        contract=config.verifier_contract,
        solver_account=config.account.id,
        user_account=settings.user_account,
        fee_pips=settings.fee_pips,
        sign=settings.sign,
        nonce_layout=config.nonce.layout,
        seed=settings.seed,
    )
    latency = LatencyModel(settings.latency, settings.seed)
    symbols = {asset: token.symbol for asset, token in config.tokens.items()}
    measures = Measurements(
        {asset: token.decimals for asset, token in config.tokens.items()},
        sorted(config.tokens),
        on_fill,
        pair_names=pair_names(((p.base, p.quote) for p in config.pairs), symbols),
        symbols=symbols,
    )
    relay = SimulatedRelay(
        settler=settler,
        fill_model=make_fill_model(settings.fill, settings.seed),
        measures=measures,
        desk=DeskView(desk),
        wait_ms=float(config.bus.wait_ms),
        settlement_delay_ms=settings.settlement_delay_ms,
        observe=observe,
        coverage=Coverage(
            settings.fill.unobserved.mode if settings.fill.model == "competitor" else "-"
        ),
    )
    halt = RiskHalt()
    executor = Executor(
        desk,
        Ports(
            signer=settler.signer or StandInSigner(),
            nonces=QuoteNonces(config.nonce.layout, seeded_sequence(settings.seed)),
            journal=None,
            sender=relay,
            statuses=relay,
            nonce_oracle=LedgerNonceOracle(settler),
            balances=Refresh(balances),
            salt=Refresh(salt),
            alerts=halt,
            metrics=None,
            loop=ImmediateLoop(),
            clock=clock,
        ),
    )

    def on_markout(fact: f.Markout) -> None:
        measures.markout(fact.quote_id, fact.horizon_s, fact.value_usd)

    executor.observe(on_markout, f.Markout)
    executor.observe(relay.moved, f.QuoteMoved)  # a fill's prices
    relay.feed = executor.feed
    return Wired(desk, executor, settler, relay, measures, latency, halt)


def _no_time() -> float:
    """The pipeline's strategy timer in replay: wall-clock budgets are not enforced."""
    return 0.0
