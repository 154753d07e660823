"""Verdict timeline: when each bottleneck verdict fired, on which node and job.

Reads the firing verdict alerts (``ALERTS``); answers "since when has this job been input-bound, and did the
fix (more workers, a faster disk) make the verdict go away?".
"""

from __future__ import annotations

from typing import Any

from exporter.dashboards import verdict_catalogue
from exporter.dashboards.panels import Query, dashboard, query_variable, row, state_timeline

UID = "bottleneck-verdicts"


def build(regenerate: str) -> dict[str, Any]:
    firing = verdict_catalogue.firing_selector('instance=~"$instance", job=~"$job"')
    panels = [
        row("Timeline"),
        state_timeline(
            "Verdicts over time",
            "One lane per verdict, node and job: coloured while the verdict "
            "fires. Read it against a change you made (workers, batch size, storage) to see whether "
            "the verdict went away.",
            "none",
            [
                Query(
                    f"max by (alertname, instance, job, rank) ({firing})",
                    "{{alertname}} {{instance}} {{job}} {{rank}}",
                )
            ],
            states={"1": ("firing", "red")},
        ),
    ]
    variables = [
        query_variable(
            "instance",
            "Node",
            "label_values(bottleneck_scrape_collector_success, instance)",
            description="Nodes (scrape targets).",
        ),
        query_variable(
            "job",
            "Training job",
            "label_values(bottleneck_train_info, job)",
            description="Training jobs sent by the hook; verdicts about a node carry the scrape job.",
        ),
    ]
    return dashboard(
        UID,
        "Bottleneck / Verdict timeline",
        "When each bottleneck verdict fired, per node and job.",
        panels,
        variables,
        tags=["verdicts"],
        regenerate=regenerate,
    )
