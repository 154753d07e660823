"""Grafana dashboards: generated JSON matches the code, passes the lint, every query is valid PromQL, and
every query runs against a real Prometheus scraping the real exporter (with the committed rules), the core
panels returning data.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.dashboards import DASHBOARDS, REGENERATE, render
from tests.conftest import FIXTURES, ROOT, ExporterProcess, require_tool
from tests.promql_lint import lint
from tests.promstack import Prometheus, Target, wait_until

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
    assert {"datasource", "training_job", "instance", "gpu", "rank"} <= names["bottleneck-training.json"]
    assert {"datasource", "training_job", "instance", "gpu"} <= names["bottleneck-fleet.json"]
    assert {"datasource", "training_job", "instance"} <= names["bottleneck-verdicts.json"]


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
        'sum by (le) (rate(bottleneck_train_step_duration_seconds_bucket{training_job=~"$training_job"}'
        "[$__rate_interval]))",
        "a_total_ratio / on (training_job) group_left quantile by (training_job) (0.5, x)",
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
        assert rule.advice in panel["description"] and "${" not in panel["description"].replace("${datasource}", "")
    fleet = load_dashboards()["bottleneck-fleet.json"]
    selector = next(expr for title, expr in exprs(fleet) if title == "Verdicts by node and job")
    assert all(rule.alert in selector for rule in resolve().alerts)


# ------------------------------------------------------------------------------------------------ live
# A real exporter (replaying a recorded 4x H100 profile, with a real hooked PyTorch job pushing to it), scraped
# every second by a real Prometheus that evaluates the committed rules; every dashboard query runs against it.

RULE_FILES = [ROOT / "prometheus" / "recording-rules.yml", ROOT / "alerts" / "alert-rules.yml"]
GPU_PROFILE = FIXTURES / "gpu-profiles" / "hopper-4x-h100.yaml"
LIVE_JOB = "dashboards-live"
LIVE_NODE = "gpu-node-1"

# The panels that must show data on a node running one input-bound job (the rest may be legitimately empty:
# no InfiniBand, no swap activity, no firing verdict within the test's minute).
CORE_PANELS = {
    "bottleneck-fleet.json": ["Fleet GPU utilization", "GPUs up / down", "GPU utilization per node",
                              "Training jobs reporting", "Data-wait share per job", "Samples per second per job",
                              "CPU busy per node"],
    "bottleneck-node.json": ["GPUs up", "GPU utilization", "GPU-Util samples (sub-second)", "GPU memory used",
                             "SM activity and tensor activity (GPM)", "Temperature vs slowdown threshold",
                             "Power draw vs limit", "PCIe link", "Busy per core", "CPU time by mode",
                             "Load per core", "CPU by thread role", "Busiest thread per role",
                             "Memory available", "Pressure stall (PSI)", "Disk throughput", "Network throughput"],
    "bottleneck-training.json": ["Step time by phase, per rank", "Data-wait share (job)",
                                 "Data-wait share per rank", "Step time p50 / p90 per rank", "Samples per second",
                                 "Steps per second", "Step time relative to the job median", "Ranks",
                                 "DataLoader settings", "Node GPU utilization"],
    "bottleneck-verdicts.json": ["input-bound (data loading) (BottleneckInputBound)",
                                 "GPU waits in bursts (sawtooth utilisation) (BottleneckGpuSawtooth)",
                                 "CPU saturated (BottleneckCpuSaturated)"],
}


def live_substitute(expr: str) -> str:
    values = {"__rate_interval": "10s", "__interval": "1s", "__range": "1m", "instance": LIVE_NODE,
              "training_job": LIVE_JOB, "rank": ".*", "gpu": ".*"}
    return re.sub(r"\$\{?(\w+)\}?", lambda m: values[m.group(1)], expr)


@pytest.fixture(scope="module")
def live_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    workdir = tmp_path_factory.mktemp("dashboards-live")
    socket_path = workdir / "push.sock"
    exporter = ExporterProcess([f"--collector.gpu.profile={GPU_PROFILE}", f"--push.socket={socket_path}"])
    trainer: subprocess.Popen[bytes] | None = None
    prometheus = Prometheus(workdir, [Target(f"127.0.0.1:{exporter.port}", LIVE_NODE)], RULE_FILES)
    try:
        exporter.wait_ready()
        env = {**os.environ, "BOTTLENECK_PUSH_ADDRESS": f"unix://{socket_path}", "BOTTLENECK_JOB": LIVE_JOB,
               "BOTTLENECK_PUSH_INTERVAL": "0.5"}
        trainer = subprocess.Popen([sys.executable, str(ROOT / "tests" / "hook_trainer.py"), "--dataset", "slow",
                                    "--workers", "0", "--stop-file", str(workdir / "stop")],
                                   env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        prometheus.start()
        # Enough for rate() over 10s windows, for the rules' 5m windows to hold two samples, and for the
        # training job's counters to move between scrapes.
        steps = f'rate(bottleneck_train_steps_total{{training_job="{LIVE_JOB}"}}[10s]) > 0'
        wait_until(lambda: prometheus.query(steps),
                   90, "the hooked training job's steps in Prometheus")
        wait_until(lambda: prometheus.query("job_rank:bottleneck_train_data_wait:ratio_rate5m"), 30,
                   "the recording rules to evaluate")
        # The busiest-thread ratio needs two scrapes of the trainer's threads after the hook registered it.
        wait_until(lambda: prometheus.query('bottleneck_training_busiest_thread_cpu_ratio{process="hook_trainer.py"}'),
                   30, "the trainer's threads in the training collector")
        yield prometheus
    finally:
        (workdir / "stop").touch()
        if trainer is not None:
            try:
                trainer.wait(timeout=30)
            except subprocess.TimeoutExpired:
                trainer.kill()
        prometheus.stop()
        exporter.stop()


@pytest.mark.tools
@pytest.mark.torch
@pytest.mark.parametrize("name", DASHBOARD_FILES)
def test_every_query_runs_and_core_panels_show_data(name: str, live_prometheus: Prometheus) -> None:
    dashboard = load_dashboards()[name]
    empty = []
    for panel in query_panels(dashboard):
        results = [live_prometheus.query(live_substitute(target["expr"])) for target in panel["targets"]]
        if not any(results):
            empty.append(panel["title"])
    missing_core = [title for title in CORE_PANELS[name] if title in empty]
    assert not missing_core, f"core panels without data: {missing_core}"
    titles = {p["title"] for p in query_panels(dashboard)}
    assert set(CORE_PANELS[name]) <= titles, f"core panels renamed: {set(CORE_PANELS[name]) - titles}"


@pytest.mark.tools
@pytest.mark.parametrize("name", DASHBOARD_FILES)
def test_template_variables_resolve(name: str, live_prometheus: Prometheus) -> None:
    for variable in load_dashboards()[name]["templating"]["list"]:
        if variable["type"] != "query":
            continue
        match = re.fullmatch(r"label_values\((.+), (\w+)\)", variable["definition"])
        assert match, variable["definition"]
        values = live_prometheus.label_values(match.group(2), live_substitute(match.group(1)))
        assert values, f"${variable['name']} has no values: {variable['definition']}"
