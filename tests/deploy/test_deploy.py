"""deploy/: the Grafana dashboard and the Prometheus rules query only series the bot exports,
with labels it sets; the rules are valid (promtool, when installed) and behave as designed
(promtool unit tests); docs/operations.md explains every alert."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from solver.io.metrics import Metrics
from solver.io.metrics_gauges import MetricsSnapshot

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "deploy" / "grafana" / "solver.json"
RULES = REPO / "deploy" / "prometheus" / "alerts.yml"
RULES_TEST = REPO / "deploy" / "prometheus" / "alerts_test.yml"
OPERATIONS = REPO / "docs" / "operations.md"

SCRAPE_LABELS = {"instance", "job"}
"""Labels Prometheus adds to every scraped series."""
SELECTOR = re.compile(r"\b(solver_[a-z_]+)\s*(\{[^}]*\})?")
LABEL_MATCHER = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")


def exported() -> dict[str, set[str]]:
    """Every series name the bot exposes, with its label names (every label set exercised)."""
    m = Metrics(pairs=[("a", "b")])
    m.inc_skip("no_price")
    m.inc_outcome("WON")
    m.inc_bad_frame("invalid_json")
    m.observe_decision(1e-4)
    m.observe_response(1e-4)
    m.refresh_gauges(MetricsSnapshot(free={"a": 1}, reserved={"a": 1}, mismatch={"a": 1}))
    series: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(m.render().decode()):
        for sample in family.samples:
            series.setdefault(sample.name, set()).update(sample.labels)
    return series


def check_queries(exprs: list[str]) -> list[str]:
    """Problems: unknown solver_* names, or label matchers the series does not carry."""
    series = exported()
    problems = []
    for expr in exprs:
        found = SELECTOR.findall(expr)
        for name, matchers in found:
            if name not in series:
                problems.append(f"{name} is not exported (in {expr!r})")
                continue
            for label in LABEL_MATCHER.findall(matchers or ""):
                if label not in series[name] | SCRAPE_LABELS:
                    problems.append(f"{name} has no label {label!r} (in {expr!r})")
    return problems


def dashboard() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return doc


def dashboard_exprs(doc: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in doc["panels"] for t in p.get("targets", [])]


def rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return [rule for group in doc["groups"] for rule in group["rules"]]


# ------------------------------------------------------------------------------ the checker


def test_the_query_checker_catches_typos_and_wrong_labels() -> None:
    assert check_queries(['rate(solver_quotes_total{pair="x",job="solver"}[5m])']) == []
    assert check_queries(["solver_pnl_usd"]) == [
        "solver_pnl_usd is not exported (in 'solver_pnl_usd')"
    ]
    assert check_queries(['solver_quotes_total{reason="x"}'])  # quotes have no reason label
    assert check_queries(["solver_decision_seconds_bucket{le='0.001'}"]) == []


# ------------------------------------------------------------------------------ Grafana


def test_dashboard_queries_only_exported_series() -> None:
    doc = dashboard()
    exprs = dashboard_exprs(doc)
    assert len(exprs) >= 15
    assert check_queries(exprs) == []


def test_dashboard_covers_the_bots_metrics() -> None:
    text = " ".join(dashboard_exprs(dashboard()))
    for name in (
        "solver_quote_requests_total",
        "solver_quotes_total",
        "solver_skips_total",
        "solver_quote_outcomes_total",
        "solver_volume_usd_total",
        "solver_decision_seconds_bucket",
        "solver_response_seconds_bucket",
        "solver_free_inventory",
        "solver_reserved_inventory",
        "solver_pnl_marked_usd",
        "solver_pnl_realized_usd",
        "solver_reconciliation_mismatch",
        "solver_connected",
        "solver_state",
        "solver_mode",
        "solver_open_quotes",
        "solver_query_tables_behind",
        "solver_store_bytes",
        "solver_store_disk_free_bytes",
        "solver_notifications_total",
    ):
        assert name in text, f"no panel shows {name}"


def test_dashboard_is_importable() -> None:
    doc = dashboard()
    assert doc["uid"] and doc["title"] and doc["schemaVersion"] >= 36
    assert [i["name"] for i in doc["__inputs"]] == ["DS_PROMETHEUS"]
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids))
    for panel in doc["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${DS_PROMETHEUS}", panel["title"]
            assert panel["targets"], panel["title"]
            assert all('instance=~"$instance"' in t["expr"] for t in panel["targets"])
    names = [v["name"] for v in doc["templating"]["list"]]
    assert names == ["instance"]


# ------------------------------------------------------------------------------ Prometheus


def test_rules_have_the_prometheus_shape() -> None:
    doc = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    assert isinstance(doc, dict) and set(doc) == {"groups"}
    for group in doc["groups"]:
        assert isinstance(group["name"], str) and group["rules"]
    names = []
    for rule in rules():
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule
        names.append(rule["alert"])
        assert isinstance(rule["expr"], str) and rule["expr"].strip()
        assert re.fullmatch(r"\d+[smhd]", str(rule.get("for", "0s"))), rule["alert"]
        assert rule["labels"]["severity"] in {"critical", "warning"}
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
    assert len(names) == len(set(names))
    for wanted in (
        "SolverDown",
        "SolverDisconnected",
        "SolverPaused",
        "SolverReconciliationMismatch",
        "SolverNoQuotes",
        "SolverLatencyHigh",
        "SolverDrawdown",
    ):
        assert wanted in names


def test_rules_query_only_exported_series() -> None:
    assert check_queries([rule["expr"] for rule in rules()]) == []


def test_operations_doc_explains_every_alert() -> None:
    text = OPERATIONS.read_text(encoding="utf-8")
    missing = [r["alert"] for r in rules() if f"`{r['alert']}`" not in text]
    assert missing == []


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        reason = "promtool not installed (Debian: apt-get install prometheus)"
        print(f"SKIP: {reason}")
        pytest.skip(reason)
    return found


def test_promtool_check_rules() -> None:
    run = subprocess.run(
        [promtool(), "check", "rules", str(RULES)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stdout + run.stderr


def test_promtool_rule_unit_tests() -> None:
    run = subprocess.run(
        [promtool(), "test", "rules", str(RULES_TEST)],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=RULES_TEST.parent,
    )
    assert run.returncode == 0, run.stdout + run.stderr
