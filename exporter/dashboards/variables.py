"""The template variables several dashboards offer: ``$instance`` (node), ``$training_job`` (training job), ``$gpu``.

The dashboards' links carry their variables from one dashboard to the next (``includeVars``), so a node, a
job or a GPU must be found by the same query wherever it is offered; only the wording and whether one or
many may be picked differ per dashboard.
"""

from __future__ import annotations

from typing import Any

from exporter.dashboards.panels import query_variable
from exporter.push.schema import JOB_LABEL


def node_variable(*, single: bool = False, description: str = "Nodes (scrape targets).") -> dict[str, Any]:
    """Every node that is scraped (each serves ``bottleneck_scrape_collector_success``); ``single``: exactly one."""
    return query_variable(
        "instance",
        "Node",
        "label_values(bottleneck_scrape_collector_success, instance)",
        multi=not single,
        include_all=not single,
        description=description,
    )


def job_variable(
    *,
    single: bool = False,
    description: str = "Training jobs sent by the hook (label training_job); verdicts about a node have none.",
) -> dict[str, Any]:
    """Every training job whose hook pushed a step; ``single``: exactly one."""
    return query_variable(
        JOB_LABEL,
        "Training job",
        f"label_values(bottleneck_train_info, {JOB_LABEL})",
        multi=not single,
        include_all=not single,
        description=description,
    )


def gpu_variable(description: str = "NVML index, or parent/GI/CI for a MIG instance.") -> dict[str, Any]:
    """The GPUs of the selected ``$instance`` nodes."""
    return query_variable(
        "gpu",
        "GPU",
        'label_values(bottleneck_gpu_up{instance=~"$instance"}, gpu)',
        description=description,
    )
