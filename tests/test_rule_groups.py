"""Rule groups say where they can run: node-local groups (every aggregation keeps ``instance``, every join matches
on it) may run in a per-node or per-shard Prometheus; cross-node groups (a job's rank median, the stragglers)
need every node's series in one ruler.

The generator derives which from each expression (``promql.crosses``); this checks the derivation against what
it promises, by evaluating every rule over the scenario table's series of each node alone: a node-local rule
gives there exactly what it gives over every node together, and the cross-node verdicts do not.
"""

from __future__ import annotations

import re

import pytest
import yaml

from bottleneck_exporter.heuristics import BUNDLES, generate, resolve
from bottleneck_exporter.heuristics.model import CROSS_NODE, NODE_LABEL, NODE_LOCAL, REACHES
from bottleneck_exporter.heuristics.promql import SeriesStore, crosses, evaluate, parse
from bottleneck_exporter.heuristics.scenarios import SCENARIOS
from bottleneck_exporter.heuristics.scenarios.replay import instances
from bottleneck_exporter.heuristics.scenarios.series import Series, Timeline, store_of
from bottleneck_exporter.heuristics.scenarios.table import NOT_YET, for_minutes
from tests.conftest import ROOT

CATALOGUE = resolve()


@pytest.mark.parametrize("bundle", list(BUNDLES))
def test_every_group_names_where_it_runs_and_has_an_explicit_interval(bundle: str) -> None:
    catalogue = resolve(bundle=bundle)
    reach = {r.record: r.reach for r in catalogue.records} | {r.alert: r.reach for r in catalogue.alerts}
    for path in generate.bundle_files(bundle):
        groups = yaml.safe_load((ROOT / path).read_text())["groups"]
        for group in groups:
            found = re.fullmatch(r"bottleneck-[a-z]+-(node-local|cross-node)(\.rules)?", group["name"])
            assert found, group["name"]
            assert group["interval"] == "1m", group["name"]
            for rule in group["rules"]:
                assert reach[rule.get("record") or rule["alert"]] == found.group(1), (group["name"], rule)


def test_docs_say_where_each_group_runs() -> None:
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| `(bottleneck-[a-z.-]+)` \| [^|]+ \| ([^|]+) \|$",
                                                         (ROOT / "docs" / "rules.md").read_text(), re.M)}
    for path in generate.bundle_files("bottleneck"):
        for group in yaml.safe_load((ROOT / path).read_text())["groups"]:
            assert group["name"] in rows, f"docs/rules.md does not list the group {group['name']}"
            where = rows[group["name"]]
            assert ("per node" in where) == group["name"].removesuffix(".rules").endswith(NODE_LOCAL), where


def test_a_job_s_median_crosses_nodes_and_a_per_node_join_does_not() -> None:
    assert crosses(parse("x / on (training_job) group_left () quantile by (training_job) (0.5, x)"), NODE_LABEL)
    assert crosses(parse('absent(up{job="bottleneck-exporter"})'), NODE_LABEL)
    assert crosses(parse("count(x)"), NODE_LABEL)
    assert not crosses(parse("max by (instance) (x) > 0.5 unless on (instance) y"), NODE_LABEL)
    assert not crosses(parse("sum without (phase) (rate(x[5m])) / ignoring (phase) y"), NODE_LABEL)
    # A constant table (no instance on its side) joins without crossing anything.
    assert not crosses(parse('x + on (phase) group_left () label_replace(vector(1), "phase", "a", "phase", ".*")'),
                       NODE_LABEL)
    assert {r.reach for r in CATALOGUE.records} == set(REACHES)


def test_topk_keeps_every_label_yet_crosses_nodes_where_its_groups_span_them() -> None:
    assert not crosses(parse("topk by (instance, rank) (1, x)"), NODE_LABEL)
    assert not crosses(parse("bottomk without (phase) (1, x)"), NODE_LABEL)
    assert crosses(parse("topk by (training_job) (1, x)"), NODE_LABEL)
    assert crosses(parse("bottomk without (instance) (1, x)"), NODE_LABEL)
    assert crosses(parse("topk(1, x)"), NODE_LABEL)


def _per_node(series: list[Series]) -> list[SeriesStore]:
    nodes = sorted({dict(s.labels).get(NODE_LABEL, "") for s in series})
    return [store_of([s for s in series if dict(s.labels).get(NODE_LABEL, "") == node]) for node in nodes]


def _differs(expr: str, together: SeriesStore, alone: list[SeriesStore], at: float) -> bool:
    node = parse(expr)
    whole = instances(evaluate(node, together, at))  # type: ignore[arg-type]
    parts = sorted((i for store in alone for i in instances(evaluate(node, store, at))),  # type: ignore[arg-type]
                   key=lambda i: i.labels)
    return whole != parts


def test_node_local_rules_need_only_each_node_s_series_and_the_job_wide_ones_do_not() -> None:
    rules = [(r.record, r.reach, r.inline_expr) for r in CATALOGUE.records] + \
            [(f"{r.alert} {r.severity}", r.reach, r.inline_expr) for r in CATALOGUE.alerts]
    crossed: set[str] = set()
    for scenario in SCENARIOS:
        if scenario.kind == NOT_YET:
            continue
        length = scenario.eval_at if scenario.eval_at is not None else for_minutes(scenario.alert) + 7
        series = scenario.build(Timeline(length))
        together, alone = store_of(series), _per_node(series)
        if len(alone) < 2:
            continue
        for name, reach, expr in rules:
            if _differs(expr, together, alone, length * 60.0):
                assert reach == CROSS_NODE, f"{name} is {reach} but needs several nodes in {scenario.title}"
                crossed.add(name.split()[0])
    assert {"BottleneckStragglerRank", "BottleneckGpuImbalance",
            "job_rank:bottleneck_train_step_seconds:ratio_to_job_median5m"} <= crossed
