"""solver.io.metrics: the series, their values, the cached children, the gauge snapshot."""

from __future__ import annotations

import math
from typing import Any

import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from solver.io.metrics import LATENCY_BUCKETS, Metrics, MetricsSnapshot

USDC = "nep141:usdc.sandbox"
WNEAR = "nep141:wrap.sandbox"


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
    m.inc_quote()
    m.inc_quote()
    m.inc_skip("no_price")
    m.inc_skip("no_price")
    m.inc_skip("paused")
    m.inc_outcome("WON")
    m.inc_outcome("SETTLED")
    m.inc_outcome("WON")
    m.inc_bad_frame("invalid_json")
    m.inc_bad_frame("too_large", 3)

    assert value(m, "solver_quote_requests_total") == 5
    assert value(m, "solver_quotes_total") == 2
    assert value(m, "solver_skips_total", reason="no_price") == 2
    assert value(m, "solver_skips_total", reason="paused") == 1
    assert value(m, "solver_quote_outcomes_total", state="WON") == 2
    assert value(m, "solver_quote_outcomes_total", state="SETTLED") == 1
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
    assert value(a, "solver_quote_requests_total") == 1
    assert value(b, "solver_quote_requests_total") == 0
    assert REGISTRY.get_sample_value("solver_quote_requests_total") is None
    assert "process_cpu_seconds_total" not in a.render().decode()


def test_hot_path_reuses_labelled_children(monkeypatch: pytest.MonkeyPatch) -> None:
    m = Metrics()
    m.inc_skip("rate_limited")
    m.inc_outcome("LOST")
    m.inc_bad_frame("not_an_object")

    def no_labels(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(".labels() called on the hot path")

    for family in (m._skips, m._outcomes, m._bad_frames):
        monkeypatch.setattr(family, "labels", no_labels)
    m.inc_skip("rate_limited")
    m.inc_outcome("LOST")
    m.inc_bad_frame("not_an_object")
    assert value(m, "solver_skips_total", reason="rate_limited") == 2
    assert value(m, "solver_quote_outcomes_total", state="LOST") == 2


def test_preset_creates_zero_series() -> None:
    m = Metrics()
    m.preset(skip_reasons=["no_salt"], states=["WON", "LOST"])
    assert value(m, "solver_skips_total", reason="no_salt") == 0
    assert value(m, "solver_quote_outcomes_total", state="LOST") == 0
    m.inc_skip("no_salt")
    assert value(m, "solver_skips_total", reason="no_salt") == 1


def test_sync_bad_frames_adds_only_the_growth() -> None:
    m = Metrics()
    m.sync_bad_frames({"invalid_json": 2})
    m.sync_bad_frames({"invalid_json": 2, "too_large": 1})
    m.sync_bad_frames({"invalid_json": 5, "too_large": 1})
    assert value(m, "solver_bad_frames_total", reason="invalid_json") == 5
    assert value(m, "solver_bad_frames_total", reason="too_large") == 1


def test_gauges_before_any_snapshot() -> None:
    m = Metrics()
    assert math.isnan(value(m, "solver_pnl_usd"))
    assert value(m, "solver_connected") == 0
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
            pnl_usd=-3.25,
            mismatch={USDC: -1},
            connected=True,
            paused=True,
            open_quotes=7,
        )
    )
    assert value(m, "solver_free_inventory", asset=USDC) == 2.5
    assert value(m, "solver_free_inventory", asset=WNEAR) == 1.5
    assert value(m, "solver_reserved_inventory", asset=USDC) == 1.0
    assert value(m, "solver_reserved_inventory", asset=WNEAR) == 0
    assert value(m, "solver_reconciliation_mismatch", asset=USDC) == pytest.approx(-1e-6)
    assert value(m, "solver_pnl_usd") == -3.25
    assert value(m, "solver_connected") == 1
    assert value(m, "solver_state", state="PAUSED") == 1
    assert value(m, "solver_state", state="RUNNING") == 0
    assert value(m, "solver_open_quotes") == 7


def test_refresh_gauges_from_a_mapping_follows_the_assets() -> None:
    m = Metrics()
    m.refresh_gauges({"free": {USDC: 5, WNEAR: 7}, "mismatch": {WNEAR: 3}, "pnl_usd": 1.0})
    assert value(m, "solver_free_inventory", asset=WNEAR) == 7  # no decimals: smallest units
    m.refresh_gauges({"free": {USDC: 6}, "connected": True})
    series = samples(m)
    assert series[("solver_free_inventory", frozenset({("asset", USDC)}))] == 6
    assert ("solver_free_inventory", frozenset({("asset", WNEAR)})) not in series
    assert ("solver_reconciliation_mismatch", frozenset({("asset", WNEAR)})) not in series
    assert math.isnan(value(m, "solver_pnl_usd"))  # unknown again
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
        "# TYPE solver_pnl_usd gauge",
        "# TYPE solver_connected gauge",
        "# TYPE solver_state gauge",
        "# TYPE solver_open_quotes gauge",
        'solver_skips_total{reason="no_price"} 1.0',
    ):
        assert line in text
