"""The dashboards' view of the heuristics catalogue (exporter/heuristics): one ``Verdict`` per heuristic.

For each heuristic it takes the continuous signals the rule compares (the catalogue's ``compares``: recording
rules, e.g. ``job_rank:bottleneck_train_data_wait:ratio_rate5m``, or StragglerRank's step time and own work)
and the threshold of each severity tier (``threshold``, the tier's override of it), so the verdict panels draw
the signals with the alert's own cut-offs. Heuristics that compare no recording rule are shown as their
alert's state. Selector for the firing
verdicts::

    ALERTS{alertstate="firing", alertname=~"BottleneckInputBound|BottleneckIoBound|...", instance=~"$instance"}
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any

from bottleneck_exporter.dashboards.panels import Panel, Query, table, with_value_text
from bottleneck_exporter.dashboards.signals import Signals
from bottleneck_exporter.dashboards.thresholds import catalogue
from bottleneck_exporter.heuristics.catalogue import HEURISTICS
from bottleneck_exporter.heuristics.model import Heuristic
from bottleneck_exporter.heuristics.sources import DEFAULT_BUNDLE
from bottleneck_exporter.wire.schema import JOB_LABEL

SEVERITY_COLORS = {"info": "blue", "warning": "orange", "critical": "red"}
# The dashboards a verdict table's row links to: the node view (one $instance) and the job view (one
# $training_job), as uids of the default bundle (Signals.uid names a bundle's).
NODE_VIEW = "bottleneck-node"
JOB_VIEW = "bottleneck-training"


@dataclasses.dataclass(frozen=True)
class Verdict:
    heuristic: Heuristic
    signals: tuple[str, ...]  # recorded series compared against the thresholds; none: show the alert state
    thresholds: tuple[tuple[str, float], ...]  # (severity, value) per tier
    runbook_url: str
    meaning: str  # the catalogue's texts with the parameters filled in
    advice: str

    @property
    def alert(self) -> str:
        return self.heuristic.alert


@functools.cache
def verdicts(bundle: str = DEFAULT_BUNDLE) -> tuple[Verdict, ...]:
    """The verdicts of ``bundle``: a heuristic its sources cannot feed has no alert there, and no verdict."""
    resolved = catalogue(bundle)
    record_names = {r.key: r.record for r in resolved.records}
    found: list[Verdict] = []
    for heuristic in HEURISTICS:
        rules = [rule for rule in resolved.alerts if rule.heuristic is heuristic]
        if not rules:
            continue
        signals = [record_names[key] for key in heuristic.compares]
        thresholds: list[tuple[str, float]] = []
        for rule in rules if signals else []:
            tier = next(t for t in heuristic.tiers if t.severity == rule.severity)
            name = tier.overrides.get(heuristic.threshold, heuristic.threshold)
            thresholds.append((rule.severity, float(rule.thresholds.get(name, heuristic.threshold))))
        found.append(Verdict(heuristic, tuple(signals), tuple(thresholds), rules[0].runbook_url, rules[0].meaning,
                             rules[0].advice))
    return tuple(found)


def alert_names(bundle: str = DEFAULT_BUNDLE) -> list[str]:
    return [v.alert for v in verdicts(bundle)]


def firing_selector(matchers: str = "", bundle: str = DEFAULT_BUNDLE) -> str:
    """The firing alerts of ``bundle``'s verdicts (and no other bundle's)."""
    extra = f", {matchers}" if matchers else ""
    return f'ALERTS{{alertstate="firing", alertname=~"{"|".join(alert_names(bundle))}"{extra}}}'


def verdict_texts(bundle: str = DEFAULT_BUNDLE) -> dict[str, str]:
    """Alert name → the verdict a person reads ("input-bound (data loading)"), for table value mappings."""
    return {v.alert: v.heuristic.verdict for v in verdicts(bundle)}


def runbook_urls(bundle: str = DEFAULT_BUNDLE) -> dict[str, str]:
    """Alert name → its runbook entry (the alert's runbook_url)."""
    return {v.alert: v.runbook_url for v in verdicts(bundle)}


def _view_link(title: str, uid: str, variables: Sequence[str]) -> dict[str, Any]:
    """A data link to the dashboard ``uid`` with ``variables`` set from the row's labels, the datasource and the
    time range kept."""
    query = "&".join([*(f"var-{v}=${{__data.fields.{v}}}" for v in variables), "${datasource:queryparam}",
                      "${__url_time_range}"])
    return {"title": title, "url": f"/d/{uid}?{query}", "targetBlank": False}


def verdict_table(title: str, description: str, matchers: str, by: str, bundle: str = DEFAULT_BUNDLE, *,
                  width: int = 24, height: int = 6) -> Panel:
    """Firing verdicts as a table, the alert name shown as the verdict a person reads. Every row links to its
    runbook entry (the column ``runbook``: the alert name shown as its runbook_url), to the node view of its
    ``instance`` and to the job view of its ``training_job``."""
    rows = f"max by (alertname, severity, {by}) ({firing_selector(matchers, bundle)})"
    panel = table(
        title,
        description,
        "none",
        [Query(f'label_replace({rows}, "runbook", "$1", "alertname", "(.+)")', instant=True, table=True)],
        width=width,
        height=height,
        hide=("Time", "Value"),
        rename={"alertname": "verdict"},
    )
    panel = with_value_text(with_value_text(panel, "alertname", verdict_texts(bundle)), "runbook",
                            runbook_urls(bundle))
    s = Signals(bundle)
    links = [
        {"title": "Runbook entry of ${__data.fields.alertname}", "url": "${__data.fields.runbook}",
         "targetBlank": True},
        _view_link("Node view of ${__data.fields.instance}", s.uid(NODE_VIEW), ["instance"]),
        _view_link("Job view of ${__data.fields.training_job}", s.uid(JOB_VIEW), [JOB_LABEL, "instance"]),
    ]
    defaults = panel["fieldConfig"]["defaults"]
    return {**panel, "fieldConfig": {**panel["fieldConfig"], "defaults": {**defaults, "links": links}}}
