"""solver.io.metrics: the series, their values, the cached children, the gauge snapshot."""

from __future__ import annotations

import math
from typing import Any

import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from solver.io.metrics import LATENCY_BUCKETS, Metrics
from solver.io.metrics_gauges import MetricsSnapshot
from solver.io.metrics_series import OTHER

USDC = "nep141:usdc.sandbox"
WNEAR = "nep141:wrap.sandbox"
ETH = "nep141:eth.sandbox"
SYMBOLS = {USDC: "USDC", WNEAR: "wNEAR", ETH: "ETH"}


def samples(metrics: Metrics) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of the exposition text, keyed by (name, labels)."""
    text = metrics.render().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(metrics: Metrics, name: str, **labels: str) -> float:
    return samples(metrics)[(name, frozenset(labels.items()))]


def test_counters_after_observations() -> None:
    m = Metrics()
    for _ in range(5):
        m.inc_request()
    m.count_quotes_from({OTHER: 2})  # the executor's count of answers sent
    m.inc_skip("no_price")
    m.inc_skip("no_price")
    m.inc_skip("paused")
    m.inc_outcome("WON")
    m.inc_outcome("SETTLED")
    m.inc_outcome("WON")
    m.inc_bad_frame("invalid_json")
    m.inc_bad_frame("too_large", 3)

    # No pair given: counted under pair="other".
    assert value(m, "solver_quote_requests_total", pair=OTHER) == 5
    assert value(m, "solver_quotes_total", pair=OTHER) == 2
    assert value(m, "solver_skips_total", pair=OTHER, reason="no_price") == 2
    assert value(m, "solver_skips_total", pair=OTHER, reason="paused") == 1
    assert value(m, "solver_quote_outcomes_total", pair=OTHER, state="WON") == 2
    assert value(m, "solver_quote_outcomes_total", pair=OTHER, state="SETTLED") == 1
    assert value(m, "solver_bad_frames_total", reason="invalid_json") == 1
    assert value(m, "solver_bad_frames_total", reason="too_large") == 3


def test_histograms_bucket_the_latencies() -> None:
    m = Metrics()
    for seconds in (40e-6, 60e-6, 300e-6, 0.02, 0.2):
        m.observe_decision(seconds)
    m.observe_response(0.0009)

    def bucket(name: str, le: str) -> float:
        return value(m, f"{name}_bucket", le=le)

    assert bucket("solver_decision_seconds", "5e-05") == 1
    assert bucket("solver_decision_seconds", "7.5e-05") == 2
    assert bucket("solver_decision_seconds", "0.0005") == 3
    assert bucket("solver_decision_seconds", "0.025") == 4
    assert bucket("solver_decision_seconds", "+Inf") == 5
    assert value(m, "solver_decision_seconds_count") == 5
    assert value(m, "solver_decision_seconds_sum") == pytest.approx(0.22040)
    assert bucket("solver_response_seconds", "0.00075") == 0
    assert bucket("solver_response_seconds", "0.001") == 1
    assert value(m, "solver_response_seconds_count") == 1


def test_buckets_cover_50us_to_50ms() -> None:
    assert tuple(sorted(LATENCY_BUCKETS)) == LATENCY_BUCKETS
    assert LATENCY_BUCKETS[0] <= 50e-6
    assert LATENCY_BUCKETS[-1] >= 50e-3
    assert sum(1 for b in LATENCY_BUCKETS if 50e-6 <= b <= 1e-3) >= 6  # dense where it matters


def test_own_registry_never_the_global_one() -> None:
    a, b = Metrics(), Metrics()  # two in one process: no duplicate-series error
    a.inc_request()
    assert value(a, "solver_quote_requests_total", pair=OTHER) == 1
    assert value(b, "solver_quote_requests_total", pair=OTHER) == 0
    assert REGISTRY.get_sample_value("solver_quote_requests_total", {"pair": OTHER}) is None
    assert "process_cpu_seconds_total" not in a.render().decode()


def test_hot_path_reuses_labelled_children(monkeypatch: pytest.MonkeyPatch) -> None:
    m = Metrics(pairs=[(WNEAR, USDC)], symbols=SYMBOLS)
    pair = m.pair_label(USDC, WNEAR)
    m.inc_skip("rate_limited", pair)
    m.inc_outcome("LOST", pair)
    m.inc_bad_frame("not_an_object")

    def no_labels(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(".labels() called on the hot path")

    monkeypatch.setattr(m._bad_frames, "labels", no_labels)  # the others are plain counts
    m.inc_skip("rate_limited", pair)
    m.inc_outcome("LOST", pair)
    m.inc_bad_frame("not_an_object")
    m.inc_request(pair)
    m.inc_request("BTC/USDC")  # clamped to "other", also preset
    m.add_volume(10.0, pair)
    assert value(m, "solver_skips_total", pair="wNEAR/USDC", reason="rate_limited") == 2
    assert value(m, "solver_quote_outcomes_total", pair="wNEAR/USDC", state="LOST") == 2
    assert value(m, "solver_quote_requests_total", pair="other") == 1
    assert value(m, "solver_volume_usd_total", pair="wNEAR/USDC") == 10.0


def test_preset_creates_zero_series() -> None:
    m = Metrics(pairs=[(ETH, USDC)], symbols=SYMBOLS)
    m.preset(skip_reasons=["no_salt"], states=["WON", "LOST"])
    for pair in ("ETH/USDC", OTHER):
        assert value(m, "solver_skips_total", pair=pair, reason="no_salt") == 0
        assert value(m, "solver_quote_outcomes_total", pair=pair, state="LOST") == 0
        assert value(m, "solver_quote_requests_total", pair=pair) == 0
    m.inc_skip("no_salt", "ETH/USDC")
    assert value(m, "solver_skips_total", pair="ETH/USDC", reason="no_salt") == 1


def test_sync_bad_frames_adds_only_the_growth() -> None:
    m = Metrics()
    m.sync_bad_frames({"invalid_json": 2})
    m.sync_bad_frames({"invalid_json": 2, "too_large": 1})
    m.sync_bad_frames({"invalid_json": 5, "too_large": 1})
    assert value(m, "solver_bad_frames_total", reason="invalid_json") == 5
    assert value(m, "solver_bad_frames_total", reason="too_large") == 1


def test_gauges_before_any_snapshot() -> None:
    m = Metrics()
    assert math.isnan(value(m, "solver_pnl_marked_usd"))
    assert math.isnan(value(m, "solver_pnl_realized_usd"))
    assert value(m, "solver_connected") == 0
    assert value(m, "solver_mode", mode="LIVE") == 1
    assert value(m, "solver_mode", mode="SHADOW") == 0
    assert value(m, "solver_state", state="RUNNING") == 1
    assert value(m, "solver_state", state="PAUSED") == 0
    assert value(m, "solver_open_quotes") == 0


def test_refresh_gauges_from_a_dataclass() -> None:
    m = Metrics()
    m.refresh_gauges(
        MetricsSnapshot(
            free={USDC: 2_500_000, WNEAR: 10**24 + 5 * 10**23},
            reserved={USDC: 1_000_000, WNEAR: 0},
            decimals={USDC: 6, WNEAR: 24},
            pnl_marked_usd=-3.25,
            pnl_realized_usd=1.5,
            mismatch={USDC: -1},
            connected=True,
            paused=True,
            shadow=True,
            open_quotes=7,
            query_tables_behind=42,
            store_bytes=123_456_789,
            store_disk_free_bytes=2**40,
        )
    )
    assert value(m, "solver_free_inventory", asset=USDC) == 2.5
    assert value(m, "solver_free_inventory", asset=WNEAR) == 1.5
    assert value(m, "solver_reserved_inventory", asset=USDC) == 1.0
    assert value(m, "solver_reserved_inventory", asset=WNEAR) == 0
    assert value(m, "solver_reconciliation_mismatch", asset=USDC) == pytest.approx(-1e-6)
    assert value(m, "solver_pnl_marked_usd") == -3.25
    assert value(m, "solver_pnl_realized_usd") == 1.5
    assert value(m, "solver_mode", mode="SHADOW") == 1
    assert value(m, "solver_mode", mode="LIVE") == 0
    assert value(m, "solver_connected") == 1
    assert value(m, "solver_state", state="PAUSED") == 1
    assert value(m, "solver_state", state="RUNNING") == 0
    assert value(m, "solver_open_quotes") == 7
    assert value(m, "solver_query_tables_behind") == 42
    assert value(m, "solver_store_bytes") == 123_456_789
    assert value(m, "solver_store_disk_free_bytes") == 2**40


def test_refresh_gauges_from_a_mapping_follows_the_assets() -> None:
    m = Metrics()
    m.refresh_gauges({"free": {USDC: 5, WNEAR: 7}, "mismatch": {WNEAR: 3}, "pnl_marked_usd": 1.0})
    assert value(m, "solver_free_inventory", asset=WNEAR) == 7  # no decimals: smallest units
    m.refresh_gauges({"free": {USDC: 6}, "connected": True})
    series = samples(m)
    assert series[("solver_free_inventory", frozenset({("asset", USDC)}))] == 6
    assert ("solver_free_inventory", frozenset({("asset", WNEAR)})) not in series
    assert ("solver_reconciliation_mismatch", frozenset({("asset", WNEAR)})) not in series
    assert math.isnan(value(m, "solver_pnl_marked_usd"))  # unknown again
    assert math.isnan(value(m, "solver_store_disk_free_bytes"))  # unknown: no alert on it
    assert value(m, "solver_state", state="RUNNING") == 1


def test_refresh_gauges_rejects_unknown_keys() -> None:
    with pytest.raises(ValueError, match="pnl"):
        Metrics().refresh_gauges({"pnl": 1.0})


def test_exposition_text_names_and_types() -> None:
    m = Metrics()
    m.inc_skip("no_price")
    text = m.render().decode()
    for line in (
        "# TYPE solver_quote_requests_total counter",
        "# TYPE solver_skips_total counter",
        "# TYPE solver_decision_seconds histogram",
        "# TYPE solver_response_seconds histogram",
        "# TYPE solver_free_inventory gauge",
        "# TYPE solver_reserved_inventory gauge",
        "# TYPE solver_reconciliation_mismatch gauge",
        "# TYPE solver_pnl_marked_usd gauge",
        "# TYPE solver_pnl_realized_usd gauge",
        "# TYPE solver_mode gauge",
        "# TYPE solver_volume_usd_total counter",
        "# TYPE solver_notifications_total counter",
        "# TYPE solver_connected gauge",
        "# TYPE solver_state gauge",
        "# TYPE solver_open_quotes gauge",
        'solver_skips_total{pair="other",reason="no_price"} 1.0',
    ):
        assert line in text
    assert "solver_pnl_usd" not in text  # the old, misleading name is gone


def test_pair_labels_for_both_directions_and_other_for_the_rest() -> None:
    m = Metrics(pairs=[(WNEAR, USDC), (ETH, USDC)], symbols=SYMBOLS)
    assert m.pair_label(WNEAR, USDC) == m.pair_label(USDC, WNEAR) == "wNEAR/USDC"
    assert m.pair_label(USDC, ETH) == "ETH/USDC"
    assert m.pair_label(WNEAR, ETH) == OTHER  # both assets known, pair not configured
    assert m.pair_label("nep141:evil.near", USDC) == OTHER
    assert m.pairs == ("ETH/USDC", "wNEAR/USDC", OTHER)
    assert Metrics(pairs=[(WNEAR, USDC)]).pair_label(USDC, WNEAR) == f"{WNEAR}/{USDC}"


def test_pair_label_cardinality_is_bounded() -> None:
    """Whatever pair strings callers pass, only configured pairs and "other" appear."""
    m = Metrics(pairs=[(WNEAR, USDC)], symbols=SYMBOLS)
    pair = m.pair_label(WNEAR, USDC)
    m.inc_request(pair)
    m.inc_skip("no_price", pair)
    m.inc_outcome("WON", pair)
    m.add_volume(12.5, pair)
    for i in range(50):
        junk = f"nep141:spam{i}.near/{USDC}"
        m.inc_request(junk)
        m.inc_skip("unknown_pair", junk)
        m.inc_outcome("LOST", junk)
        m.add_volume(1.0, junk)
    m.count_quotes_from({pair: 1, f"nep141:spam.near/{USDC}": 1})  # shown under "other"
    pairs_seen = {dict(labels)["pair"] for (_, labels) in samples(m) if "pair" in dict(labels)}
    assert pairs_seen == {"wNEAR/USDC", OTHER}
    assert value(m, "solver_quote_requests_total", pair="wNEAR/USDC") == 1
    assert value(m, "solver_quote_requests_total", pair=OTHER) == 50
    assert value(m, "solver_quotes_total", pair="wNEAR/USDC") == 1
    assert value(m, "solver_quotes_total", pair=OTHER) == 1
    assert value(m, "solver_skips_total", pair=OTHER, reason="unknown_pair") == 50
    assert value(m, "solver_quote_outcomes_total", pair="wNEAR/USDC", state="WON") == 1
    assert value(m, "solver_volume_usd_total", pair="wNEAR/USDC") == 12.5
    assert value(m, "solver_volume_usd_total", pair=OTHER) == 50.0


def test_volume_ignores_unknown_amounts() -> None:
    m = Metrics(pairs=[(ETH, USDC)], symbols=SYMBOLS)
    for usd in (math.nan, math.inf, -5.0, 0.0):
        m.add_volume(usd, "ETH/USDC")
    assert value(m, "solver_volume_usd_total", pair="ETH/USDC") == 0


def test_sync_notifications_follows_totals_and_ignores_unknown_results() -> None:
    m = Metrics()
    m.sync_notifications({"sent": 2, "failed": 1})
    m.sync_notifications({"sent": 5, "failed": 1, "dropped": 3, "bogus": 9})
    assert value(m, "solver_notifications_total", result="sent") == 5
    assert value(m, "solver_notifications_total", result="failed") == 1
    assert value(m, "solver_notifications_total", result="dropped") == 3
    assert value(m, "solver_notifications_total", result="rate_limited") == 0
    assert ("solver_notifications_total", frozenset({("result", "bogus")})) not in samples(m)


def test_outcomes_and_volume_follow_the_desks_per_pair_totals() -> None:
    """The runtime counts outcomes and volume from the desk's cumulative per-pair totals; the
    totals replayed at start are a baseline, not new events."""
    m = Metrics(pairs=[("wrap", "usdc")], symbols={"wrap": "wNEAR", "usdc": "USDC"})
    m.sync_outcomes({("wNEAR/USDC", "WON"): 5}, baseline=True)
    m.sync_volume({"wNEAR/USDC": 1000.0}, baseline=True)
    m.sync_outcomes({("wNEAR/USDC", "WON"): 7, ("wNEAR/USDC", "SETTLED"): 1, ("X/Y", "LOST"): 2})
    m.sync_volume({"wNEAR/USDC": 1012.5})
    m.sync_outcomes({("wNEAR/USDC", "WON"): 7})  # nothing grew: nothing counted
    text = m.render().decode()
    assert 'solver_quote_outcomes_total{pair="wNEAR/USDC",state="WON"} 2.0' in text
    assert 'solver_quote_outcomes_total{pair="wNEAR/USDC",state="SETTLED"} 1.0' in text
    assert 'solver_quote_outcomes_total{pair="other",state="LOST"} 2.0' in text  # clamped
    assert 'solver_volume_usd_total{pair="wNEAR/USDC"} 12.5' in text
