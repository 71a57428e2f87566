"""The operator and the upkeep built from their ports alone (issue 22, "Reaching in"): a real
desk from the default config, the real executor, store, notifier and metrics, and a bus
websocket client that was never started — no :class:`~solver.runtime.bot.LiveBot`. What the
bot does with them is covered through the running bot (``tests/app``); here, that the ports
are all each one needs.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from solver.config import BotConfig, load_bot_config
from solver.core.clock import micros
from solver.core.desk import Desk
from solver.core.desk_snapshot import document, restore
from solver.core.view import DeskView
from solver.io.alert_policy import BusWatch
from solver.io.bus_rpc import BusRpcClient
from solver.io.bus_ws import BusWsClient
from solver.io.desk_ports import (
    BusStatusSource,
    LedgerNonceOracle,
    LoggedAlerts,
    RunningLoop,
    Tasks,
)
from solver.io.ledger_client import LedgerClient
from solver.io.metrics import Metrics
from solver.io.notify import Notifier
from solver.io.store.sqlite_store import Store
from solver.protocol.keys import SecretKey
from solver.protocol.nonce import NonceSequence, QuoteNonces
from solver.protocol.quote_signing import QuoteSigner
from solver.runtime.executor import Executor
from solver.runtime.operator import Operator, OperatorPorts
from solver.runtime.ports import Ports, Refresh
from solver.runtime.upkeep import Upkeep, UpkeepPorts
from solver.runtime.wiring import build_desk

ROOT = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
NOW_US = micros(NOW)  # the desk's clock (solver.core.clock); the notifier speaks datetimes
UNREACHABLE = "http://127.0.0.1:9"  # nothing here is asked: no question leaves the process


@dataclass
class Parts:
    config: BotConfig
    desk: Desk
    view: DeskView
    executor: Executor
    store: Store
    ws: BusWsClient
    notifier: Notifier
    metrics: Metrics
    balance_refreshes: list[str]


@pytest.fixture
async def parts(tmp_path: Path) -> AsyncIterator[Parts]:
    key = SecretKey.generate()
    account = key.public_key.implicit_account_id()
    config = load_bot_config(ROOT / "config" / "default.yaml").with_overrides(
        {"account.id": account, "storage.path": str(tmp_path / "bot.sqlite")}
    )
    desk = build_desk(config)
    store = Store(config.storage.path, account=account)
    http = httpx.AsyncClient()
    tasks = Tasks()
    ws = BusWsClient(UNREACHABLE.replace("http", "ws"), on_quote=lambda request: None)
    metrics = Metrics(
        pairs=[(pair.base, pair.quote) for pair in config.pairs],
        symbols={asset: token.symbol for asset, token in config.tokens.items()},
    )
    executor = Executor(
        desk,
        Ports(
            signer=QuoteSigner(key, account, config.verifier_contract),
            nonces=QuoteNonces(config.nonce.layout, NonceSequence.unregistered()),
            journal=store.journal,
            sender=ws,
            statuses=BusStatusSource(BusRpcClient(UNREACHABLE, client=http), tasks),
            nonce_oracle=LedgerNonceOracle(
                LedgerClient(UNREACHABLE, config.verifier_contract, client=http), account, tasks
            ),
            balances=Refresh(lambda: None),
            salt=Refresh(lambda: None),
            alerts=LoggedAlerts(None),
            metrics=metrics,
            loop=RunningLoop(),
            clock=lambda: NOW_US,
        ),
    )
    notifier = Notifier.from_config(config.alerts, {}, clock=lambda: NOW)
    yield Parts(config, desk, DeskView(desk), executor, store, ws, notifier, metrics, [])
    await http.aclose()
    store.close()


def operator_of(parts: Parts) -> Operator:
    async def refresh_balances() -> None:
        parts.balance_refreshes.append("now")

    return Operator(
        OperatorPorts(
            account=parts.config.account.id,
            shadow=False,
            view=parts.view,
            tokens=parts.config.tokens,
            pairs=parts.config.pairs,
            assets=sorted(parts.config.tokens),
            store=parts.store,
            paper=None,
            executor=parts.executor,
            bus=parts.ws,
            notifier=parts.notifier,
            metrics=parts.metrics,
            refresh_balances=refresh_balances,
            clock=lambda: NOW_US,
        )
    )


async def test_the_operator_pauses_resumes_and_reports_through_its_ports(parts: Parts) -> None:
    operator = operator_of(parts)
    assert operator.pause("wNEAR/USDC", "checking the spread")["ok"]
    status = operator.status()
    assert status["state"] == "RUNNING" and status["connected"] is False
    assert status["pairs"]["wNEAR/USDC"]["state"] == "PAUSED"
    assert status["pairs"]["ETH/USDC"]["state"] == "RUNNING"
    with pytest.raises(LookupError):
        operator.pause("DOGE/USDC", "not traded")

    operator.pause(None, "everything")
    assert operator.status()["state"] == "PAUSED"
    reply = await operator.resume(None)
    assert reply["ok"] and operator.status()["state"] == "RUNNING"
    assert parts.balance_refreshes == []  # only accept_balances asks for a snapshot
    reply = await operator.resume("wNEAR/USDC", accept_balances=True)
    assert parts.balance_refreshes == ["now"]  # taken before the baseline is asked for
    assert not reply["ok"] and "no balance snapshot yet" in reply["message"]

    ready, reasons = operator.health()
    assert not ready and "not connected to the bus" in reasons and "no salt" in reasons
    await asyncio.sleep(0)  # the loop turn's group commit
    kinds = [type(fact).__name__ for fact in parts.store.journal.load()[1]]
    # Through the executor into the journal: the pair's two directions, then everything.
    assert kinds.count("PauseSet") == 3 and kinds.count("PauseCleared") == 1
    operator.refresh_metrics()
    assert parts.metrics.registry.get_sample_value("solver_connected") == 0


async def test_the_upkeep_ticks_gauges_and_snapshots_through_its_ports(parts: Parts) -> None:
    gauges: list[str] = []
    lags: list[float] = []
    upkeep = Upkeep(
        UpkeepPorts(
            view=parts.view,
            executor=parts.executor,
            store=parts.store,
            retain_days=parts.config.storage.retain_days,
            bus_watch=BusWatch(parts.config.alerts.bus_down_after_s),
            refresh_gauges=lambda: gauges.append("refreshed"),
            observe_loop_lag=lambda lag, held: lags.append(lag),
            clock=lambda: NOW_US,
        )
    )
    operator_of(parts).pause(None, "kept across the snapshot")
    stop = asyncio.Event()
    ticker = asyncio.create_task(upkeep.run(stop))
    while not gauges:  # every GAUGES_EVERY_TICKS ticks
        await asyncio.sleep(0.01)
    stop.set()
    await ticker
    assert len(lags) >= 5 and all(lag >= 0 for lag in lags)

    upkeep.close(NOW_US)  # at shutdown: a snapshot, taken through the view
    doc, after = parts.store.journal.load()
    assert doc == document(parts.view.capture()) and after == []
    rebuilt = build_desk(parts.config)
    restore(rebuilt, doc)
    assert DeskView(rebuilt).pauses.as_dict() == parts.view.pauses.as_dict() != {}
