"""``make demo``: the sandbox with simulated takers and the bot, in one process, with a live
terminal view (rich), then a report of what happened.

The bot is the real :class:`~solver.runtime.bot.LiveBot` talking to the sandbox over loopback
websockets and HTTP, exactly as it would to a live relay; only the URLs, the account and a fresh
key are filled in here. PnL is marked to the sandbox's reference prices: the value of the final
inventory minus the value of the starting inventory, both at the final prices (so price moves
of the held inventory do not count as trading PnL).
"""

from __future__ import annotations

import asyncio
import os
import signal
import tempfile
import time
from decimal import Decimal
from pathlib import Path

from rich.console import Console
from rich.live import Live
from rich.table import Table

from sandbox.config import load_sandbox_config
from sandbox.server import Sandbox
from solver.config import load_bot_config
from solver.io.logsetup import setup_logging
from solver.protocol.keys import SecretKey
from solver.runtime.bot import LiveBot

KEY_ENV = "SANDBOX_SOLVER_KEY"


def _whole(amount: int, decimals: int) -> Decimal:
    return Decimal(amount) / Decimal(10) ** decimals


class DemoReport:
    """Reads the bot's desk and values inventory at reference prices."""

    def __init__(self, app: LiveBot, sandbox: Sandbox, start: dict[str, int]) -> None:
        self.app, self.sandbox, self.start = app, sandbox, start

    def balances(self) -> dict[str, int]:
        return dict(
            zip(
                self.app.tokens,
                self.sandbox.ledger.mt_batch_balance_of(self.app.account, self.app.tokens),
                strict=True,
            )
        )

    def value_usd(self, balances: dict[str, int]) -> Decimal:
        total = Decimal(0)
        for asset, amount in balances.items():
            total += _whole(amount, self.app.config.tokens[asset].decimals) * Decimal(
                str(self.sandbox.prices.usd(asset))
            )
        return total

    def pnl_usd(self) -> Decimal:
        return self.value_usd(self.balances()) - self.value_usd(self.start)

    def table(self, elapsed: float, seconds: float) -> Table:
        stats = self.app.view.stats
        takers = self.sandbox.takers.stats if self.sandbox.takers else None
        table = Table(
            title=f"solver demo  {elapsed:5.1f}s / {seconds:.0f}s", show_header=False, expand=False
        )
        table.add_column("what", style="bold")
        table.add_column("value")
        table.add_row("requests seen", str(stats.requests))
        table.add_row("quotes sent", str(self.app.executor.outbox.sent))
        table.add_row(
            "won / settled", f"{stats.outcomes.get('WON', 0)} / {stats.outcomes.get('SETTLED', 0)}"
        )
        table.add_row(
            "lost / rejected / failed",
            " / ".join(str(stats.outcomes.get(k, 0)) for k in ("LOST", "REJECTED", "FAILED")),
        )
        table.add_row(
            "skipped", ", ".join(f"{k}={v}" for k, v in stats.skipped.most_common(4)) or "-"
        )
        ordered = sorted(self.app.executor.outbox.response_us)
        p50 = ordered[len(ordered) // 2] if ordered else 0.0
        p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] if ordered else 0.0
        table.add_row("answer latency", f"p50 {p50:.0f} µs, p99 {p99:.0f} µs")
        if takers is not None:
            table.add_row(
                "takers",
                f"asked {takers.requests}, accepted {takers.published_ok}, "
                f"declined on price {takers.rejected_price}",
            )
        table.add_row("PnL (marked)", f"{self.pnl_usd():+.2f} USD")
        for asset in self.app.tokens:
            spec = self.app.config.tokens[asset]
            now = _whole(self.balances()[asset], spec.decimals)
            before = _whole(self.start[asset], spec.decimals)
            table.add_row(
                f"inventory {spec.symbol}",
                f"{now:,.4f}  ({now - before:+,.4f})  @ {self.sandbox.prices.usd(asset):,.4f} USD",
            )
        return table


async def demo(
    sandbox_config_path: str, bot_config_path: str, seconds: float, *, plain: bool = False
) -> int:
    setup_logging("WARNING")
    console = Console()
    key = SecretKey.generate()
    os.environ[KEY_ENV] = key.to_text()  # this process only; the demo key is thrown away after
    sandbox_config = load_sandbox_config(sandbox_config_path)
    state_dir = Path(tempfile.mkdtemp(prefix="solver-demo-"))
    sandbox_config = sandbox_config.model_copy(update={"state_dir": state_dir})
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with Sandbox(sandbox_config, extra_keys={"solver": key}) as sandbox:
        urls = sandbox.urls()
        bot_config = load_bot_config(bot_config_path).with_overrides(
            {
                "account.id": key.public_key.implicit_account_id(),
                "account.key_env": KEY_ENV,
                "account.key_file": None,
                "verifier_contract": sandbox.ledger.contract_id,
                "bus.ws_url": urls["relay_ws"],
                "bus.rpc_url": urls["relay_rpc"],
                "chain.rpc_url": urls["chain_rpc"],
                "prices.sources": [{"kind": "sandbox", "url": urls["prices"], "refresh_ms": 500}],
                "storage.path": str(state_dir / "solver.sqlite"),
                "metrics.listen": None,
                "log.level": "WARNING",
                "log.summary_every_s": 0,
            }
        )
        app = LiveBot(bot_config, key)
        report = DemoReport(app, sandbox, {})
        report.start = report.balances()
        bot_stop = asyncio.Event()
        bot = asyncio.create_task(app.run(bot_stop, grace_s=3))
        console.print(
            f"[bold]sandbox[/bold] relay {urls['relay_ws']}  chain {urls['chain_rpc']}  "
            f"prices {urls['prices']}"
        )
        console.print(
            f"[bold]bot[/bold] account {app.account[:16]}…  pairs {len(bot_config.pairs)}  "
            f"strategy {bot_config.pairs[0].strategy}"
        )
        started = time.monotonic()
        if plain:
            while not stop.is_set() and time.monotonic() - started < seconds:
                await asyncio.sleep(1)
                console.print(app.summary())
        else:
            with Live(report.table(0, seconds), console=console, refresh_per_second=4) as live:
                while not stop.is_set() and time.monotonic() - started < seconds:
                    await asyncio.sleep(0.25)
                    live.update(report.table(time.monotonic() - started, seconds))
        bot_stop.set()
        await bot
        console.print(report.table(time.monotonic() - started, seconds))
        stats = app.view.stats
        settled = stats.outcomes.get("SETTLED", 0)
        console.print(
            f"[bold]done:[/bold] {stats.requests} requests, "
            f"{app.executor.outbox.sent} quotes sent, {settled} settled on the ledger, "
            f"PnL {report.pnl_usd():+.2f} USD marked to reference prices"
        )
        if settled == 0:
            console.print("[yellow]no trade settled in this run: try a longer --seconds[/yellow]")
    os.environ.pop(KEY_ENV, None)
    return 0
