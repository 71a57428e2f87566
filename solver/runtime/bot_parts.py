"""The live bot's I/O parts, each built from the config: the store, the HTTP clients of the
ledger and the bus, the bus websocket, the alerts' spool, the rebalancer and the operator's
control API.

Apart from :class:`~solver.runtime.bot.LiveBot` so the bot's constructor reads as the wiring —
which part is handed which — while how each part is configured is said here, once. Nothing
here starts anything but the control API, which :meth:`LiveBot.run` serves when its turn in
the start order comes.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

import httpx

from solver.io.alert_spool import AlertSpool, spool_path
from solver.io.bus_rpc import BusRpcClient
from solver.io.bus_ws import BusWsClient
from solver.io.control import ControlServer, StoreRoutes, create_control_app, serve_control
from solver.io.ledger_client import LedgerClient
from solver.io.store.sqlite_store import Store
from solver.io.swap_client import SwapApiClient
from solver.rebalance.rebalancer import Rebalancer
from solver.runtime.durable_alerts import DurableAlerts

if TYPE_CHECKING:
    from solver.config import BotConfig
    from solver.core.view import DeskView
    from solver.io.alert_policy import BusWatch
    from solver.io.metrics import Metrics
    from solver.io.notify import Notifier
    from solver.protocol.keys import SecretKey
    from solver.runtime.executor import Executor
    from solver.runtime.inbound import Inbound
    from solver.runtime.operator import Operator
    from solver.runtime.ports import MessageSigner


def open_store(config: BotConfig) -> Store:
    """The store the config names: PostgreSQL (``storage.url``) or SQLite (the default)."""
    spec = config.storage
    if spec.url is not None:  # imported here: psycopg only for a bot that uses it
        from solver.io.store.pg.store import PgStore

        return PgStore(
            spec.url,
            password_env=spec.password_env,
            account=config.account.id,
            lease_s=spec.lease_s,
            local_path=spec.path,
            sample_requests=spec.sample_requests,
            lost_quote_sample_rate=spec.lost_quote_sample_rate,
        )
    return Store(
        spec.path,
        sample_requests=spec.sample_requests,
        lost_quote_sample_rate=spec.lost_quote_sample_rate,
        synchronous=spec.synchronous,
        account=config.account.id,
    )


def bus_api_key(config: BotConfig) -> str | None:
    """The bus's API key, from the environment variable ``bus.api_key_env`` names."""
    return os.environ.get(config.bus.api_key_env) if config.bus.api_key_env else None


def rpc_clients(
    config: BotConfig, api_key: str | None
) -> tuple[httpx.AsyncClient, LedgerClient, BusRpcClient]:
    """One HTTP client (its connections pooled), and the ledger's and the bus's RPC over it."""
    http = httpx.AsyncClient(timeout=config.chain.timeout_ms / 1000)
    ledger = LedgerClient(
        str(config.chain.rpc_url),
        config.verifier_contract,
        client=http,
        timeout_s=config.chain.timeout_ms / 1000,
    )
    bus_rpc = BusRpcClient(
        str(config.bus.rpc_url),
        api_key=api_key,
        asset_field_prefix=config.bus.asset_field_prefix,
        client=http,
    )
    return http, ledger, bus_rpc


def bus_ws_client(config: BotConfig, api_key: str | None, inbound: Inbound) -> BusWsClient:
    """The bus websocket, its frames handed to ``inbound``."""
    return BusWsClient(
        str(config.bus.ws_url),
        on_quote=inbound.on_quote,
        on_quotes=inbound.on_quotes,
        on_quote_status=inbound.on_quote_status,
        on_response=inbound.on_response,
        on_state=inbound.on_ws_state,
        api_key=api_key,
        asset_field_prefix=config.bus.asset_field_prefix,
        backoff_initial_s=config.bus.reconnect_initial_ms / 1000,
        backoff_max_s=config.bus.reconnect_max_ms / 1000,
        max_frame_bytes=config.bus.max_frame_bytes,
        compression=config.bus.compression,
    )


def durable_alerts(
    notifier: Notifier, store: Store | None, view: DeskView, bus_watch: BusWatch
) -> DurableAlerts | None:
    """Incidents outlive the process in a spool beside the store (issue 24); a bot without a
    store (shadow mode) keeps them in memory (None)."""
    if store is None:
        return None
    return DurableAlerts(
        notifier, AlertSpool(spool_path(store.path)), view=view, store=store, bus_watch=bus_watch
    )


def build_rebalancer(
    config: BotConfig,
    key: SecretKey | MessageSigner,
    *,
    shadow: bool,
    http: httpx.AsyncClient,
    bus: BusRpcClient,
    ledger: LedgerClient,
    store: Store | None,
    view: DeskView,
    executor: Executor,
    wall: Callable[[], datetime],
    on_flow: Callable[[str, str, int, str, int], None],
    on_balance_change: Callable[[], None],
) -> Rebalancer:
    """The rebalancer (docs/rebalance.md); dry in shadow mode, whatever the config says."""
    spec = config.swap_api
    assert spec is not None  # the config requires swap_api when rebalance.enabled
    swap = SwapApiClient.from_env(
        str(spec.base_url), spec.token_env, client=http, timeout_s=spec.timeout_ms / 1000
    )
    return Rebalancer(
        config.rebalance,
        account=config.account.id,
        key=key,
        swap=swap,
        bus=bus,
        ledger=ledger,
        store=store,
        desk=view,
        feed=executor.feed,
        durable=lambda: executor.outbox.durable,
        clock=wall,
        balance_max_age_s=config.chain.balance_max_age_ms / 1000,
        nonce_layout=config.nonce.layout,
        dry_run=True if shadow else None,
        on_flow=on_flow,
        on_balance_change=on_balance_change,
    )


async def serve_operator_api(
    config: BotConfig, operator: Operator, metrics: Metrics, store: Store | None
) -> ControlServer | None:
    """The metrics and the control API on ``metrics.listen`` (None: not served); the store
    notes its address, where ``solver history`` finds the bot that holds it."""
    if not config.metrics.listen:
        return None
    routes = (
        StoreRoutes(store, {a: t.decimals for a, t in config.tokens.items()})
        if store is not None
        else None
    )
    app = create_control_app(operator, metrics, store=routes)
    control = await serve_control(app, config.metrics.listen)
    if store is not None:
        store.note_control(control.url)
    return control
