"""Alert annotations: when a verdict fires, a mark on the time series panels that draw what it reads.

Each verdict of a dashboard's bundle gets one annotation query over its firing alert, narrowed by the dashboard's
variables, and shown only on the panels it concerns (Grafana's annotation ``filter`` by panel id): a time series
whose queries read a series the verdict compares (its ``compares`` records and their raw series, in the bundle's
sources), or, for a verdict that compares none, a series its expression reads. So a person sees on the GPU
utilization graph when BottleneckInputBound started and stopped::

    {"name": "BottleneckInputBound", "expr": "ALERTS{alertstate=\"firing\", alertname=\"BottleneckInputBound\",
     instance=~\"$instance\"}", "filter": {"exclude": false, "ids": [12, 14]}, ...}
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from typing import Any

from bottleneck_exporter.dashboards.panels import DATASOURCE, Panel
from bottleneck_exporter.dashboards.thresholds import catalogue
from bottleneck_exporter.dashboards.verdict_catalogue import SEVERITY_COLORS, Verdict, verdicts
from bottleneck_exporter.heuristics.catalogue import selector_names, signal
from bottleneck_exporter.heuristics.promql import PromQLError, parse
from bottleneck_exporter.heuristics.sources import DEFAULT_BUNDLE
from bottleneck_exporter.wire.schema import JOB_LABEL

# Series read only to say where a verdict applies (a node where a job trains, a rank on a GPU), not what it
# measures: a panel drawing them is about no verdict in particular.
CONTEXT = frozenset({"bottleneck_train_info", "bottleneck_training_process_info", "up"})
# Metric names in an expression the PromQL subset does not parse (histogram_quantile, bottomk): read, not edited.
_NAME = re.compile(r"\b((?:bottleneck|node|DCGM)_[A-Za-z0-9_]*|[a-z_]+:[a-z0-9_]+:[a-z0-9_]+)\b")


def series_of(expr: str) -> set[str]:
    """The series (raw or recorded) a dashboard query reads."""
    try:
        return selector_names(parse(expr))
    except PromQLError:
        return set(_NAME.findall(expr))


@functools.cache
def concerned(bundle: str = DEFAULT_BUNDLE) -> dict[str, frozenset[str]]:
    """Alert → the series whose panels its annotation marks."""
    resolved = catalogue(bundle)
    names = {r.key: r.record for r in resolved.records}
    found: dict[str, frozenset[str]] = {}
    for verdict in verdicts(bundle):
        heuristic = verdict.heuristic
        if heuristic.compares:
            read = {names[key] for key in heuristic.compares}
            for key in heuristic.compares:
                read |= series_of(signal(key, 'instance=~".*"', bundle))
        else:
            read = set(resolved.reads[heuristic.name])
        found[verdict.alert] = frozenset(read - CONTEXT)
    return found


def _panels(panels: list[Panel]) -> Iterator[Panel]:
    for panel in panels:
        yield panel
        yield from panel.get("panels", [])  # a collapsed row holds its panels


def _matchers(verdict: Verdict, variables: set[str]) -> str:
    found = []
    if "instance" in variables and "instance" in verdict.heuristic.scope:
        found.append('instance=~"$instance"')
    if JOB_LABEL in variables and JOB_LABEL in verdict.heuristic.scope:
        found.append(f'{JOB_LABEL}=~"${JOB_LABEL}"')
    return "".join(f", {m}" for m in found)


def annotation(verdict: Verdict, ids: list[int], variables: set[str]) -> dict[str, Any]:
    labels = " ".join(f"{{{{{label}}}}}" for label in verdict.heuristic.scope)
    return {
        "name": verdict.alert,
        "datasource": DATASOURCE,
        "enable": True,
        "hide": True,  # one per verdict: as toggles they would fill the first screen
        "iconColor": SEVERITY_COLORS[verdict.heuristic.tiers[0].severity],
        "expr": f'ALERTS{{alertstate="firing", alertname="{verdict.alert}"{_matchers(verdict, variables)}}}',
        "step": "60s",
        "titleFormat": f"{verdict.alert}: {verdict.heuristic.verdict}",
        "textFormat": f"{{{{severity}}}} {labels}",
        "tagKeys": "severity",
        "useValueForTime": False,
        "filter": {"exclude": False, "ids": ids},
    }


def with_verdict_annotations(doc: dict[str, Any], bundle: str = DEFAULT_BUNDLE) -> dict[str, Any]:
    """``doc`` (a laid-out dashboard) with an annotation per verdict that concerns one of its time series."""
    variables = {v["name"] for v in doc["templating"]["list"]}
    series = {p["id"]: set().union(*(series_of(t["expr"]) for t in p["targets"]))
              for p in _panels(doc["panels"]) if p["type"] == "timeseries"}
    found = []
    for verdict in verdicts(bundle):
        wanted = concerned(bundle)[verdict.alert]
        ids = [panel_id for panel_id, read in series.items() if read & wanted]
        if ids:
            found.append(annotation(verdict, ids, variables))
    return {**doc, "annotations": {"list": found}}
