"""Fleet overview: which nodes and jobs have a bottleneck verdict now, and how busy the fleet's GPUs are.

Reads the firing verdict alerts (``ALERTS``), GPU utilization, the GPU time held idle (by namespace, pod and
training job) and the training jobs' step timings across all ``$instance``; answers "where in the fleet is
training slow, and why?" and "who holds GPUs without using them?".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bottleneck_exporter.dashboards import node, verdict_catalogue
from bottleneck_exporter.dashboards.annotations import with_verdict_annotations
from bottleneck_exporter.dashboards.panels import (
    Panel,
    Query,
    Threshold,
    bargauge,
    dashboard,
    row,
    stat,
    table,
    timeseries,
)
from bottleneck_exporter.dashboards.signals import Signals, drawn
from bottleneck_exporter.dashboards.thresholds import threshold
from bottleneck_exporter.dashboards.variables import (
    CLUSTER,
    cluster_variable,
    gpu_variable,
    job_variable,
    node_variable,
)
from bottleneck_exporter.heuristics.sources import DEFAULT_BUNDLE

UID = "bottleneck-fleet"
N = f'{CLUSTER}, instance=~"$instance"'
GPUS = f'{N}, gpu=~"$gpu"'
RI = "$__rate_interval"


def verdict_panels(bundle: str) -> list[Panel]:
    firing = verdict_catalogue.firing_selector(f'{N}, training_job=~"$training_job"', bundle)
    return [
        row("Verdicts"),
        stat(
            "Verdicts firing",
            "Bottleneck verdicts firing now, by severity.",
            "count:verdicts",
            [Query(f"count by (severity) ({firing})", "{{severity}}")],
            width=6,
            height=8,
            thresholds=[Threshold(1, "orange")],
            decimals=0,
        ),
        verdict_catalogue.verdict_table(
            "Verdicts by node and job",
            "Every firing bottleneck verdict with the node, training job and rank it is about (a verdict "
            "about a node has no training job). The verdict timeline dashboard shows each verdict's "
            "signal, threshold, advice and runbook.",
            f'{N}, training_job=~"$training_job"',
            "instance, training_job, rank",
            bundle,
            width=18,
            height=8,
        ),
        bargauge(
            "Nodes per verdict",
            "How many nodes each verdict fires on: one verdict on many nodes points at "
            "a shared cause (storage, a bad image, a config rolled out everywhere).",
            "count:nodes",
            [Query(f"count by (alertname) (max by (alertname, instance) ({firing}))", "{{alertname}}", instant=True)],
            width=24,
            height=6,
            min_value=0,
        ),
    ]


def gpu_panels(s: Signals) -> list[Panel]:
    return [
        row("GPU utilization across the fleet"),
        drawn(
            s, stat,
            "Fleet GPU utilization",
            "Mean nvidia-smi GPU-Util over every GPU in the selection.",
            "percentunit",
            [s.query("gpu_util", GPUS, around=lambda util: f"avg({util})")],
            width=6,
        ),
        drawn(
            s, stat,
            "GPUs up / down",
            "GPUs answering NVML, and GPUs lost (GPU_IS_LOST: drain the node).",
            "count:GPUs",
            [
                s.query("gpu_up", N, "up", around=lambda up: f"sum({up})"),
                s.query("gpu_up", N, "down", around=lambda up: f"count({up} == 0) or vector(0)"),
            ],
            width=6,
            decimals=0,
        ),
        drawn(
            s, stat,
            "Idle GPU memory held",
            "GPUs holding over half their memory while under 10% utilized: capacity "
            "reserved by jobs that do not use it.",
            "count:GPUs",
            [s.query(("gpu_mem", "gpu_util"), N, around=lambda mem, util: f"count(({mem} > 0.5) and ({util} < 0.1))")],
            width=6,
            decimals=0,
        ),
        stat(
            "Training jobs reporting",
            "Training jobs whose hook pushed a step to any exporter.",
            "count:jobs",
            [Query(f'count(count by (training_job) (bottleneck_train_info{{{N}, training_job=~"$training_job"}}))')],
            width=6,
            decimals=0,
        ),
        drawn(
            s, timeseries,
            "GPU utilization per node",
            "Mean GPU-Util of each node's GPUs.",
            "percentunit",
            [s.query("gpu_util", GPUS, "{{instance}}", around=lambda util: f"avg by (instance) ({util})")],
            width=12,
            min_value=0,
            max_value=1,
        ),
        drawn(
            s, bargauge,
            "Least busy GPUs",
            "The ten GPUs with the lowest mean utilization over the selected range: "
            "where to look first for an input-bound or idle job.",
            "percentunit",
            [s.query("gpu_util", GPUS, "{{instance}} GPU {{gpu}}", around=lambda util: f"bottomk(10, {util})",
                     window="$__range", instant=True)],
            width=12,
            min_value=0,
            max_value=1,
        ),
    ]


def held_idle_panels(s: Signals) -> list[Panel]:
    """Idle GPU-hours over the dashboard's range, by who held the GPUs (BottleneckGpuHeldIdle names them live)."""
    # A pod's GPU is held by it whether or not a process has memory on it; a time-sliced GPU counts for each pod.
    pods = f"max by (instance, uuid, namespace, pod) (max_over_time(bottleneck_gpu_kubernetes_info{{{N}}}[$__range]))"
    trainers = f"max by (instance, process, local_rank, training_job) (bottleneck_training_process_info{{{N}}})"

    # The idle share of each GPU averaged over the range, times the range: its idle GPU-hours.
    def hours(idle: str) -> str:
        return f"avg_over_time(({idle})[$__range:$__rate_interval]) * $__range_s / 3600"

    def by_pod(labels: str) -> Callable[[str], str]:
        return lambda idle: (f"sort_desc(topk(10, sum by ({labels}) ({pods} * on (instance, uuid) group_left () "
                             f"sum by (instance, uuid) ({hours(idle)}))))")

    def by_job(idle: str) -> str:
        return (f"sort_desc(topk(10, sum by (training_job) (sum by (instance, process, local_rank) ({hours(idle)}) "
                f"* on (instance, process, local_rank) group_left (training_job) {trainers})))")

    return [
        row("GPUs held idle"),
        drawn(
            s, bargauge,
            "Idle GPU-hours by namespace",
            "GPU-hours in the selected range during which a GPU allocated to a pod of the namespace stayed idle "
            "(utilization at or below the gpu collector's idle-ratio); a GPU that changed pods within the range "
            "counts for each.",
            "h",
            [s.query("gpu_idle_share", N, "{{namespace}}", around=by_pod("namespace"), instant=True)],
            width=8,
            min_value=0,
        ),
        drawn(
            s, bargauge,
            "Idle GPU-hours by pod",
            "The ten pods whose allocated GPUs stayed idle longest in the selected range: a notebook left "
            "open overnight shows up here the next morning.",
            "h",
            [s.query("gpu_idle_share", N, "{{namespace}}/{{pod}}", around=by_pod("namespace, pod"), instant=True)],
            width=8,
            min_value=0,
        ),
        drawn(
            s, bargauge,
            "Idle GPU-hours by training job",
            "GPU-hours in the selected range during which a training process of the job held memory on an "
            "idle GPU (the ten largest; processes the hook does not name have an empty job).",
            "h",
            [s.query("gpu_process_idle_share", N, "{{training_job}}", around=by_job, instant=True)],
            width=8,
            min_value=0,
        ),
    ]


def job_panels(s: Signals) -> list[Panel]:
    data_wait = threshold("data_wait_ratio")
    jobs = f'{N}, training_job=~"$training_job"'
    return [
        row("Training jobs"),
        timeseries(
            "Data-wait share per job",
            "Share of the job's step time spent waiting for data, all ranks "
            "together; above the line the job is input-bound.",
            "percentunit",
            [
                Query(
                    f'sum by (training_job) (rate(bottleneck_train_phase_seconds_total{{{jobs}, phase="data_wait"}}'
                    f"[{RI}])) / sum by (training_job) (rate(bottleneck_train_phase_seconds_total{{{jobs}, "
                    f'phase="step"}}[{RI}]))',
                    "{{training_job}}",
                )
            ],
            width=12,
            min_value=0,
            max_value=1,
            thresholds=[Threshold(data_wait, "red")],
        ),
        timeseries(
            "Samples per second per job",
            "Training throughput of each job, all ranks together.",
            "count:samples/s",
            [Query(f"sum by (training_job) (rate(bottleneck_train_samples_total{{{jobs}}}[{RI}]))",
                   "{{training_job}}")],
            width=12,
            min_value=0,
        ),
        drawn(
            s, timeseries,
            "CPU busy per node",
            "Share of all CPU time busy on each node (not idle, not iowait), as the CPU-saturated verdict "
            "counts it against the dashed line.",
            "percentunit",
            [s.query("cpu_busy", N, "{{instance}}")],
            width=12,
            min_value=0,
            max_value=1,
            thresholds=[Threshold(threshold("cpu_busy_ratio"), "red")],
        ),
        table(
            "Failing collectors",
            "Collectors that failed on their last scrape, per node (the rest of the scrape still works).",
            "none",
            [Query(f"bottleneck_scrape_collector_success{{{N}}} == 0", instant=True, table=True)],
            width=12,
            hide=("Time", "Value", "__name__"),
        ),
    ]


def build(regenerate: str, bundle: str = DEFAULT_BUNDLE) -> dict[str, Any]:
    s = Signals(bundle)
    variables = [
        cluster_variable(),
        node_variable(bundle),
        job_variable(),
        gpu_variable(bundle),
    ]
    links = [
        {
            "type": "link",
            "title": "Node view",
            "url": f"/d/{s.uid(node.UID)}",
            "includeVars": False,
            "keepTime": True,
            "tooltip": "nvidia-smi + htop + iotop for one node",
        }
    ]
    panels = [*verdict_panels(bundle), *gpu_panels(s), *held_idle_panels(s), *job_panels(s)]
    return with_verdict_annotations(dashboard(
        s.uid(UID),
        s.title("Bottleneck / Fleet overview"),
        "Bottleneck verdicts per node and job, and GPU utilization across the fleet.",
        panels,
        variables,
        tags=s.tags("fleet"),
        links=links,
        regenerate=regenerate,
    ), bundle)

