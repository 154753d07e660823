"""The template variables several dashboards offer: ``$cluster``, ``$instance`` (node), ``$training_job`` (training
job), ``$gpu``; ``CLUSTER`` narrows a selector to the picked clusters.

The dashboards' links carry their variables from one dashboard to the next (``includeVars``), so a node, a
job or a GPU must be found by the same query wherever it is offered; only the wording and whether one or
many may be picked differ per dashboard.
"""

from __future__ import annotations

from typing import Any

from bottleneck_exporter.dashboards.panels import query_variable
from bottleneck_exporter.heuristics.parameters import PARAMETERS
from bottleneck_exporter.heuristics.sources import BUNDLES, DEFAULT_BUNDLE, OURS
from bottleneck_exporter.wire.schema import JOB_LABEL

# The label the rules keep apart (the catalogue's cluster_label). Where no series has it (one Prometheus, one
# cluster) the variable has no value, "All" stands for ".*", and that matches the absent label too.
CLUSTER_LABEL = str(PARAMETERS["cluster_label"].default)
CLUSTER = f'{CLUSTER_LABEL}=~"${CLUSTER_LABEL}"'


def _series(bundle: str, *candidates: str) -> str:
    """The first of our series ``candidates`` that ``bundle`` holds, as it holds it (ours or a peer's twin)."""
    found = next(filter(None, (BUNDLES[bundle].series(name) for name in candidates)), None)
    if found is None:
        raise ValueError(f"bundle {bundle} holds none of {', '.join(candidates)}")
    return found


def cluster_variable() -> dict[str, Any]:
    """Every cluster any target is scraped in (``up`` exists wherever a target is, remote-written or not)."""
    return query_variable(
        CLUSTER_LABEL,
        "Cluster",
        f"label_values(up, {CLUSTER_LABEL})",
        description="Clusters (the label each cluster's Prometheus or agent adds); empty with a single cluster.",
    )


def node_variable(bundle: str = DEFAULT_BUNDLE, *, single: bool = False,
                  description: str = "Nodes (scrape targets).") -> dict[str, Any]:
    """Every node whose host series the bundle reads: each our exporter scrapes (it serves
    ``bottleneck_scrape_collector_success``), or each node_exporter scrapes; ``single``: exactly one."""
    series = ("bottleneck_scrape_collector_success" if BUNDLES[bundle].host == OURS
              else _series(bundle, "bottleneck_load1"))
    return query_variable(
        "instance",
        "Node",
        f"label_values({series}{{{CLUSTER}}}, instance)",
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
        f"label_values(bottleneck_train_info{{{CLUSTER}}}, {JOB_LABEL})",
        multi=not single,
        include_all=not single,
        description=description,
    )


def gpu_variable(bundle: str = DEFAULT_BUNDLE,
                 description: str = "NVML index, or parent/GI/CI for a MIG instance.") -> dict[str, Any]:
    """The GPUs of the selected ``$instance`` nodes, from the bundle's GPU source (dcgm-exporter's ``gpu`` label
    is the same index)."""
    series = _series(bundle, "bottleneck_gpu_up", "bottleneck_gpu_utilization_ratio")
    return query_variable(
        "gpu",
        "GPU",
        f'label_values({series}{{{CLUSTER}, instance=~"$instance"}}, gpu)',
        description=description,
    )
