"""The catalogue is the only place a signal is written: one change to a signal's definition moves its recording
rule (every bundle), the alerts that read it, the dashboard panel that draws it (in every bundle's dashboards)
and ``diagnose`` together."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from bottleneck_exporter.dashboards import node
from bottleneck_exporter.dashboards.verdict_catalogue import verdicts
from bottleneck_exporter.heuristics import catalogue, generate
from bottleneck_exporter.heuristics.catalogue import RECORDS, SIGNALS, resolve, signal
from bottleneck_exporter.heuristics.model import CatalogueError, MissingSignal
from bottleneck_exporter.heuristics.scenarios.builders import node as node_series
from bottleneck_exporter.heuristics.scenarios.builders import process
from bottleneck_exporter.heuristics.scenarios.series import Timeline, store_of
from bottleneck_exporter.heuristics.sources import BUNDLES, Unreadable
from bottleneck_exporter.verdicts.evaluation import findings_at
from tests.conftest import ROOT

# The change: iowait counts as busy (a core waiting for storage is not free for the loaders).
IDLE_OR_IOWAIT, IDLE = 'mode=~"idle|iowait"', 'mode="idle"'


def iowait_busy(expr: str) -> str:
    return expr.replace(IDLE_OR_IOWAIT, IDLE).replace('mode!~"idle|iowait"', 'mode!="idle"')

MINUTES = 20


def panel_queries(dashboard: dict[str, Any], title: str) -> list[str]:
    """The queries of the panel titled ``title``, at the top or in a collapsed row."""
    panels = [*dashboard["panels"], *(p for row in dashboard["panels"] for p in row.get("panels", []))]
    panel = next(p for p in panels if p.get("title") == title)
    return [target["expr"] for target in panel["targets"]]


def outputs() -> dict[str, Any]:
    """What the four consumers of the cpu_busy signal produce right now."""
    resolved = resolve()
    tl = Timeline(MINUTES)
    # 70% busy and 25% iowait, tasks queueing for the cores, a job training.
    store = store_of(node_series(tl, busy=0.7, iowait=0.25, cpu_pressure=0.8) + process(tl))
    findings, errors = findings_at(resolved, store, MINUTES * 60.0)
    assert errors == []
    return {
        "rules": {b: generate.render_recording_rules(c) for b, c in generate.bundle_catalogues(resolved).items()},
        "alert": resolved.alert("CpuSaturated").inline_expr,
        "panel": panel_queries(node.build("make generate"), "Busy per core"),
        "bundle panel": panel_queries(node.build("make generate", "node-exporter"), "Busy per core"),
        "diagnose": sorted(f.rule.alert for f in findings),
    }


def test_one_change_to_a_signal_moves_its_rules_alert_dashboard_panel_and_diagnose_together(
        monkeypatch: pytest.MonkeyPatch) -> None:
    before = outputs()
    assert "BottleneckCpuSaturated" not in before["diagnose"]
    # cpu_busy is derived from the busy and free cores: the change is to those two.
    for key in ("cpu_busy_cores", "cpu_free_cores"):
        cores = RECORDS[key]
        monkeypatch.setitem(RECORDS, key, dataclasses.replace(
            cores, expr=iowait_busy(cores.expr),
            sources={source: iowait_busy(expr) for source, expr in cores.sources.items()}))
    after = outputs()

    record = "instance:bottleneck_cpu_free_cores:rate5m"
    for bundle, text in after["rules"].items():
        assert text != before["rules"][bundle], bundle
        changed = text.split(f"record: {record}")[1].split("- record:")[0]
        assert IDLE in changed and IDLE_OR_IOWAIT not in changed, bundle
    assert after["alert"] != before["alert"] and f"{{{IDLE}}}" in after["alert"]
    assert [q for q in after["panel"] if q not in before["panel"]] == [signal("cpu_busy", node.N)]
    assert IDLE in signal("cpu_busy", node.N)
    # The node-exporter bundle's dashboard draws the same change from node_exporter's series.
    moved = [q for q in after["bundle panel"] if q not in before["bundle panel"]]
    assert moved == [signal("cpu_busy", node.N, "node-exporter")]
    assert f'node_cpu_seconds_total{{{node.N}, {IDLE}}}' in moved[0]
    assert "BottleneckCpuSaturated" in after["diagnose"]


def test_one_change_to_a_dashboard_signal_moves_its_panel_in_every_bundle(monkeypatch: pytest.MonkeyPatch) -> None:
    """A signal only dashboards draw is written once, over our series: each bundle's panel reads it from that
    bundle's sources (node_exporter's twin under the node-exporter bundles), and moves with it."""
    before = {b: panel_queries(node.build("make generate", b), "Busy per core") for b in BUNDLES}
    core_busy = SIGNALS["cpu_core_busy"]
    monkeypatch.setitem(SIGNALS, "cpu_core_busy", dataclasses.replace(
        core_busy, expr=core_busy.expr.replace(IDLE, IDLE_OR_IOWAIT)))
    for bundle in BUNDLES:
        after = panel_queries(node.build("make generate", bundle), "Busy per core")
        moved = [q for q in after if q not in before[bundle]]
        assert moved == [signal("cpu_core_busy", node.N, bundle)], bundle
        peer = "node_cpu_seconds_total" if BUNDLES[bundle].host == "node_exporter" else "bottleneck_cpu_seconds_total"
        assert f"1 - rate({peer}{{{node.N}, {IDLE_OR_IOWAIT}}}[$__rate_interval])" == moved[0], bundle


def test_dashboards_draw_the_bundles_signal_with_rate_interval_and_their_own_matchers() -> None:
    drawn = panel_queries(node.build("make generate"), "Busy per core")
    assert signal("cpu_busy", node.N) in drawn
    per_core = [q for q in drawn if f"bottleneck_cpu_seconds_total{{{node.N}, mode" in q]
    assert len(per_core) == 1 and "[$__rate_interval]" in per_core[0]
    assert f"bottleneck_cpu_all_seconds_total{{{node.N}, mode" in signal("cpu_busy", node.N)
    assert "node_cpu_seconds_total" in signal("cpu_busy", node.N, "node-exporter")
    with pytest.raises(CatalogueError, match="bundle node-exporter-dcgm-only has no signal 'pcie'"):
        signal("pcie", node.N, "node-exporter-dcgm-only")
    with pytest.raises(MissingSignal, match="needs bottleneck_gpu_utilization_samples_bucket") as missing:
        signal("gpu_util_samples", node.G, "node-exporter-dcgm-only")
    assert missing.value.names == {"bottleneck_gpu_utilization_samples_bucket"}
    with pytest.raises(CatalogueError, match="no signal 'cpu_bsy'; known: "):
        signal("cpu_bsy", node.N)


def test_a_dashboard_signal_reads_each_bundles_sources_through_the_twin_tables() -> None:
    """No peer metric name is written in a dashboard signal: the twin tables (coexistence.py) rename, rescale
    (dcgm-exporter's percent) and relabel (its UUID to our uuid), and keep our series where the bundle has them."""
    assert signal("swap_in", node.N, "node-exporter") == \
        f"rate(node_vmstat_pswpin{{{node.N}}}[$__rate_interval])"
    power = signal("gpu_power", node.G, "node-exporter-dcgm")
    assert f"DCGM_FI_DEV_POWER_USAGE{{{node.G}}}" in power and '"uuid", "$1", "UUID"' in power
    assert signal("gpu_power", node.G, "node-exporter") == f"bottleneck_gpu_power_watts{{{node.G}}}"
    # Beside dcgm-exporter our gpu collector keeps what dcgm-exporter lacks: the power limit stays ours.
    assert signal("gpu_power_limit", node.G, "node-exporter-dcgm") == f"bottleneck_gpu_power_limit_watts{{{node.G}}}"
    # A ratio of dcgm-exporter's clock to our maximum would match no series one to one: not drawn.
    with pytest.raises(MissingSignal):
        signal("gpu_sm_clock_of_max", node.G, "node-exporter-dcgm")


def test_verdict_panels_read_the_catalogues_structured_fields_not_its_promql() -> None:
    by_name = {v.heuristic.name: v for v in verdicts()}
    straggler = by_name["StragglerRank"]
    assert straggler.heuristic.compares == ("step_vs_median", "own_vs_median")
    assert straggler.signals == tuple(r.record for r in resolve().records if r.key in straggler.heuristic.compares)
    assert by_name["MemoryPressure"].thresholds == (("warning", 0.1), ("critical", 0.05))
    assert by_name["TrainingStalled"].signals == ()


def test_a_heuristic_that_compares_a_record_its_expression_does_not_read_is_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    heuristics = list(catalogue.HEURISTICS)
    index = next(i for i, h in enumerate(heuristics) if h.name == "Swapping")
    heuristics[index] = dataclasses.replace(heuristics[index], compares=("cpu_busy",))
    monkeypatch.setattr(catalogue, "HEURISTICS", tuple(heuristics))
    with pytest.raises(CatalogueError, match="heuristic Swapping: compares <<cpu_busy>>"):
        catalogue.validate()


def test_the_committed_node_dashboard_draws_the_catalogues_signal() -> None:
    committed = json.loads((ROOT / "grafana/dashboards/bottleneck-node.json").read_text())
    assert signal("cpu_busy", node.N) in panel_queries(committed, "Busy per core")


def test_bundle_rewrite_refuses_what_no_twin_can_stand_for() -> None:
    """A peer's unit scaled inside a range, a twin that is an expression under matchers, a series with no twin:
    the bundle has no such signal (Unreadable names the series) rather than a query that silently reads wrong."""
    dcgm, node_exporter = BUNDLES["node-exporter-dcgm-only"], BUNDLES["node-exporter"]
    with pytest.raises(Unreadable) as err:  # dcgm-exporter's energy is in mJ: rate(x * 0.001[w]) is no PromQL
        dcgm.rewrite("rate(bottleneck_gpu_energy_joules_total[5m])")
    assert err.value.names == {"bottleneck_gpu_energy_joules_total"}
    with pytest.raises(Unreadable):  # node_exporter counts CPUs with an expression: it takes no matchers
        node_exporter.rewrite('bottleneck_cpus{instance="a"}')
    with pytest.raises(Unreadable):  # PSI has one twin per resource and kind: a selector must pick one
        node_exporter.rewrite("rate(bottleneck_pressure_seconds_total[5m])")
    assert node_exporter.rewrite('rate(bottleneck_pressure_seconds_total{resource="io", kind="full", x=~"a,b"}[5m])') \
        == 'rate(node_pressure_io_stalled_seconds_total{x=~"a,b"}[5m])'
    assert dcgm.rewrite("bottleneck_gpu_utilization_ratio > 0.5").startswith("max without (UUID")
    assert node_exporter.rewrite("bottleneck_train_steps_total") == "bottleneck_train_steps_total"


def test_a_bundle_rewrite_replaces_our_selectors_and_keeps_the_rest_as_written() -> None:
    """The rewrite walks the parsed expression: a peer's twin replaces each of our selectors (an expression twin in
    parentheses, a scaled one times its scale), the rest keeps its spacing, and a recording rule whose name
    contains one of our series' names is no selector of it."""
    node_exporter, dcgm = BUNDLES["node-exporter"], BUNDLES["node-exporter-dcgm-only"]
    expr = 'sum by (instance) (\n  rate(bottleneck_cpu_seconds_total{mode="idle"}[5m])\n) / bottleneck_cpus'
    assert node_exporter.rewrite(expr) == ('sum by (instance) (\n  rate(node_cpu_seconds_total{mode="idle"}[5m])\n)'
                                           ' / (count without (cpu, mode) (node_cpu_seconds_total{mode="idle"}))')
    assert node_exporter.rewrite("instance:bottleneck_cpus:count > 2") == "instance:bottleneck_cpus:count > 2"
    assert "(DCGM_FI_DEV_GPU_UTIL * 0.01) > 0.5" in dcgm.rewrite("bottleneck_gpu_utilization_ratio > 0.5")
