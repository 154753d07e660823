"""Grafana dashboards: generated JSON matches the code, passes the lint, and every query is valid PromQL.

The queries are also run against a real Prometheus scraping the real exporter in test_dashboards_live.py.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.dashboards import DASHBOARDS, REGENERATE, render
from tests.conftest import ROOT, require_tool
from tests.promql_lint import lint

DASHBOARD_DIR = ROOT / "grafana" / "dashboards"
PROVISIONING = ROOT / "grafana" / "provisioning"
BUILTIN_VARIABLES = {"__rate_interval", "__interval", "__range", "__range_s", "__interval_ms"}


def load_dashboards() -> dict[str, dict[str, Any]]:
    return {path.name: json.loads(path.read_text()) for path in sorted(DASHBOARD_DIR.glob("*.json"))}


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])  # collapsed rows keep their panels inside


def query_panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    return (p for p in panels(dashboard) if p["type"] != "row")


def exprs(dashboard: dict[str, Any]) -> Iterator[tuple[str, str]]:
    for panel in query_panels(dashboard):
        for target in panel["targets"]:
            yield panel["title"], target["expr"]


DASHBOARD_FILES = sorted(DASHBOARDS)


def test_committed_dashboards_match_the_generator() -> None:
    """Drift: a hand edit of the JSON, or a code change without regenerating, fails here."""
    rendered = render()
    committed = {path.name for path in DASHBOARD_DIR.glob("*.json")}
    assert committed == set(rendered), f"grafana/dashboards holds {sorted(committed)}; run {REGENERATE}"
    for name, text in rendered.items():
        assert (DASHBOARD_DIR / name).read_text() == text, f"{name} is stale: run {REGENERATE}"


def test_generator_check_mode_reports_a_stale_file(tmp_path: Path) -> None:
    from exporter.dashboards.__main__ import main

    assert main(["--out", str(tmp_path)]) == 0
    assert main(["--out", str(tmp_path), "--check"]) == 0
    stale = tmp_path / DASHBOARD_FILES[0]
    stale.write_text(stale.read_text().replace('"refresh": "30s"', '"refresh": "5s"'))
    assert main(["--out", str(tmp_path), "--check"]) == 1


@pytest.mark.parametrize("name", DASHBOARD_FILES)
def test_description_names_the_regenerate_command(name: str) -> None:
    first_key, first_value = next(iter(json.loads((DASHBOARD_DIR / name).read_text()).items()))
    assert first_key == "description" and REGENERATE in first_value


@pytest.mark.parametrize("name", DASHBOARD_FILES)
def test_every_panel_uses_the_datasource_variable(name: str) -> None:
    dashboard = load_dashboards()[name]
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    for panel in query_panels(dashboard):
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]
    for variable in variables.values():
        if variable["type"] == "query":
            assert variable["datasource"]["uid"] == "${datasource}", variable["name"]


@pytest.mark.parametrize("name", DASHBOARD_FILES)
def test_every_panel_has_a_unit_a_description_and_a_query(name: str) -> None:
    for panel in query_panels(load_dashboards()[name]):
        assert panel["fieldConfig"]["defaults"].get("unit"), f"{panel['title']}: no unit"
        assert len(panel.get("description", "")) > 20, f"{panel['title']}: no description"
        assert panel["targets"], f"{panel['title']}: no query"


@pytest.mark.parametrize("name", DASHBOARD_FILES)
def test_queries_pass_the_lint(name: str) -> None:
    findings = [f"{title}: {finding}" for title, expr in exprs(load_dashboards()[name]) for finding in lint(expr)]
    assert not findings, "\n".join(findings)


@pytest.mark.parametrize("name", DASHBOARD_FILES)
def test_every_variable_a_query_uses_is_defined(name: str) -> None:
    dashboard = load_dashboards()[name]
    defined = {v["name"] for v in dashboard["templating"]["list"]} | BUILTIN_VARIABLES
    texts = [expr for _, expr in exprs(dashboard)]
    texts += [v["definition"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    used = {m for text in texts for m in re.findall(r"\$\{?(\w+)", text)}
    assert used <= defined, f"undefined variables: {sorted(used - defined)}"


@pytest.mark.parametrize("name", DASHBOARD_FILES)
def test_layout_has_unique_ids_and_fits_the_grid(name: str) -> None:
    dashboard = load_dashboards()[name]
    ids = [p["id"] for p in panels(dashboard)]
    assert len(ids) == len(set(ids))
    titles = [p["title"] for p in query_panels(dashboard)]
    assert len(titles) == len(set(titles)), "duplicate panel titles"
    for panel in panels(dashboard):
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]


def test_dashboards_have_the_documented_variables() -> None:
    dashboards = load_dashboards()
    names = {name: {v["name"] for v in d["templating"]["list"]} for name, d in dashboards.items()}
    assert {"datasource", "instance", "gpu"} <= names["bottleneck-node.json"]
    assert {"datasource", "job", "instance", "gpu", "rank"} <= names["bottleneck-training.json"]
    assert {"datasource", "job", "instance", "gpu"} <= names["bottleneck-fleet.json"]
    assert {"datasource", "job", "instance"} <= names["bottleneck-verdicts.json"]


# The lint is only worth something if it fires: one case per rule, named after the mistake it catches.
@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("bottleneck_cpu_seconds_total", "counter bottleneck_cpu_seconds_total used outside"),
        ('sum by (cpu) (bottleneck_cpu_seconds_total{mode="idle"})', "inside sum"),
        ("rate(bottleneck_cpu_seconds_total[5m])", "use [$__rate_interval]"),
        ("rate(bottleneck_memory_available_bytes[$__rate_interval])", "not a counter"),
        ("histogram_quantile(0.9, bottleneck_train_step_duration_seconds_bucket)", "counter"),
        ("deriv(bottleneck_disk_read_bytes_total[$__rate_interval])", "inside deriv"),
    ],
)
def test_lint_catches(expr: str, expected: str) -> None:
    assert any(expected in finding for finding in lint(expr)), lint(expr)


@pytest.mark.parametrize(
    "expr",
    [
        'sum by (le) (rate(bottleneck_train_step_duration_seconds_bucket{job=~"$job"}[$__rate_interval]))',
        "a_total_ratio / on (job) group_left quantile by (job) (0.5, x)",
        'max by (alertname) (ALERTS{alertstate="firing", alertname=~"x_total"})',
        "increase(x_sum[$__rate_interval]) / increase(x_count[$__rate_interval])",
    ],
)
def test_lint_accepts(expr: str) -> None:
    assert lint(expr) == []


def substitute(expr: str) -> str:
    """Grafana's variables, replaced the way Grafana would for "All" selections."""
    replacements = {"$__rate_interval": "15s", "$__interval": "5s", "$__range": "1h"}
    for name, value in replacements.items():
        expr = expr.replace(name, value)
    return re.sub(r"\$\{?\w+\}?", ".*", expr)


def test_every_query_is_valid_promql(tmp_path: Path) -> None:
    """promtool parses each query (as a recording rule), so a syntax error fails without a Prometheus."""
    promtool = require_tool("promtool")
    rules = [
        {"record": f"dashboard:query_{i}:check", "expr": substitute(expr)}
        for i, (_, expr) in enumerate(e for d in load_dashboards().values() for e in exprs(d))
    ]
    path = tmp_path / "queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    result = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules)} rules found" in result.stdout


def test_provisioning_points_at_the_dashboards() -> None:
    providers = yaml.safe_load((PROVISIONING / "dashboards" / "bottleneck.yml").read_text())
    assert providers["apiVersion"] == 1
    (provider,) = providers["providers"]
    assert provider["type"] == "file" and provider["options"]["path"]
    datasources = yaml.safe_load((PROVISIONING / "datasources" / "prometheus.yml").read_text())
    (source,) = datasources["datasources"]
    assert source["type"] == "prometheus" and source["url"].startswith("http")


def test_every_catalogue_verdict_has_an_evidence_panel_with_its_runbook() -> None:
    """A heuristic added to the catalogue shows up on the verdict timeline without touching the dashboards."""
    from exporter.heuristics.catalogue import resolve

    dashboard = load_dashboards()["bottleneck-verdicts.json"]
    runbooks = {link["url"] for panel in query_panels(dashboard) for link in panel.get("links", [])}
    for rule in resolve().alerts:
        assert rule.runbook_url in runbooks, f"{rule.alert} has no evidence panel"
        panel = next(p for p in query_panels(dashboard) if f"({rule.alert})" in p["title"])
        assert rule.heuristic.advice in panel["description"]
    fleet = load_dashboards()["bottleneck-fleet.json"]
    selector = next(expr for title, expr in exprs(fleet) if title == "Verdicts by node and job")
    assert all(rule.alert in selector for rule in resolve().alerts)
