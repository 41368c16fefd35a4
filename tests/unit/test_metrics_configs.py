"""The operators' configs (configs/prometheus, configs/grafana) against what
Cairn exports (telemetry/metrics.py): the rules pass promtool's check and unit
tests, and every query of the dashboard and the rules names a metric that
exists."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from telemetry import metrics

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS = ROOT / "configs" / "prometheus"
DASHBOARD = ROOT / "configs" / "grafana" / "cairn-dashboard.json"

# A series name Cairn exports (ray_cairn_...) or one of its recording rules (cairn:...).
_NAMES = re.compile(r"\b(ray_[a-zA-Z0-9_]+|cairn:[a-zA-Z0-9_:]+)")


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.fail(
            "promtool is missing: `make test` installs it (scripts/ensure-prometheus, "
            "as root on Debian), or apt-get install prometheus"
        )
    return found


def rules() -> list[dict[str, Any]]:
    loaded = yaml.safe_load((PROMETHEUS / "cairn-rules.yml").read_text())
    return [rule for group in loaded["groups"] for rule in group["rules"]]


def recorded() -> set[str]:
    return {rule["record"] for rule in rules() if "record" in rule}


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, expr) of every query in the dashboard."""
    board = json.loads(DASHBOARD.read_text())
    found = []
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            found.append((panel["title"], target["expr"]))
    return found


def test_promtool_checks_the_rules_and_the_config() -> None:
    tool = promtool()
    for args in (["check", "rules", "cairn-rules.yml"], ["check", "config", "prometheus.yml"]):
        done = subprocess.run(
            [tool, *args], cwd=PROMETHEUS, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stdout + done.stderr


def test_promtool_unit_tests_of_the_rules_pass() -> None:
    done = subprocess.run(
        [promtool(), "test", "rules", "cairn-rules.test.yml"],
        cwd=PROMETHEUS,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_the_issue_names_is_unit_tested() -> None:
    alerts = {rule["alert"] for rule in rules() if "alert" in rule}
    tested = yaml.safe_load((PROMETHEUS / "cairn-rules.test.yml").read_text())
    fired = {
        case["alertname"]
        for test in tested["tests"]
        for case in test.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    assert alerts == fired


def test_rules_name_only_exported_metrics() -> None:
    exported, records = metrics.exported_names(), recorded()
    for rule in rules():
        names = set(_NAMES.findall(rule["expr"]))
        assert names, rule
        unknown = {n for n in names if n not in exported and n not in records}
        assert not unknown, (rule.get("record") or rule.get("alert"), unknown)


def test_every_dashboard_query_names_an_exported_metric() -> None:
    exported, records = metrics.exported_names(), recorded()
    queries = dashboard_queries()
    assert queries
    for title, expr in queries:
        names = set(_NAMES.findall(expr))
        assert names, (title, expr)
        unknown = {n for n in names if n not in exported and n not in records}
        assert not unknown, (title, unknown)


def test_the_dashboard_shows_every_family() -> None:
    shown = {n for _, expr in dashboard_queries() for n in _NAMES.findall(expr)}
    for family in metrics.CATALOG:
        forms = {family.exported, *(family.exported + s for s in ("_bucket", "_sum", "_count"))}
        assert forms & shown, f"{family.name} is on no panel"


def test_the_dashboard_is_importable_json() -> None:
    """What Grafana's import needs: a title and uid, a Prometheus data source
    variable every query uses, panels with unique ids and grid positions,
    targets with reference ids."""
    board = json.loads(DASHBOARD.read_text())
    assert board["title"] and board["uid"] and isinstance(board["schemaVersion"], int)
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    for panel in board["panels"]:
        assert set(panel["gridPos"]) == {"h", "w", "x", "y"}
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        refs = [t["refId"] for t in panel["targets"]]
        assert refs and len(refs) == len(set(refs))
