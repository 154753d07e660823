"""The cluster label: every clause of every generated rule keeps it, and two clusters that share node and job names
get their verdicts apart, in the Python evaluator and in promtool alike.

A global ruler (Thanos Rule, the Mimir ruler, vmalert) sees every cluster's ``instance="gpu-node-1:9847"`` and
``training_job="resnet50"`` at once; only the ``cluster`` label (an external label of each cluster's agent) tells
them apart. The generator adds it to every ``by`` and ``on`` (``promql.keep_label``), so each heuristic's
firing scenario in one cluster and its near miss in the other must give exactly the verdicts each gives alone.
"""

from __future__ import annotations

import dataclasses
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bottleneck_exporter.heuristics import BUNDLES, DEFAULT_BUNDLE, HEURISTICS, CatalogueError, generate, resolve
from bottleneck_exporter.heuristics.promql import (
    Aggregate,
    Binary,
    Node,
    PromQLError,
    carries,
    children,
    keep_label,
    parse,
    unparse,
)
from bottleneck_exporter.heuristics.scenarios import SCENARIOS
from bottleneck_exporter.heuristics.scenarios.replay import Check, Instance, Outcome, simulate
from bottleneck_exporter.heuristics.scenarios.series import Series, Timeline, store_of
from bottleneck_exporter.heuristics.scenarios.table import FIRES, NEAR_MISS, Scenario, for_minutes
from bottleneck_exporter.heuristics.scenarios.translate import translate
from tests.conftest import ROOT, require_tool, wait_until
from tests.promstack import FOR, RATE_WINDOW, RULE_INTERVAL, Prometheus, Target

EAST, WEST = "east", "west"


def _nodes(node: Node) -> list[Node]:
    return [node, *(n for kid in children(node) for n in _nodes(kid))]


def _clauses(expr: str) -> list[tuple[str, tuple[str, ...], bool]]:
    """(kind, labels, whether it must keep the cluster label) of every by / on clause of ``expr``."""
    found = []
    for node in _nodes(parse(expr)):
        if isinstance(node, Aggregate) and not node.without:
            found.append(("by", node.grouping, carries(node.expr, "cluster")))
        elif isinstance(node, Binary) and node.on is not None:
            found.append(("on", node.on, carries(node.lhs, "cluster") and carries(node.rhs, "cluster")))
    return found


def test_keep_label_adds_the_label_to_each_clause_and_keeps_the_layout() -> None:
    text = ("job_rank:x\n/ on (training_job) group_left ()\n"
            "quantile by (training_job) (0.5, job_rank:x)")
    assert unparse(keep_label(parse(text), "cluster")) == (
        "job_rank:x\n/ on (cluster, training_job) group_left ()\nquantile by (cluster, training_job) (0.5, job_rank:x)")
    assert unparse(keep_label(parse("sum(x) by (instance)"), "cluster")) == "sum(x) by (cluster, instance)"
    # An aggregation over everything would merge the clusters: it keeps them apart too.
    assert unparse(keep_label(parse("count(up == 0)"), "cluster")) == "count by (cluster) (up == 0)"
    # A join with a constant table (no cluster on its side) must not match on it, or it would match nothing.
    constant = 'x + on (phase) group_left () label_replace(vector(1), "phase", "a", "phase", ".*")'
    assert unparse(keep_label(parse(constant), "cluster")) == constant
    # without () and ignoring () keep every label they do not name: nothing to add.
    assert unparse(keep_label(parse("sum without (cpu) (x) - ignoring (phase) y"), "cluster")) == \
        "sum without (cpu) (x) - ignoring (phase) y"


def test_a_clause_that_drops_the_cluster_label_is_refused_naming_it() -> None:
    with pytest.raises(PromQLError, match="drops cluster"):
        keep_label(parse("sum without (cluster) (x)"), "cluster")
    with pytest.raises(PromQLError, match="does not match on cluster"):
        keep_label(parse("x / ignoring (cluster) y"), "cluster")


@pytest.mark.parametrize("bundle", list(BUNDLES))
def test_every_by_and_on_of_every_rule_keeps_the_cluster_label(bundle: str) -> None:
    catalogue = resolve(bundle=bundle)
    texts = [r.expr for r in catalogue.records] + [t for r in catalogue.alerts for t in (r.expr, r.inline_expr)]
    clauses = [c for text in texts for c in _clauses(text)]
    assert len(clauses) > 100, "the bundle has its clauses"
    assert [c for c in clauses if c[2] and "cluster" not in c[1]] == []
    # The only clauses without it join a constant table, whose side has no cluster to match.
    assert {c[1] for c in clauses if not c[2]} <= {("phase",)}


def test_the_cluster_label_is_a_parameter() -> None:
    catalogue = resolve({"cluster_label": "k8s_cluster"})
    texts = [r.expr for r in catalogue.records] + [r.expr for r in catalogue.alerts]
    assert all("k8s_cluster" in labels for text in texts for _, labels, keep in _clauses(text) if keep)
    assert not any("cluster" in labels for text in texts for _, labels, _ in _clauses(text))
    with pytest.raises(CatalogueError, match="parameter cluster_label: expected a label name"):
        resolve({"cluster_label": "the cluster"})


def _in_cluster(series: list[Series], cluster: str) -> list[Series]:
    return [dataclasses.replace(s, labels=tuple(sorted((*s.labels, ("cluster", cluster))))) for s in series]


def _with_cluster(found: dict[int, dict[str, list[Instance]]], cluster: str) -> dict[int, dict[str, set[Instance]]]:
    return {minute: {severity: {Instance(tuple(sorted((*i.labels, ("cluster", cluster)))), i.value) for i in got}
                     for severity, got in by_severity.items()}
            for minute, by_severity in found.items()}


def _first(alert: str, kind: str, bundle: str) -> Scenario | None:
    return next((s for s in SCENARIOS if s.alert == alert and s.kind == kind and s.runs_in(BUNDLES[bundle])), None)


def two_clusters(bundle: str = DEFAULT_BUNDLE) -> list[tuple[str, Outcome, dict, dict]]:
    """Per heuristic whose verdict carries the cluster label: (name, the outcome with its firing scenario in
    cluster east and its near miss in west, both with the same node and job names; the verdicts east and west
    give alone, the cluster label added)."""
    catalogue = resolve(bundle=bundle)
    cases = []
    for heuristic in HEURISTICS:
        rules = [r for r in catalogue.alerts if r.heuristic.name == heuristic.name]
        fires = _first(heuristic.name, FIRES, bundle)
        if not rules or fires is None or not carries(parse(rules[0].inline_expr), "cluster"):
            continue
        near = _first(heuristic.name, NEAR_MISS, bundle)
        timeline = Timeline(fires.eval_at if fires.eval_at is not None else for_minutes(heuristic.name) + 7)
        east = translate(BUNDLES[bundle], fires.build(timeline))
        west = translate(BUNDLES[bundle], near.build(timeline)) if near is not None else east
        alone = [_with_cluster(simulate(rules, store_of(series), timeline.length)[1], cluster)
                 for series, cluster in ((east, EAST), (west, WEST))]
        both = [*_in_cluster(east, EAST), *_in_cluster(west, WEST)]
        active, firing = simulate(rules, store_of(both), timeline.length)
        title = f"{fires.name}, beside {near.name if near else 'itself'} in a cluster with the same node and job names"
        outcome = Outcome(dataclasses.replace(fires, name=title), both, timeline.length, None, active, firing,
                          [Check(timeline.length, firing[timeline.length])])
        cases.append((heuristic.name, outcome, alone[0], alone[1]))
    return cases


@pytest.mark.parametrize("bundle", list(BUNDLES))
def test_two_clusters_with_the_same_node_and_job_names_keep_their_verdicts_apart(bundle: str) -> None:
    cases = two_clusters(bundle)
    assert {"InputBound", "StragglerRank", "GpuImbalance", "CpuSaturated"} <= {name for name, *_ in cases}
    for name, outcome, east, west in cases:
        for minute, by_severity in outcome.firing.items():
            for severity, got in by_severity.items():
                expected = east[minute][severity] | west[minute][severity]
                assert set(got) == expected, (name, minute, severity)
        last = outcome.eval_at
        assert any(east[last].values()), f"{name}: its firing scenario fires in cluster east"


def test_promtool_sees_the_two_clusters_as_the_evaluator_does(tmp_path: Path) -> None:
    """Prometheus' own engine, over the same two clusters: the promtool test expects what the evaluator found."""
    catalogue = resolve()
    tests = [case for name, outcome, _, _ in two_clusters() for case in generate.rule_test_cases(catalogue, name,
                                                                                                  [outcome])]
    rule_files = [str(ROOT / generate.RECORDING_RULES), str(ROOT / generate.ALERT_RULES)]
    path = tmp_path / "two-clusters.yml"
    path.write_text(generate.rule_test_document(rule_files, tests))
    result = subprocess.run([require_tool("promtool"), "test", "rules", str(path)], capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]


@pytest.mark.tools
@pytest.mark.torch
@pytest.mark.live
def test_two_clusters_in_one_prometheus_keep_their_training_jobs_apart(
        tmp_path: Path, start_exporter: Any, trainers: Callable[..., subprocess.Popen[str]]) -> None:
    """A global Prometheus scraping two clusters' exporters, each a node "gpu-node-1" with a training job "llama":
    the input-bound one in east fires BottleneckInputBound, the healthy one in west does not, and each job's
    rank is compared with its own cluster's median (merged, the slow rank would sit far above a shared one)."""
    rules = tmp_path / "rules"
    assert generate.main(["--out", str(rules), "--set", f"rate_window={RATE_WINDOW}", "--set",
                          f"rule_interval={RULE_INTERVAL}", "--for", FOR]) == 0
    sockets = {cluster: tmp_path / f"{cluster}.sock" for cluster in (EAST, WEST)}
    exporters = {cluster: start_exporter([f"--push.socket={socket}"]) for cluster, socket in sockets.items()}
    prometheus = Prometheus(tmp_path, [Target(f"127.0.0.1:{exporters[c].port}", "gpu-node-1", (("cluster", c),))
                                       for c in (EAST, WEST)],
                            [rules / generate.RECORDING_RULES, rules / generate.ALERT_RULES]).start()
    try:
        trainers("llama", "slow", sockets[EAST])
        trainers("llama", "fast", sockets[WEST])

        def input_bound() -> list[dict[str, Any]]:
            return [a for a in prometheus.alerts()
                    if a["labels"]["alertname"] == "BottleneckInputBound" and a["state"] == "firing"]

        firing = wait_until(input_bound, 180, "BottleneckInputBound to fire for the num_workers=0 run in east")
        assert [(a["labels"]["cluster"], a["labels"]["instance"], a["labels"]["training_job"]) for a in firing] == \
            [(EAST, "gpu-node-1", "llama")]
        share = f"job_rank:bottleneck_train_data_wait:ratio_rate{RATE_WINDOW}"
        shares = wait_until(lambda: {s["metric"]["cluster"]: float(s["value"][1]) for s in prometheus.query(share)}
                            if len(prometheus.query(share)) == 2 else None, 60, "both clusters' data-wait share")
        assert shares[EAST] > 0.5 > shares[WEST], shares
        median = f"job_rank:bottleneck_train_step_seconds:ratio_to_job_median{RATE_WINDOW}"
        ratios = wait_until(lambda: (found if len(found := prometheus.query(median)) == 2 else None), 60,
                            "both clusters' step time relative to their job's median")
        assert {r["metric"]["cluster"]: round(float(r["value"][1]), 6) for r in ratios} == {EAST: 1.0, WEST: 1.0}
        assert {a["labels"]["cluster"] for a in input_bound()} == {EAST}, "west stays healthy all along"
    finally:
        prometheus.stop()
