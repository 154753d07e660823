"""Grafana dashboards, one set per rule bundle: generated JSON matches the code, passes the lint, every query is
valid PromQL, a panel a bundle cannot feed is a note naming the source it needs, and every query runs against a
real Prometheus fed the bundle's way (our exporter under its preset, Debian's node_exporter, the recorded
dcgm-exporter scrape), with the bundle's rules, the core panels returning data.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from bottleneck_exporter.dashboards.files import DASHBOARDS, REGENERATE, bundle_dir, render, render_all
from bottleneck_exporter.heuristics import generate
from bottleneck_exporter.heuristics.catalogue import resolve
from bottleneck_exporter.heuristics.sources import BUNDLES, DEFAULT_BUNDLE
from tests.conftest import DCGM_FIXTURE, FIXTURES, ROOT, ExporterProcess, require_tool, wait_until
from tests.promql_lint import lint
from tests.promstack import RULE_INTERVAL, Process, Prometheus, Target, start_node_exporter, static_target

DASHBOARD_DIR = ROOT / "grafana" / "dashboards"
PROVISIONING = ROOT / "grafana" / "provisioning"
BUILTIN_VARIABLES = {"__rate_interval", "__interval", "__range", "__range_s", "__interval_ms"}
# Every committed dashboard of every bundle, relative to the repository.
ALL_FILES = sorted(str(path) for path in render_all())


def load(path: str | PurePosixPath) -> dict[str, Any]:
    return dict(json.loads((ROOT / path).read_text()))


def load_dashboards(bundle: str = DEFAULT_BUNDLE) -> dict[str, dict[str, Any]]:
    return {name: load(bundle_dir(bundle) / name) for name in DASHBOARDS}


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])  # collapsed rows keep their panels inside


def query_panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    return (p for p in panels(dashboard) if p["type"] not in ("row", "text"))


def notes(dashboard: dict[str, Any]) -> dict[str, str]:
    """Title → text of the panels a bundle cannot feed."""
    return {p["title"]: p["options"]["content"] for p in panels(dashboard) if p["type"] == "text"}


def exprs(dashboard: dict[str, Any]) -> Iterator[tuple[str, str]]:
    for panel in query_panels(dashboard):
        for target in panel["targets"]:
            yield panel["title"], target["expr"]


DASHBOARD_FILES = sorted(DASHBOARDS)


def test_committed_dashboards_match_the_generator() -> None:
    """Drift: a hand edit of the JSON, or a code change without regenerating, fails here; so does a stray file."""
    rendered = render_all()
    committed = {str(path.relative_to(ROOT)) for path in [*DASHBOARD_DIR.glob("*.json"),
                                                          *(ROOT / "grafana" / "bundles").glob("*/*.json")]}
    assert committed == set(ALL_FILES), f"committed dashboards differ from the generator's; run {REGENERATE}"
    for path, text in rendered.items():
        assert (ROOT / path).read_text() == text, f"{path} is stale: run {REGENERATE}"
    assert rendered[PurePosixPath("grafana/dashboards/bottleneck-node.json")] == render()["bottleneck-node.json"]


def test_generator_check_mode_reports_a_stale_file(tmp_path: Path) -> None:
    from bottleneck_exporter.dashboards.__main__ import main

    assert main(["--root", str(tmp_path)]) == 0
    assert main(["--root", str(tmp_path), "--check"]) == 0
    stale = tmp_path / "grafana" / "bundles" / "node-exporter-dcgm" / DASHBOARD_FILES[0]
    stale.write_text(stale.read_text().replace('"refresh": "30s"', '"refresh": "5s"'))
    assert main(["--root", str(tmp_path), "--check"]) == 1


@pytest.mark.parametrize("path", ALL_FILES)
def test_description_names_the_regenerate_command(path: str) -> None:
    first_key, first_value = next(iter(load(path).items()))
    assert first_key == "description" and REGENERATE in first_value


@pytest.mark.parametrize("path", ALL_FILES)
def test_every_panel_uses_the_datasource_variable(path: str) -> None:
    dashboard = load(path)
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    for panel in query_panels(dashboard):
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]
    for variable in variables.values():
        if variable["type"] == "query":
            assert variable["datasource"]["uid"] == "${datasource}", variable["name"]


@pytest.mark.parametrize("path", ALL_FILES)
def test_every_panel_has_a_unit_a_description_and_a_query(path: str) -> None:
    for panel in query_panels(load(path)):
        assert panel["fieldConfig"]["defaults"].get("unit"), f"{panel['title']}: no unit"
        assert len(panel.get("description", "")) > 20, f"{panel['title']}: no description"
        assert panel["targets"], f"{panel['title']}: no query"


@pytest.mark.parametrize("path", ALL_FILES)
def test_queries_pass_the_lint(path: str) -> None:
    findings = [f"{title}: {finding}" for title, expr in exprs(load(path)) for finding in lint(expr)]
    assert not findings, "\n".join(findings)


@pytest.mark.parametrize("path", ALL_FILES)
def test_every_variable_a_query_uses_is_defined(path: str) -> None:
    dashboard = load(path)
    defined = {v["name"] for v in dashboard["templating"]["list"]} | BUILTIN_VARIABLES
    texts = [expr for _, expr in exprs(dashboard)]
    texts += [v["definition"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    # "$1" is label_replace's first group, not a variable.
    used = {m for text in texts for m in re.findall(r"\$\{?([A-Za-z_]\w*)", text)}
    assert used <= defined, f"undefined variables: {sorted(used - defined)}"


@pytest.mark.parametrize("path", ALL_FILES)
def test_layout_has_unique_ids_and_fits_the_grid(path: str) -> None:
    dashboard = load(path)
    ids = [p["id"] for p in panels(dashboard)]
    assert len(ids) == len(set(ids))
    titles = [p["title"] for p in panels(dashboard) if p["type"] != "row"]
    assert len(titles) == len(set(titles)), "duplicate panel titles"
    for panel in panels(dashboard):
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]


def test_dashboards_have_the_documented_variables() -> None:
    for bundle in BUNDLES:
        names = {name: {v["name"] for v in d["templating"]["list"]} for name, d in load_dashboards(bundle).items()}
        assert {"datasource", "instance", "gpu"} <= names["bottleneck-node.json"], bundle
        assert {"datasource", "training_job", "instance", "gpu", "rank"} <= names["bottleneck-training.json"], bundle
        assert {"datasource", "training_job", "instance", "gpu"} <= names["bottleneck-fleet.json"], bundle
        assert {"datasource", "training_job", "instance"} <= names["bottleneck-verdicts.json"], bundle


def test_each_bundle_has_its_own_uids_titles_and_sibling_links() -> None:
    """Several bundles' dashboards can live in one Grafana: UIDs differ (and fit Grafana's 40 characters), a
    title names its bundle, and the dropdown of siblings lists that bundle's dashboards only."""
    uids = [load(path)["uid"] for path in ALL_FILES]
    assert len(uids) == len(set(uids)) and max(map(len, uids)) <= 40
    for bundle in BUNDLES:
        for name, dashboard in load_dashboards(bundle).items():
            assert (bundle in dashboard["title"]) == (bundle != DEFAULT_BUNDLE), (bundle, name)
            (siblings,) = [link for link in dashboard["links"] if link["type"] == "dashboards"]
            assert f"bundle:{bundle}" in siblings["tags"] and f"bundle:{bundle}" in dashboard["tags"]
    fleet = load_dashboards("node-exporter-dcgm")["bottleneck-fleet.json"]
    node_uid = load_dashboards("node-exporter-dcgm")["bottleneck-node.json"]["uid"]
    assert [link["url"] for link in fleet["links"] if link["type"] == "link"] == [f"/d/{node_uid}"]


@pytest.mark.parametrize("bundle", list(BUNDLES))
def test_panels_read_only_series_the_bundles_sources_have(bundle: str) -> None:
    """Every raw series a bundle's dashboards (and their variables) read is one its sources export: a host or
    GPU panel under node_exporter reads node_exporter's series, never an empty bottleneck_* one."""
    provides = BUNDLES[bundle].provides
    for name, dashboard in load_dashboards(bundle).items():
        texts = [expr for _, expr in exprs(dashboard)]
        texts += [v["definition"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
        read = {m for text in texts for m in re.findall(r"(?<![\w:])((?:bottleneck|node|DCGM)_\w+)(?![\w:])", text)}
        assert read, name
        assert not {m for m in read if not provides(m)}, (name, sorted(m for m in read if not provides(m)))


def test_a_panel_a_bundle_cannot_feed_is_a_note_naming_the_source() -> None:
    """Not an empty panel: a short text naming the series and the source the panel needs."""
    assert notes(load_dashboards()["bottleneck-node.json"]) == {}
    assert notes(load_dashboards("node-exporter")["bottleneck-node.json"]) == {}
    only = notes(load_dashboards("node-exporter-dcgm-only")["bottleneck-node.json"])
    assert {"GPU-Util samples (sub-second)", "PCIe link", "Throttle reasons active", "GPUs up"} <= set(only)
    assert "`bottleneck_gpu_utilization_samples_bucket` from bottleneck-exporter's gpu collector (NVML)" in \
        only["GPU-Util samples (sub-second)"]
    assert "dcgm-exporter" in only["PCIe link"]
    drawn = {p["title"] for p in query_panels(load_dashboards("node-exporter-dcgm-only")["bottleneck-node.json"])}
    # dcgm-exporter feeds what its default counters have; a panel keeps the signals the bundle has.
    assert {"GPU utilization", "GPU memory used", "Power draw vs limit", "Temperature vs slowdown threshold",
            "PCIe throughput", "Busy per core", "Pressure stall (PSI)"} <= drawn


def test_provisioning_points_at_the_dashboards() -> None:
    providers = yaml.safe_load((PROVISIONING / "dashboards" / "bottleneck.yml").read_text())
    assert providers["apiVersion"] == 1
    (provider,) = providers["providers"]
    assert provider["type"] == "file" and provider["options"]["path"]
    datasources = yaml.safe_load((PROVISIONING / "datasources" / "prometheus.yml").read_text())
    (source,) = datasources["datasources"]
    assert source["type"] == "prometheus" and source["url"].startswith("http")


@pytest.mark.parametrize("bundle", list(BUNDLES))
def test_every_verdict_of_the_bundle_and_no_other_has_an_evidence_panel_with_its_runbook(bundle: str) -> None:
    """A heuristic added to the catalogue shows up on the verdict timeline without touching the dashboards; one a
    bundle leaves out (its sources lack the series) is not on that bundle's dashboards at all."""
    resolved = resolve(bundle=bundle)
    dashboard = load_dashboards(bundle)["bottleneck-verdicts.json"]
    runbooks = {link["url"] for panel in query_panels(dashboard) for link in panel.get("links", [])}
    assert runbooks == {rule.runbook_url for rule in resolved.alerts}
    for rule in resolved.alerts:
        panel = next(p for p in query_panels(dashboard) if f"({rule.alert})" in p["title"])
        assert rule.advice in panel["description"] and "${" not in panel["description"].replace("${datasource}", "")
    fleet = load_dashboards(bundle)["bottleneck-fleet.json"]
    selector = next(expr for title, expr in exprs(fleet) if title == "Verdicts by node and job")
    named = set(re.search(r'alertname=~"([^"]+)"', selector).group(1).split("|"))  # type: ignore[union-attr]
    assert named == {rule.alert for rule in resolved.alerts}
    assert all(f"Bottleneck{left_out}" not in selector for left_out in resolved.left_out)


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
    replacements = {"$__rate_interval": "15s", "$__interval": "5s", "$__range_s": "3600", "$__range": "1h"}
    for name, value in replacements.items():
        expr = expr.replace(name, value)
    return re.sub(r"\$\{?[A-Za-z_]\w*\}?", ".*", expr)


def test_every_query_is_valid_promql(tmp_path: Path) -> None:
    """promtool parses each query (as a recording rule), so a syntax error fails without a Prometheus."""
    promtool = require_tool("promtool")
    rules = [
        {"record": f"dashboard:query_{i}:check", "expr": substitute(expr)}
        for i, (_, expr) in enumerate(e for path in ALL_FILES for e in exprs(load(path)))
    ]
    path = tmp_path / "queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    result = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules)} rules found" in result.stdout


# ------------------------------------------------------------------------------------------------ live
# Per bundle: a real exporter (replaying a recorded 4x H100 profile, with a real hooked PyTorch job pushing to it)
# under the bundle's preset, beside Debian's real node_exporter and the recorded dcgm-exporter scrape where the
# bundle reads them, scraped every second by a real Prometheus that evaluates the bundle's committed rules; every
# query of the bundle's dashboards runs against it.

GPU_PROFILE = FIXTURES / "gpu-profiles" / "hopper-4x-h100.yaml"
LIVE_JOB = "dashboards-live"
LIVE_NODE = "gpu-node-1"
# The cluster label every target gets (an agent's external label in a fleet): $cluster has a value to pick.
LIVE_CLUSTER = (("cluster", "live"),)
# How each bundle's deployment runs our exporter (docs/coexistence.md), and which peers Prometheus scrapes.
LIVE_EXPORTER_ARGS = {
    DEFAULT_BUNDLE: [f"--collector.gpu.profile={GPU_PROFILE}"],
    "node-exporter": ["--collector.preset=beside-node-exporter", f"--collector.gpu.profile={GPU_PROFILE}"],
    "node-exporter-dcgm": ["--collector.preset=beside-node-exporter-and-dcgm",
                           f"--collector.gpu.profile={GPU_PROFILE}"],
    "node-exporter-dcgm-only": ["--collector.preset=beside-node-exporter", "--no-collector.gpu"],
}

# The panels that must show data on a node running one input-bound job (the rest may be legitimately empty:
# no InfiniBand, no swap activity, no /proc/schedstat on some kernels, no firing verdict within the test's
# minute). A bundle that cannot feed one shows a note instead, or leaves its verdict out (both checked above),
# and is not asked for its data.
CORE_PANELS = {
    "bottleneck-fleet.json": ["Fleet GPU utilization", "GPUs up / down", "GPU utilization per node",
                              "Training jobs reporting", "Data-wait share per job", "Samples per second per job",
                              "CPU busy per node"],
    "bottleneck-node.json": ["GPUs up", "GPU utilization", "GPU-Util samples (sub-second)", "GPU memory used",
                             "SM activity and tensor activity (GPM)", "Temperature vs slowdown threshold",
                             "Power draw vs limit", "PCIe link", "PCIe throughput", "Busy per core",
                             "CPU time by mode", "Load per core",
                             "Context switches and runnable tasks", "CPU by thread role", "Busiest thread per role",
                             "Memory available", "Swap used", "Pressure stall (PSI)", "Disk throughput",
                             "Disk utilization", "Network throughput"],
    "bottleneck-training.json": ["Step time by phase, per rank", "Data-wait share (job)",
                                 "Data-wait share per rank", "Step time p50 / p90 per rank", "Samples per second",
                                 "Steps per second", "Step time relative to the job median", "Ranks",
                                 "DataLoader settings", "Node GPU utilization"],
    "bottleneck-verdicts.json": ["input-bound (data loading) (BottleneckInputBound)",
                                 "GPU waits in bursts (sawtooth utilisation) (BottleneckGpuSawtooth)",
                                 "CPU saturated (BottleneckCpuSaturated)"],
}


def live_substitute(expr: str) -> str:
    values = {"__rate_interval": "10s", "__interval": "1s", "__range": "1m", "__range_s": "60", "instance": LIVE_NODE,
              "training_job": LIVE_JOB, "rank": ".*", "gpu": ".*", "cluster": dict(LIVE_CLUSTER)["cluster"]}
    return re.sub(r"\$\{?([A-Za-z_]\w*)\}?", lambda m: values[m.group(1)], expr)


@pytest.fixture(scope="module", params=list(BUNDLES))
def live(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Prometheus]]:
    """(bundle, a Prometheus holding what that bundle's deployment exports), one stack per bundle."""
    bundle: str = request.param
    workdir = tmp_path_factory.mktemp(f"dashboards-live-{bundle}")
    socket_path = workdir / "push.sock"
    exporter = ExporterProcess([*LIVE_EXPORTER_ARGS[bundle], f"--push.socket={socket_path}"])
    sources = BUNDLES[bundle].sources.values()
    trainer: subprocess.Popen[bytes] | None = None
    node_exporter: Process | None = None
    prometheus: Prometheus | None = None
    with static_target(DCGM_FIXTURE) as dcgm:
        try:
            peers = {}
            if "node_exporter" in sources:
                node_exporter = start_node_exporter(workdir)
                peers["node-exporter"] = [Target(f"127.0.0.1:{node_exporter.port}", LIVE_NODE, LIVE_CLUSTER)]
            if any(source.startswith("dcgm-exporter") for source in sources):
                peers["dcgm-exporter"] = [Target(dcgm, LIVE_NODE, LIVE_CLUSTER)]
            rules = workdir / "rules"
            assert generate.main(["--out", str(rules), "--set", f"rule_interval={RULE_INTERVAL}"]) == 0
            prometheus = Prometheus(workdir, [Target(f"127.0.0.1:{exporter.port}", LIVE_NODE, LIVE_CLUSTER)],
                                    [rules / path for path in generate.bundle_files(bundle)], peers=peers)
            exporter.wait_ready()
            env = {**os.environ, "BOTTLENECK_PUSH_ADDRESS": f"unix://{socket_path}", "BOTTLENECK_JOB": LIVE_JOB,
                   "BOTTLENECK_PUSH_INTERVAL": "0.5"}
            trainer = subprocess.Popen([sys.executable, str(ROOT / "tests" / "hook_trainer.py"), "--dataset",
                                        "slow", "--workers", "0", "--stop-file", str(workdir / "stop")],
                                       env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            prometheus.start()
            # Enough for rate() over 10s windows, for the rules' 5m windows to hold two samples, and for the
            # training job's counters to move between scrapes.
            steps = f'rate(bottleneck_train_steps_total{{training_job="{LIVE_JOB}"}}[10s]) > 0'
            wait_until(lambda: prometheus.query(steps), 90, "the hooked training job's steps in Prometheus")
            records = ("job_rank:bottleneck_train_data_wait:ratio_rate5m", "instance:bottleneck_cpu_busy:ratio_rate5m",
                       "instance_gpu:bottleneck_gpu_utilization:avg5m")
            for record in records:
                wait_until(lambda record=record: prometheus.query(record), 30, f"the recording rule {record}")
            # The busiest-thread ratio needs two scrapes of the trainer's threads after the hook registered it.
            busiest = 'bottleneck_training_busiest_thread_cpu_ratio{process="hook_trainer.py"}'
            wait_until(lambda: prometheus.query(busiest), 30, "the trainer's threads in the training collector")
            yield bundle, prometheus
        finally:
            (workdir / "stop").touch()
            if trainer is not None:
                try:
                    trainer.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    trainer.kill()
            if prometheus is not None:
                prometheus.stop()
            exporter.stop()
            if node_exporter is not None:
                node_exporter.stop()


@pytest.mark.tools
@pytest.mark.torch
@pytest.mark.parametrize("name", DASHBOARD_FILES)
def test_every_query_runs_and_core_panels_show_data(name: str, live: tuple[str, Prometheus]) -> None:
    bundle, prometheus = live
    dashboard = load_dashboards(bundle)[name]
    left_out = [f"(Bottleneck{heuristic})" for heuristic in resolve(bundle=bundle).left_out]
    core = [title for title in CORE_PANELS[name]
            if title not in notes(dashboard) and not any(alert in title for alert in left_out)]
    jobs: dict[str, set[str]] = {}  # panel → the scrape jobs its data came from

    def missing_core() -> list[str]:
        empty = []
        for panel in query_panels(dashboard):
            results = [prometheus.query(live_substitute(target["expr"])) for target in panel["targets"]]
            if not any(results):
                empty.append(panel["title"])
            jobs[panel["title"]] = {s["metric"].get("job", "") for result in results for s in result}
        return [title for title in core if title in empty]

    # A verdict panel shows an alert once a rule evaluation has made it pending: the rules run every few
    # seconds, so a loaded machine may still be before that evaluation. Every query runs on every try.
    with contextlib.suppress(AssertionError):  # the assertion below names what is still missing
        wait_until(lambda: not missing_core(), 60, "the core panels' data", interval=2)
    missing = missing_core()
    assert not missing, f"core panels without data ({bundle}): {missing}"
    titles = {p["title"] for p in query_panels(dashboard)}
    assert set(core) <= titles, f"core panels renamed: {set(core) - titles}"
    if name == "bottleneck-node.json":
        # The data comes from the exporter the bundle reads each family from (our exporter runs its preset).
        sources = BUNDLES[bundle].sources
        host = {"bottleneck-exporter": "bottleneck-exporter", "node_exporter": "node-exporter"}[sources["host"]]
        assert jobs["Disk throughput"] == {host}, jobs["Disk throughput"]
        gpu = "bottleneck-exporter" if sources["gpu"] == "bottleneck-exporter" else "dcgm-exporter"
        assert jobs["GPU utilization"] == {gpu}, jobs["GPU utilization"]


@pytest.mark.tools
@pytest.mark.parametrize("name", DASHBOARD_FILES)
def test_template_variables_resolve(name: str, live: tuple[str, Prometheus]) -> None:
    bundle, prometheus = live
    for variable in load_dashboards(bundle)[name]["templating"]["list"]:
        if variable["type"] != "query":
            continue
        match = re.fullmatch(r"label_values\((.+), (\w+)\)", variable["definition"])
        assert match, variable["definition"]
        values = prometheus.label_values(match.group(2), live_substitute(match.group(1)))
        assert values, f"${variable['name']} has no values ({bundle}): {variable['definition']}"


# ---------------------------------------------------------------------------------------------- what a person sees

# Grafana's units (and custom units: count:<what>, suffix:<text>) the dashboards may use; "short" names nothing.
GRAFANA_UNITS = {"percentunit", "s", "h", "bytes", "Bps", "celsius", "watt", "hertz", "pps", "bool_on_off", "none"}
CUSTOM_UNIT = re.compile(r"(count|suffix):\s?\S.*")
# Series whose name says their unit, and the unit of a panel that draws only them, as they are or rated.
NAMED_UNITS = ((r"_celsius$", "", "celsius"), (r"_watts$", "", "watt"), (r"_bytes$", "", "bytes"),
               (r"_bytes_total$", "rate", "Bps"), (r"_ratio$", "", "percentunit"), (r"_seconds$", "", "s"))


def verdict_tables(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in query_panels(dashboard) if p["type"] == "table" and "ALERTS{" in p["targets"][0]["expr"]]


def bundle_of(path: str) -> str:
    return next((b for b in BUNDLES if f"/{b}/" in path), DEFAULT_BUNDLE)


def series_names(expr: str) -> set[str]:
    return set(re.findall(r"\b((?:bottleneck|node|DCGM)_\w+|[a-z_]+:[a-z0-9_]+:[a-z0-9_]+)\b", expr))


@pytest.mark.parametrize("path", ALL_FILES)
def test_rows_below_the_first_screen_are_collapsed_and_hold_their_panels(path: str) -> None:
    """Regression: the node view opened 3,700 px tall, every row expanded, every query run at once."""
    from bottleneck_exporter.dashboards.panels import FIRST_SCREEN

    top = load(path)["panels"]
    rows = [p for p in top if p["type"] == "row"]
    below = [r for r in rows if r["gridPos"]["y"] >= FIRST_SCREEN]
    assert below, "nothing below the first screen: the test proves nothing"
    for row in rows:
        assert row["collapsed"] == (row in below), row["title"]
        assert bool(row["panels"]) == (row in below), f"{row['title']}: a collapsed row holds its panels"
        for panel in row["panels"]:
            assert panel["gridPos"]["y"] > row["gridPos"]["y"], (row["title"], panel["title"])
    first_collapsed = top.index(below[0])
    assert all(p["type"] == "row" for p in top[first_collapsed:]), "a panel below a collapsed row is outside it"
    assert [r["gridPos"]["y"] for r in below] == list(range(below[0]["gridPos"]["y"], below[0]["gridPos"]["y"]
                                                            + len(below))), "collapsed rows follow each other"
    expanded = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in top)
    assert expanded <= 2 * FIRST_SCREEN + len(below), f"{expanded} grid units open: split the first rows"


@pytest.mark.parametrize("path", ALL_FILES)
def test_firing_verdicts_annotate_the_time_series_they_read(path: str) -> None:
    dashboard = load(path)
    resolved = resolve(bundle=bundle_of(path))
    rules = {r.alert: r for r in resolved.alerts}
    series = {p["id"]: (p, set().union(*(series_names(t["expr"]) for t in p["targets"])))
              for p in query_panels(dashboard)}
    defined = {v["name"] for v in dashboard["templating"]["list"]}
    annotations = dashboard["annotations"]["list"]
    assert annotations, "no verdict annotates this dashboard"
    for annotation in annotations:
        alert = annotation["name"]
        assert annotation["expr"].startswith(f'ALERTS{{alertstate="firing", alertname="{alert}"'), alert
        assert alert in rules, f"{alert} is not a verdict of this bundle"
        assert annotation["datasource"]["uid"] == "${datasource}" and annotation["enable"]
        assert set(re.findall(r"\$\{?(\w+)", annotation["expr"])) <= defined, alert
        assert annotation["filter"]["exclude"] is False and annotation["filter"]["ids"], alert
        read = series_names(rules[alert].expr) | series_names(rules[alert].inline_expr)
        for panel_id in annotation["filter"]["ids"]:
            panel, drawn_series = series[panel_id]
            assert panel["type"] == "timeseries", (alert, panel["title"])
            assert drawn_series & read, f"{alert} marks {panel['title']!r}, which draws nothing it reads"
    marked = {i for a in annotations for i in a["filter"]["ids"]}
    for panel_id, (panel, _) in series.items():
        found = re.search(r"\((Bottleneck\w+)\)$", panel["title"])
        if found and panel["type"] == "timeseries":  # a verdict's own evidence panel carries its verdict
            assert panel_id in next(a["filter"]["ids"] for a in annotations if a["name"] == found.group(1))
    assert marked, "no time series is marked"


def test_the_node_view_marks_gpu_memory_with_the_memory_verdicts() -> None:
    dashboard = load_dashboards()["bottleneck-node.json"]
    memory = next(p["id"] for p in panels(dashboard) if p["title"] == "GPU memory used")
    marking = {a["name"] for a in dashboard["annotations"]["list"] if memory in a["filter"]["ids"]}
    assert {"BottleneckGpuMemoryNearlyFull", "BottleneckGpuMemoryUnderused"} <= marking
    assert "BottleneckInputBound" not in marking


@pytest.mark.parametrize("path", ALL_FILES)
def test_every_verdict_table_row_links_to_its_runbook_and_the_node_and_job_views(path: str) -> None:
    dashboard = load(path)
    bundle = bundle_of(path)
    resolved = resolve(bundle=bundle)
    siblings = {d["uid"]: d for d in load_dashboards(bundle).values()}
    tables = verdict_tables(dashboard)
    assert tables or dashboard["uid"].startswith("bottleneck-verdicts"), "no verdict table"
    for table in tables:
        expr = table["targets"][0]["expr"]
        assert expr.startswith("label_replace(") and '"runbook", "$1", "alertname", "(.+)")' in expr
        grouped = set(re.search(r"max by \(([^)]*)\)", expr).group(1).split(", "))  # type: ignore[union-attr]
        assert {"alertname", "instance", "training_job"} <= grouped, table["title"]
        mapping = next(o["properties"][0]["value"][0]["options"] for o in table["fieldConfig"]["overrides"]
                       if o["matcher"]["options"] == "runbook")
        assert {a: m["text"] for a, m in mapping.items()} == {r.alert: r.runbook_url for r in resolved.alerts}
        links = {link["title"].split(" of ")[0]: link["url"] for link in table["fieldConfig"]["defaults"]["links"]}
        assert links["Runbook entry"] == "${__data.fields.runbook}"
        for title, view in (("Node view", "bottleneck-node"), ("Job view", "bottleneck-training")):
            found = re.fullmatch(r"/d/([\w-]+)\?(.*)", links[title])
            assert found, links[title]
            uid, query = found.groups()
            target = siblings[uid]  # a dashboard of the same bundle
            assert uid.startswith(view), (title, uid)
            params = dict(part.split("=", 1) for part in query.split("&") if "=" in part)
            variables = {v["name"] for v in target["templating"]["list"]}
            for name, value in params.items():
                label = name.removeprefix("var-")
                assert label in variables and label in grouped, (title, name)
                assert value == f"${{__data.fields.{label}}}", (title, name)
            assert "${datasource:queryparam}" in query and "${__url_time_range}" in query
        assert ("var-training_job" in links["Job view"]) and ("var-instance" in links["Node view"])


@pytest.mark.parametrize("path", ALL_FILES)
def test_every_panel_has_the_most_specific_unit(path: str) -> None:
    for panel in query_panels(load(path)):
        units = [panel["fieldConfig"]["defaults"]["unit"]]
        units += [p["value"] for o in panel["fieldConfig"]["overrides"] for p in o["properties"] if p["id"] == "unit"]
        for unit in units:
            assert unit in GRAFANA_UNITS or CUSTOM_UNIT.fullmatch(unit), f"{panel['title']}: unit {unit!r}"
        if units[0] == "none":
            assert panel["type"] in ("table", "state-timeline"), f"{panel['title']}: a number without a unit"
        names = [n for t in panel["targets"] for n in series_names(t["expr"]) if ":" not in n]
        exprs_ = [t["expr"] for t in panel["targets"]]
        for pattern, around, unit in NAMED_UNITS:
            if names and all(re.search(pattern, n) for n in names) and not any("/" in e for e in exprs_) and \
                    all(e.startswith(around) or not around for e in exprs_):
                assert units[0] == unit, f"{panel['title']}: draws {names} in {units[0]}, not {unit}"
