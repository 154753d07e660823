"""Replays a scenario through the Python evaluator, minute by minute, with Prometheus' ``for:`` logic.

The outcome says which alert instances are pending or firing at the scenario's evaluation minute; the
generator turns those into ``promtool test rules`` expectations (so promtool checks the Python evaluator
against Prometheus), and tests check them against the scenario's own expectation (so the evaluator is
checked against the person who wrote the scenario). Build time and tests only: the daemon never imports it.
"""

from __future__ import annotations

import dataclasses
import math

from bottleneck_exporter.heuristics.catalogue import AlertRule, Catalogue, resolve
from bottleneck_exporter.heuristics.promql import (
    Aggregate,
    Binary,
    Call,
    Negate,
    Node,
    Sample,
    Selector,
    SeriesStore,
    evaluate,
    parse,
)
from bottleneck_exporter.heuristics.scenarios.series import EXPORTER_JOB, Series, Timeline, store_of
from bottleneck_exporter.heuristics.scenarios.table import FIRES, NEAR_MISS, NOT_YET, Scenario, for_minutes
from bottleneck_exporter.heuristics.scenarios.translate import translate
from bottleneck_exporter.heuristics.sources import BUNDLES, PEER_JOB, family_of

NOT_YET_SCAN_MINUTES = 45
# Prometheus evaluates rule groups in no set order: a rule that reads a record of another group (a cross-node
# record reading node-local ones, bottleneck-<area>-cross-node) may see it one evaluation late, twice along a
# chain. A not-yet scenario checks the alert fires this many minutes after its for: would have it, so that
# promtool's order of groups never decides it.
GROUP_LAG_MINUTES = 2


class ScenarioError(AssertionError):
    """The scenario does not behave as its kind says."""


@dataclasses.dataclass(frozen=True)
class Instance:
    """One alert instance: its labels (as the alert carries them, without alertname/severity) and value."""

    labels: tuple[tuple[str, str], ...]
    value: float

    @property
    def label_dict(self) -> dict[str, str]:
        return dict(self.labels)


@dataclasses.dataclass
class Check:
    """What promtool must see at ``minute``: the firing instances of every tier of the alert."""

    minute: int
    firing: dict[str, list[Instance]]


@dataclasses.dataclass
class Outcome:
    scenario: Scenario
    series: list[Series]
    eval_at: int
    later: int | None
    active: dict[int, dict[str, list[Instance]]]  # minute → severity → instances whose condition holds
    firing: dict[int, dict[str, list[Instance]]]
    checks: list[Check]


def instances(samples: list[Sample]) -> list[Instance]:
    out = []
    for sample in samples:
        labels = {k: v for k, v in sample.labels.items() if k != "__name__"}
        out.append(Instance(tuple(sorted(labels.items())), sample.value))
    return sorted(out, key=lambda i: i.labels)


def simulate(rules: list[AlertRule], store: SeriesStore, minutes: int) -> tuple[dict, dict]:
    """Evaluate ``rules`` every minute from 0 to ``minutes``; returns (active, firing) per minute."""
    parsed = {rule.severity: (rule, parse(rule.inline_expr)) for rule in rules}
    since: dict[tuple[str, tuple], int] = {}
    active: dict[int, dict[str, list[Instance]]] = {}
    firing: dict[int, dict[str, list[Instance]]] = {}
    for minute in range(minutes + 1):
        active[minute], firing[minute] = {}, {}
        for severity, (rule, node) in parsed.items():
            result = evaluate(node, store, minute * 60.0)
            if isinstance(result, float):
                raise ScenarioError(f"{rule.alert}: expression returned a scalar")
            now = instances(result)
            hold = for_minutes(rule.heuristic.name)
            keys = {(severity, i.labels) for i in now}
            for key in [k for k in since if k[0] == severity and k not in keys]:
                del since[key]
            for inst in now:
                since.setdefault((severity, inst.labels), minute)
            active[minute][severity] = now
            firing[minute][severity] = [i for i in now if minute - since[(severity, i.labels)] >= hold]
    return active, firing


def _labelled_by(node: Node) -> str | None:
    """The raw series whose labels an expression's result carries: Prometheus keeps the left operand's labels
    (the "many" side of group_left, the side that is a vector), an aggregation or function its argument's."""
    if isinstance(node, Selector):
        return next((m.value for m in node.matchers if m.name == "__name__" and m.op == "="), None)
    if isinstance(node, Binary):
        return _labelled_by(node.lhs) or _labelled_by(node.rhs)
    if isinstance(node, Aggregate | Negate):
        return _labelled_by(node.expr)
    if isinstance(node, Call):
        return next(filter(None, map(_labelled_by, node.args)), None)
    return None


def scrape_job(rule: AlertRule) -> str:
    """The scrape job an alert instance of ``rule`` carries: that of the exporter whose series label it (a node
    alert of the node-exporter bundle carries node_exporter's job, a GPU alert beside dcgm-exporter carries
    dcgm-exporter's where its GPU signal comes from there, and ours where it comes from our unique series)."""
    found = _labelled_by(parse(rule.inline_expr))
    origin = family_of(found) if found else None
    return PEER_JOB[origin[1]]["job"] if origin and origin[1] in PEER_JOB else EXPORTER_JOB


def expected_labels(scenario_labels: dict[str, str], rule: AlertRule) -> dict[str, str]:
    """A scenario's expected labels (written for the bottleneck bundle, every series scraped in our job) as the
    alert carries them under ``rule``'s bundle."""
    if scenario_labels.get("job") != EXPORTER_JOB:
        return scenario_labels
    return {**scenario_labels, "job": scrape_job(rule)}


def _matches(expected: dict[str, str], value: float | None, got: list[Instance]) -> bool:
    """Whether ``got`` has ``expected`` (labels exactly, the value to 6 significant digits)."""
    return any(inst.label_dict == expected and (value is None or math.isclose(inst.value, value, rel_tol=1e-6))
               for inst in got)


def replay(scenario: Scenario, catalogue: Catalogue | None = None) -> Outcome:
    """Run ``scenario``; raise ScenarioError when it does not behave as its kind and expectation say."""
    catalogue = catalogue or resolve()
    rules = [r for r in catalogue.alerts if r.heuristic.name == scenario.alert]
    if scenario.severity not in {r.severity for r in rules}:
        raise ScenarioError(f"{scenario.title}: the alert has no {scenario.severity} tier")
    hold = for_minutes(scenario.alert)
    if scenario.kind == NOT_YET:
        timeline = Timeline(scenario.start + NOT_YET_SCAN_MINUTES + hold, scenario.start)
    else:
        timeline = Timeline(scenario.eval_at if scenario.eval_at is not None else hold + 7, 0)
    built = translate(BUNDLES[catalogue.bundle], scenario.build(timeline))
    target_rule = next(r for r in rules if r.severity == scenario.severity)
    store = store_of(built)
    active, firing = simulate(rules, store, timeline.length)
    target = scenario.severity
    later: int | None = None
    if scenario.kind == NOT_YET:
        onset = next((m for m in range(timeline.start, timeline.length + 1) if active[m][target]), None)
        if onset is None:
            raise ScenarioError(f"{scenario.title}: the condition never holds after minute {timeline.start}")
        eval_at, later = onset + hold - 1, onset + hold + 1 + GROUP_LAG_MINUTES
        if eval_at < onset or later > timeline.length:
            raise ScenarioError(f"{scenario.title}: timeline too short for for: {hold}m")
        if firing[eval_at][target]:
            raise ScenarioError(f"{scenario.title}: already firing at minute {eval_at}")
        for exp in scenario.expect:
            labels = expected_labels(dict(exp.labels), target_rule)
            if not _matches(labels, None, active[eval_at][target]):
                raise ScenarioError(f"{scenario.title}: {labels} not pending at {eval_at}: "
                                    f"{active[eval_at][target]}")
            if not _matches(labels, exp.value, firing[later][target]):
                raise ScenarioError(f"{scenario.title}: {labels}={exp.value} not firing at {later}: "
                                    f"{firing[later][target]}")
        checks = [Check(eval_at, firing[eval_at]), Check(later, firing[later])]
    else:
        eval_at = timeline.length
        if scenario.kind == FIRES:
            if not scenario.expect:
                raise ScenarioError(f"{scenario.title}: a firing scenario needs an expectation")
            for exp in scenario.expect:
                labels = expected_labels(dict(exp.labels), target_rule)
                if not _matches(labels, exp.value, firing[eval_at][target]):
                    raise ScenarioError(f"{scenario.title}: expected {labels} = {exp.value} firing at "
                                        f"minute {eval_at}, got {firing[eval_at][target]}")
            if len(firing[eval_at][target]) != len(scenario.expect):
                raise ScenarioError(f"{scenario.title}: unexpected extra instances {firing[eval_at][target]}")
        elif scenario.kind == NEAR_MISS:
            if active[eval_at][target]:
                raise ScenarioError(f"{scenario.title}: condition holds at minute {eval_at}: "
                                    f"{active[eval_at][target]}")
            fired = [m for m in firing if firing[m][target]]
            if fired:
                raise ScenarioError(f"{scenario.title}: fires at minutes {fired}")
        else:
            raise ScenarioError(f"{scenario.title}: unknown kind {scenario.kind!r}")
        checks = [Check(eval_at, firing[eval_at])]
        if scenario.kind == NEAR_MISS and eval_at >= 2:
            checks.insert(0, Check(eval_at // 2, firing[eval_at // 2]))
    return Outcome(scenario, built, eval_at, later, active, firing, checks)
