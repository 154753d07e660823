"""Verdict timeline: when each bottleneck verdict fired, and the signal behind it, straight from the catalogue.

Reads the firing verdict alerts (``ALERTS``) and the recording rules the heuristics compare; answers "since
when has this job been input-bound, how close is it to the line, and did the fix (more workers, a faster
disk) make the verdict go away?". Each verdict's panel takes its title, unit, thresholds, meaning, advice
and runbook link from exporter/heuristics.
"""

from __future__ import annotations

from typing import Any

from bottleneck_exporter.dashboards import verdict_catalogue
from bottleneck_exporter.dashboards.annotations import with_verdict_annotations
from bottleneck_exporter.dashboards.panels import (
    Panel,
    Query,
    Threshold,
    dashboard,
    row,
    state_timeline,
    timeseries,
    with_links,
)
from bottleneck_exporter.dashboards.signals import Signals
from bottleneck_exporter.dashboards.variables import CLUSTER, cluster_variable, job_variable, node_variable
from bottleneck_exporter.dashboards.verdict_catalogue import SEVERITY_COLORS, Verdict
from bottleneck_exporter.heuristics.model import GROUPS
from bottleneck_exporter.heuristics.sources import DEFAULT_BUNDLE
from bottleneck_exporter.wire.schema import JOB_LABEL

UID = "bottleneck-verdicts"
GROUP_TITLES = {
    "training": "Training jobs",
    "node": "Node: CPU, memory, IO, network",
    "gpu": "GPUs",
    "exporter": "Monitoring itself",
}


ROW_VERDICTS = 4  # verdict panels in one row of the dashboard


def matchers(verdict: Verdict) -> str:
    found = [CLUSTER, 'instance=~"$instance"']
    if JOB_LABEL in verdict.heuristic.scope:
        found.append(f'{JOB_LABEL}=~"${JOB_LABEL}"')
    return ", ".join(found)


def legend(verdict: Verdict, signal: str = "") -> str:
    """The subject's labels; with several signals, which one (``job_rank:bottleneck_train_step_seconds:...``
    reads "train_step_seconds")."""
    labels = " ".join(f"{{{{{label}}}}}" for label in verdict.heuristic.scope)
    return f"{labels} {signal.split(':')[1].removeprefix('bottleneck_')}" if signal else labels


def verdict_panel(verdict: Verdict) -> Panel:
    heuristic = verdict.heuristic
    tiers = ", ".join(f"{severity} at {value:g}" for severity, value in verdict.thresholds)
    text = f"{heuristic.verdict}: {verdict.meaning} Advice: {verdict.advice}"
    title = f"{heuristic.verdict} ({verdict.alert})"
    if verdict.signals:
        several = len(verdict.signals) > 1
        panel = timeseries(
            title,
            f"{text} The lines are the signals {verdict.alert} compares ({', '.join(verdict.signals)}); it "
            f"fires after {heuristic.for_} past the dashed threshold ({tiers}).",
            heuristic.unit,
            [Query(f"{signal}{{{matchers(verdict)}}}", legend(verdict, signal if several else ""))
             for signal in verdict.signals],
            width=8,
            min_value=0,
            thresholds=[Threshold(value, SEVERITY_COLORS[severity]) for severity, value in verdict.thresholds],
        )
    else:
        panel = state_timeline(
            title,
            f"{text} Shown as the alert's state (pending, then firing after {heuristic.for_}).",
            "none",
            [
                Query(
                    f'max by (alertstate, {", ".join(heuristic.scope)}) (ALERTS{{alertname="{verdict.alert}", '
                    f"{matchers(verdict)}}})",
                    f"{{{{alertstate}}}} {legend(verdict)}",
                )
            ],
            width=8,
            height=8,
            states={"1": ("active", SEVERITY_COLORS[heuristic.tiers[-1].severity])},
        )
    return with_links(panel, [("Runbook: " + verdict.alert, verdict.runbook_url)])


def build(regenerate: str, bundle: str = DEFAULT_BUNDLE) -> dict[str, Any]:
    s = Signals(bundle)
    firing = verdict_catalogue.firing_selector(f'{CLUSTER}, instance=~"$instance", training_job=~"$training_job"',
                                               bundle)
    timeline = state_timeline(
        "Verdicts over time",
        "One lane per verdict, node, job and rank: coloured while the verdict fires. Read it against a "
        "change you made (workers, batch size, storage) to see whether the verdict went away.",
        "none",
        [Query(f"max by (alertname, instance, training_job, rank) ({firing})",
               "{{alertname}} {{instance}} {{training_job}} {{rank}}")],
        states={"1": ("firing", "red")},
    )
    panels: list[Panel] = [row("Timeline"), timeline]
    for group in GROUPS:
        members = [v for v in verdict_catalogue.verdicts(bundle) if v.heuristic.group == group]
        # A row of a few verdicts each: the first opens with the dashboard, the rest stay collapsed until asked
        # for (the training area alone has some twenty verdicts, 80 grid units of panels).
        chunks = [members[i:i + ROW_VERDICTS] for i in range(0, len(members), ROW_VERDICTS)]
        for index, chunk in enumerate(chunks, start=1):
            part = f" ({index} of {len(chunks)})" if len(chunks) > 1 else ""
            panels.append(row(f"Evidence: {GROUP_TITLES.get(group, group)}{part}"))
            panels.extend(verdict_panel(v) for v in chunk)
    variables = [
        cluster_variable(),
        node_variable(bundle),
        job_variable(),
    ]
    return with_verdict_annotations(dashboard(
        s.uid(UID),
        s.title("Bottleneck / Verdict timeline"),
        "When each bottleneck verdict fired per node and job, "
        "and the signal each verdict compares against its threshold.",
        panels,
        variables,
        tags=s.tags("verdicts"),
        regenerate=regenerate,
    ), bundle)

