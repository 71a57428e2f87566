"""solver.io.notify: Apprise delivery to a real HTTP sink on 127.0.0.1:0.

What a person on the receiving end sees: one message when an incident opens, one when it
recovers, repeats dropped, flapping rate limited and folded, failed deliveries retried, a full
queue counted, and no secret from a URL in any log line.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from solver.config.alerts import AlertsConfig
from solver.core.actions import Alert
from solver.errors import ConfigError
from solver.io.alert_policy import BusWatch
from solver.io.notify import Notifier, parse_urls, redact
from tests.io.http_sink import HttpSink

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
async def sink() -> AsyncIterator[HttpSink]:
    server = await HttpSink().start()
    yield server
    await server.stop()


def fast(urls: list[str], **kwargs: object) -> Notifier:
    options: dict[str, object] = {"send_timeout_s": 5.0, "retry_delays_s": (0.05,)}
    options.update(kwargs)
    return Notifier(urls, **options)  # type: ignore[arg-type]


async def test_one_message_per_incident_and_one_on_recovery(sink: HttpSink) -> None:
    notifier = fast([sink.url("/alerts")], name="bot-1")
    notifier.start()
    try:
        notifier.alert(Alert("reconciliation", "nep141:usdc: on-chain 5 below expected"), T0)
        for i in range(20):  # the breach is re-evaluated every tick
            notifier.alert(Alert("reconciliation", f"still off ({i})"), T0)
        notifier.notify("store_error", "database is locked", at=T0)
        notifier.alert(Alert("reconciliation", "operator: accepted", resolved=True), T0)
        notifier.alert(Alert("reconciliation", "operator: accepted", resolved=True), T0)
        await notifier.drain()
        await sink.wait_for(3)
        await asyncio.sleep(0.2)  # nothing else arrives
    finally:
        await notifier.aclose()
    posted = sink.messages()
    assert [(m["title"], m["type"]) for m in posted] == [
        ("[bot-1] ALERT: reconciliation", "failure"),
        ("[bot-1] ALERT: store_error", "failure"),
        ("[bot-1] RESOLVED: reconciliation", "success"),
    ]
    assert posted[0]["message"].startswith("nep141:usdc: on-chain 5 below expected\nopened at")
    assert "operator: accepted" in posted[2]["message"]
    assert {p.path for p in sink.received} == {"/alerts"}
    assert notifier.stats.as_dict() == {
        "sent": 3,
        "failed": 0,
        "dropped": 0,
        "duplicate": 21,
        "rate_limited": 0,
    }


async def test_flapping_is_rate_limited_then_the_current_state_is_sent(sink: HttpSink) -> None:
    # burst 2, then a token every 0.5 s: the folded message arrives about half a second later.
    notifier = fast([sink.url()], burst=2, per_hour=7200)
    notifier.start()
    try:
        started = time.monotonic()
        for flap in range(5):
            notifier.notify("bus_disconnected", f"down #{flap}")
            notifier.notify("bus_disconnected", f"up #{flap}", resolved=True)
        await sink.wait_for(3, timeout_s=5)
        waited = time.monotonic() - started
        await asyncio.sleep(0.7)  # no fourth message: nothing changed since the folded one
    finally:
        await notifier.aclose()
    titles = [m["title"] for m in sink.messages()]
    assert titles == [
        "[solver] ALERT: bus_disconnected",
        "[solver] RESOLVED: bus_disconnected",
        "[solver] RESOLVED: bus_disconnected",
    ]
    last = sink.messages()[-1]["message"]
    assert last.startswith("up #4") and "8 changes since the last message" in last
    assert 0.3 < waited < 3.0
    assert notifier.stats.rate_limited == 8 and notifier.stats.sent == 3


async def test_a_failed_delivery_is_retried(sink: HttpSink) -> None:
    sink.statuses = [500, 503, 200]
    notifier = fast([sink.url()], retry_delays_s=(0.05, 0.05))
    notifier.start()
    try:
        notifier.notify("stale_data", "no price for ETH for 31s")
        await sink.wait_for(3)
        await notifier.drain()
    finally:
        await notifier.aclose()
    assert sink.answered == [500, 503, 200]
    assert [m["title"] for m in sink.messages()] == ["[solver] ALERT: stale_data"]
    assert (notifier.stats.sent, notifier.stats.failed) == (1, 0)


async def test_a_dead_destination_does_not_stop_the_others(sink: HttpSink) -> None:
    dead = await HttpSink(statuses=[500]).start()
    notifier = fast([dead.url("/dead"), sink.url("/alive")], retry_delays_s=(0.01,))
    notifier.start()
    try:
        notifier.notify("drawdown", "PnL -520 USD from peak, limit 500")
        await notifier.drain()
    finally:
        await notifier.aclose()
        await dead.stop()
    assert dead.answered == [500, 500]  # first attempt and one retry
    assert [m["title"] for m in sink.messages()] == ["[solver] ALERT: drawdown"]
    assert (notifier.stats.sent, notifier.stats.failed) == (1, 1)


async def test_notify_never_blocks_and_a_full_queue_drops(sink: HttpSink) -> None:
    sink.delay_s = 0.3  # a slow webhook
    notifier = fast([sink.url()], queue_size=2)
    notifier.start()
    try:
        for i in range(6):
            notifier.notify(f"kind_{i}", "x")
        # Decided at once, without a turn of the loop that serves the sink: nothing was
        # delivered yet (nothing waited for the network) and the four that found the queue
        # full are already dropped (nothing waited for room). Counts, not a stopwatch.
        assert sink.received == [] and notifier.stats.dropped == 4
        await notifier.drain()
    finally:
        await notifier.aclose()
    assert [m["title"] for m in sink.messages()] == [
        "[solver] ALERT: kind_0",
        "[solver] ALERT: kind_1",
    ]
    assert notifier.stats.dropped == 4


async def test_messages_queued_before_start_are_delivered(sink: HttpSink) -> None:
    notifier = fast([sink.url()])
    notifier.notify("store_error", "journal commit failed")
    notifier.start()
    try:
        await sink.wait_for(1)
    finally:
        await notifier.aclose()
    assert sink.messages()[0]["title"] == "[solver] ALERT: store_error"


async def test_bus_watch_through_the_notifier(sink: HttpSink) -> None:
    """The lead's wiring in miniature: the driver feeds BusWatch, its alerts go out."""
    watch, notifier = BusWatch(after_s=30), fast([sink.url()])
    notifier.start()
    try:
        for second, connected in [(0, False), (10, False), (31, False), (45, False), (50, True)]:
            now = T0 + timedelta(seconds=second)
            for alert in watch.up(now) if connected else watch.down(now, "relay closed"):
                notifier.alert(alert, now)
        await sink.wait_for(2)
    finally:
        await notifier.aclose()
    posted = sink.messages()
    assert [m["title"] for m in posted] == [
        "[solver] ALERT: bus_disconnected",
        "[solver] RESOLVED: bus_disconnected",
    ]
    assert posted[0]["message"].startswith("down for 31.0s: relay closed")
    assert posted[1]["message"].startswith("restored after 50.0s")


async def test_no_secret_of_a_url_reaches_the_logs(
    sink: HttpSink, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "Zk9sECRETt0ken"
    url = sink.url(f"/{secret}", auth=f"user:{secret}@") + f"?+X-Token={secret}"
    caplog.set_level(logging.DEBUG)  # root and every library at DEBUG
    config = AlertsConfig(urls_env="TEST_ALERT_URLS", retry_delays_s=(0.01,))
    notifier = Notifier.from_config(config, {"TEST_ALERT_URLS": f"{url}, json://127.0.0.1:9/x"})
    notifier.start()
    try:
        notifier.notify("store_error", "disk full")  # one fails: port 9 refuses
        await notifier.drain()
    finally:
        await notifier.aclose()
    assert sink.messages()[0]["title"] == "[solver] ALERT: store_error"
    assert sink.received[0].headers["x-token"] == secret  # it did use the secrets
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "delivering to #1 json://127.0.0.1:" in text
    assert "could not deliver" in text
    assert secret not in text


def test_from_config_reads_the_named_variable() -> None:
    config = AlertsConfig(urls_env="MY_URLS")
    notifier = Notifier.from_config(config, {"MY_URLS": "json://127.0.0.1:1/a json://h:2/b"})
    assert [d.name for d in notifier.destinations] == [
        "#1 json://127.0.0.1:1/…",
        "#2 json://h:2/…",
    ]
    assert Notifier.from_config(config, {}).destinations == []  # logged only
    off = AlertsConfig(urls_env="MY_URLS", enabled=False)
    assert Notifier.from_config(off, {"MY_URLS": "json://h/a"}).destinations == []


def test_from_config_required_and_invalid_urls() -> None:
    required = AlertsConfig(urls_env="MY_URLS", required=True)
    with pytest.raises(ConfigError, match=r"\$MY_URLS holds no Apprise URL"):
        Notifier.from_config(required, {"MY_URLS": " , "})
    with pytest.raises(ConfigError, match=r"#1 nosuchscheme://… is not a valid") as info:
        Notifier.from_config(required, {"MY_URLS": "nosuchscheme://s3cret@x"})
    assert "s3cret" not in str(info.value)


def test_config_defaults_and_validation() -> None:
    config = AlertsConfig()
    assert (config.urls_env, config.bus_down_after_s, config.burst, config.per_hour) == (
        "SOLVER_ALERT_URLS",
        60.0,
        3,
        12.0,
    )
    with pytest.raises(ValueError, match="NAME of an environment variable") as info:
        AlertsConfig(urls_env="tgram://123:abc/456")
    assert "123:abc" not in str(info.value)
    with pytest.raises(ValueError):
        AlertsConfig.model_validate({"burst": 0})
    with pytest.raises(ValueError):
        AlertsConfig.model_validate({"url": "json://x"})  # unknown key


def test_parse_urls() -> None:
    assert parse_urls(None) == [] and parse_urls("  ") == []
    assert parse_urls("json://a/b,tgram://t/c\n mailtos://u:p@h ,, ") == [
        "json://a/b",
        "tgram://t/c",
        "mailtos://u:p@h",
    ]


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("tgram://123456789:ABCsecret/987654", "tgram://…"),
        ("slack://T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazkcOXrIdevi7FQ", "slack://…"),
        ("discord://1234/abcdefsecret", "discord://…"),
        (
            "json://user:pw@hooks.example.com:8443/secret/path?-X=1",
            "json://hooks.example.com:8443/…",
        ),
        ("mailtos://me:app-password@smtp.example.com", "mailtos://smtp.example.com/…"),
        ("JSONS://hooks.example.com", "jsons://hooks.example.com/…"),
        ("not a url", "<not a URL>"),
    ],
)
def test_redact(url: str, shown: str) -> None:
    assert redact(url) == shown
