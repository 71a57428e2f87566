"""Run the whole sandbox service in one asyncio loop: ledger RPC node, message bus, price feed,
swap API, history API and simulated takers, each on its own loopback port (spec 4.1–4.7;
protocol-notes 5, 6; docs/swap-api.md).

Separate ports mirror the real deployment ({relay_url}, {chain_rpc_url}, ...) and let tests stop
and restart one service — the bus dropping solvers, the ledger RPC going down — without
touching the others. ``port=0`` gives every service an ephemeral port; ``port=N`` uses N, N+1, …
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import FastAPI

from sandbox.bus import MessageBus
from sandbox.bus_server import create_bus_app
from sandbox.chain import SandboxChain
from sandbox.config import FundedAccount, SandboxConfig
from sandbox.history_api import create_history_app
from sandbox.ledger import VerifierLedger
from sandbox.prices import PriceProcess, create_prices_app
from sandbox.rpc_node import RpcNodeFaults, create_rpc_node_app
from sandbox.serving import RunningServer, start_server
from sandbox.swap.api import create_swap_app
from sandbox.swap.service import SwapService
from sandbox.takers import TakerPopulation
from solver.errors import ConfigError
from solver.io.key_files import load_secret_key, write_secret_key
from solver.protocol.keys import SecretKey

log = logging.getLogger("sandbox")
SERVICES = ("relay", "chain_rpc", "prices", "swap_api", "history_api")


@dataclass
class _Service:
    name: str
    app: FastAPI
    port: int
    running: RunningServer | None = None


@dataclass
class FundedAccountInfo:
    name: str
    account_id: str
    public_key: str
    key_file: str | None
    key: SecretKey = field(repr=False)


class Sandbox:
    """The running service. Use ``async with Sandbox(config) as sandbox:``."""

    def __init__(
        self,
        config: SandboxConfig,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        run_takers: bool = True,
        extra_keys: dict[str, SecretKey] | None = None,
    ) -> None:
        self.config = config
        self.host = host
        self.base_port = port
        self.run_takers = run_takers and config.takers.enabled
        self.extra_keys = extra_keys or {}
        self.ledger = VerifierLedger(
            config.verifier_contract,
            fee_pips=config.fee_pips,
            wrapped_native=config.wrapped_native,
            nonce_policy=config.nonces,
            seed=config.seed,
        )
        self.chain = SandboxChain(self.ledger)
        self.bus = MessageBus(
            self.chain,
            asset_field_prefix=config.bus.asset_field_prefix,
            solver_wait_ms=config.bus.solver_wait_ms,
            settlement_delay_ms=config.bus.settlement_delay_ms,
        )
        self.rpc_faults = RpcNodeFaults()
        self.prices = PriceProcess(config.tokens, seed=config.seed, spec=config.prices)
        api_key = os.environ.get(config.bus.api_key_env) if config.bus.api_key_env else None
        self.swap = SwapService(
            config.swap,
            chain=self.chain,
            bus=self.bus,
            prices=self.prices,
            tokens=config.tokens,
            state_dir=config.state_dir,
        )
        self.services: dict[str, _Service] = {
            "relay": _Service(
                "relay",
                create_bus_app(
                    self.bus, api_key=api_key, max_frame_bytes=config.bus.max_frame_bytes
                ),
                0,
            ),
            "chain_rpc": _Service("chain_rpc", create_rpc_node_app(self.chain, self.rpc_faults), 0),
            "prices": _Service("prices", create_prices_app(self.prices), 0),
            "swap_api": _Service("swap_api", create_swap_app(self.swap), 0),
            "history_api": _Service("history_api", create_history_app(self.swap), 0),
        }
        self.accounts: dict[str, FundedAccountInfo] = {}
        self.takers: TakerPopulation | None = None
        self._stop = asyncio.Event()
        self._background: list[asyncio.Task[None]] = []

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> Sandbox:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        self._fund_accounts()
        self.swap.start()
        for offset, name in enumerate(SERVICES):
            port = self.base_port + offset if self.base_port else 0
            await self.start_service(name, port)
        self._background.append(asyncio.create_task(self.prices.run(self._stop)))
        self._background.append(asyncio.create_task(self.swap.run(self._stop)))
        if self.run_takers:
            self.takers = TakerPopulation(
                self.config.takers,
                self.config.tokens,
                self.chain,
                self.prices,
                self.urls()["relay_rpc"],
                seed=self.config.seed,
                asset_field_prefix=self.config.bus.asset_field_prefix,
            )
            self.takers.fund()
            self._background.append(asyncio.create_task(self.takers.run(self._stop)))

    async def stop(self) -> None:
        self._stop.set()
        for task in self._background:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(task, 5)
        await self.bus.close()
        await asyncio.gather(*(self.stop_service(name) for name in SERVICES))
        self.swap.close()

    async def start_service(self, name: str, port: int | None = None) -> None:
        """Start (or restart, on its previous port) one service."""
        service = self.services[name]
        running = await start_server(
            service.app,
            self.host,
            service.port if port is None else port,
            ws="websockets-sansio",
            ws_max_size=self.config.bus.max_frame_bytes,
            timeout_graceful_shutdown=2,
        )
        service.port, service.running = running.port, running

    async def stop_service(self, name: str) -> None:
        service = self.services[name]
        if service.running is not None:
            await service.running.stop()
            service.running = None

    # ------------------------------------------------------------------ accounts

    def _fund_accounts(self) -> None:
        for spec in self.config.accounts:
            key = self.extra_keys.get(spec.name) or self._account_key(spec)
            key_file = None if spec.name in self.extra_keys else self._key_file(spec)
            account_id = spec.account_id or key.public_key.implicit_account_id()
            if spec.account_id:
                self.ledger.register_key(account_id, key.public_key.to_text())
            for asset, amount in spec.balances.items():
                self.ledger.deposit(account_id, asset, amount)
            self.accounts[spec.name] = FundedAccountInfo(
                spec.name, account_id, key.public_key.to_text(), key_file, key
            )

    def _key_file(self, spec: FundedAccount) -> str | None:
        if spec.key_env and os.environ.get(spec.key_env):
            return None
        return str(self.config.state_dir / f"{spec.name}.key")

    def _account_key(self, spec: FundedAccount) -> SecretKey:
        if spec.key_env and os.environ.get(spec.key_env):
            return load_secret_key(env=spec.key_env)
        path = Path(self.config.state_dir) / f"{spec.name}.key"
        if path.exists():
            return load_secret_key(path=path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            raise ConfigError(f"cannot create state_dir {path.parent}: {exc.strerror}") from None
        key = SecretKey.generate()
        write_secret_key(key, path)
        return key

    # ------------------------------------------------------------------ addresses

    def urls(self) -> dict[str, str]:
        def base(name: str) -> str:
            return f"http://{self.host}:{self.services[name].port}"

        return {
            "relay_ws": f"ws://{self.host}:{self.services['relay'].port}/ws",
            "relay_rpc": base("relay") + "/rpc",
            "chain_rpc": base("chain_rpc") + "/",
            "prices": base("prices") + "/prices",
            "swap_api": base("swap_api"),
            "history_api": base("history_api"),
        }

    def info(self) -> dict[str, Any]:
        """The one JSON line printed once listening, for scripts and other solvers."""
        return {
            **self.urls(),
            "verifier_contract": self.ledger.contract_id,
            "asset_field_prefix": self.config.bus.asset_field_prefix,
            "nonces": self.config.nonces,
            "wrapped_native": self.config.wrapped_native,
            "swap_service_public_key": self.swap.public_key,
            "swap_token_file": str(self.swap.token_file) if self.swap.token_file else None,
            "accounts": {
                name: {
                    "account_id": a.account_id,
                    "public_key": a.public_key,
                    "key_file": a.key_file,
                }
                for name, a in self.accounts.items()
            },
            "takers": self.takers.users if self.takers else [],
        }
