"""Training-job view: where each rank's step time goes, from the hook's per-step timings.

Reads the push receiver's ``bottleneck_train_*`` series for one ``$training_job`` (and ``$rank``); answers "is this
job input-bound, compute-bound or held back by one rank, and how fast is it going?".
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
    query_variable,
    row,
    stat,
    table,
    timeseries,
)
from bottleneck_exporter.dashboards.signals import Signals, drawn
from bottleneck_exporter.dashboards.thresholds import threshold
from bottleneck_exporter.dashboards.variables import CLUSTER, cluster_variable, gpu_variable, job_variable
from bottleneck_exporter.heuristics.catalogue import HEURISTICS, signal
from bottleneck_exporter.heuristics.sources import DEFAULT_BUNDLE

UID = verdict_catalogue.JOB_VIEW
# The panel of step time against the median draws what this verdict compares, in its unit.
STRAGGLER = next(h for h in HEURISTICS if h.name == "StragglerRank")
J = f'{CLUSTER}, training_job=~"$training_job", rank=~"$rank"'
RI = "$__rate_interval"


def phase_rate(phase: str, by: str = "rank") -> str:
    return f'sum by ({by}) (rate(bottleneck_train_phase_seconds_total{{{J}, phase="{phase}"}}[{RI}]))'


def steps_rate(by: str = "rank") -> str:
    return f"sum by ({by}) (rate(bottleneck_train_steps_total{{{J}}}[{RI}]))"


def mean_step_seconds(by: str = "rank, instance") -> str:
    return f"{phase_rate('step', by)} / {steps_rate(by)}"


def step_panels() -> list[Panel]:
    data_wait = threshold("data_wait_ratio")
    return [
        row("Step time"),
        timeseries(
            "Step time by phase, per rank",
            "Mean seconds per optimizer step spent waiting for data, in "
            "forward, backward and the optimizer, stacked per rank. A tall data_wait bar is an input-bound "
            "job; time not covered by the four phases is your own code between steps. Time in collectives "
            "overlaps backward and is not stacked here (panel below).",
            "s",
            [
                Query(
                    f"sum by (rank, phase) (rate(bottleneck_train_phase_seconds_total{{{J}, "
                    f'phase!~"step|collective"}}[{RI}])) / ignoring(phase) group_left {steps_rate()}',
                    "rank {{rank}} {{phase}}",
                )
            ],
            width=16,
            height=9,
            stack=True,
            bars=True,
            min_value=0,
        ),
        stat(
            "Data-wait share (job)",
            "Share of all ranks' step time spent waiting for the DataLoader; above "
            "the input-bound threshold the GPUs starve for data.",
            "percentunit",
            [Query(f"{phase_rate('data_wait', 'training_job')} / {phase_rate('step', 'training_job')}")],
            width=8,
            height=9,
            thresholds=[Threshold(data_wait, "red")],
        ),
        timeseries(
            "Data-wait share per rank",
            "Share of each rank's step time spent inside the DataLoader iterator's __next__.",
            "percentunit",
            [Query(signal("data_wait", J), "rank {{rank}}")],
            width=12,
            min_value=0,
            max_value=1,
            thresholds=[Threshold(data_wait, "red")],
        ),
        timeseries(
            "Step time p50 / p90 per rank",
            "Whole-step time quantiles from the hook's step-time histogram.",
            "s",
            [
                Query(
                    f"histogram_quantile(0.5, sum by (rank, le) "
                    f"(rate(bottleneck_train_step_duration_seconds_bucket{{{J}}}[{RI}])))",
                    "p50 rank {{rank}}",
                ),
                Query(
                    f"histogram_quantile(0.9, sum by (rank, le) "
                    f"(rate(bottleneck_train_step_duration_seconds_bucket{{{J}}}[{RI}])))",
                    "p90 rank {{rank}}",
                ),
            ],
            width=12,
            min_value=0,
        ),
        timeseries(
            "Time in collectives per rank",
            "Share of each rank's step with a collective (DDP's gradient all-reduce) in flight, waiting for "
            "peers included. It overlaps backward, so it is no part of the stacked phases; above the line the "
            "backward cannot hide it (communication-bound). The rank that waits least is the one the others "
            "wait for.",
            "percentunit",
            [Query(signal("collective", J), "rank {{rank}}")],
            width=24,
            min_value=0,
            max_value=1,
            thresholds=[Threshold(threshold("collective_ratio"), "red")],
        ),
    ]


def throughput_panels() -> list[Panel]:
    straggler = threshold("straggler_factor")
    return [
        row("Throughput and stragglers"),
        timeseries(
            "Samples per second",
            "Samples consumed per second by each rank and by the whole job.",
            "count:samples/s",
            [
                Query(f"sum by (rank) (rate(bottleneck_train_samples_total{{{J}}}[{RI}]))", "rank {{rank}}"),
                Query(f"sum(rate(bottleneck_train_samples_total{{{J}}}[{RI}]))", "job total"),
            ],
            width=8,
            min_value=0,
        ),
        timeseries(
            "Steps per second",
            "Optimizer steps per second per rank; in data-parallel training the ranks "
            "move in lockstep, so one slow rank slows them all.",
            "count:steps/s",
            [Query(steps_rate(), "rank {{rank}}")],
            width=8,
            min_value=0,
        ),
        timeseries(
            "Step time relative to the job median",
            "Each rank's mean step time, and its own work per step (the step minus its wait in collectives), "
            "divided by the median over the job's ranks, as BottleneckStragglerRank compares them: a rank "
            "above the straggler threshold in either holds the others back (slow node, throttled GPU, or its "
            "own data loading). Under synchronous DDP the all-reduce evens step times out, so there only the "
            "own work tells the slow rank.",
            STRAGGLER.unit,
            [
                Query(signal("step_vs_median", J), "rank {{rank}} ({{instance}}) step"),
                Query(signal("own_vs_median", J), "rank {{rank}} ({{instance}}) own work"),
            ],
            width=8,
            min_value=0,
            thresholds=[Threshold(straggler, "red")],
        ),
        table(
            "Ranks",
            "Each rank with its node, local rank, world size, device, mean step time and seconds since "
            "its last step (a growing age with a live process is a stall).",
            "s",
            [
                Query(
                    "max by (training_job, rank, instance, local_rank, world_size, device) "
                    f"(bottleneck_train_info{{{J}}})",
                    instant=True,
                    table=True,
                ),
                Query(mean_step_seconds("training_job, rank, instance"), instant=True, table=True),
                Query(
                    "time() - max by (training_job, rank, instance) "
                    f"(bottleneck_train_last_step_timestamp_seconds{{{J}}})",
                    instant=True,
                    table=True,
                ),
            ],
            width=24,
            rename={"Value #A": "info", "Value #B": "mean step (s)", "Value #C": "since last step (s)"},
            hide=("Time", "Value #A"),
        ),
    ]


def gpu_panels(s: Signals) -> list[Panel]:
    return [
        row("GPU busy vs step"),
        timeseries(
            "GPU busy share of the step",
            "GPU busy time (CUDA events, first to last mark of a step) per "
            "second of step time; low while data_wait is high is the input-bound picture. Empty for CPU "
            "jobs.",
            "percentunit",
            [
                Query(
                    f"sum by (rank) (rate(bottleneck_train_gpu_busy_seconds_total{{{J}}}[{RI}])) / "
                    f"{phase_rate('step')}",
                    "rank {{rank}}",
                )
            ],
            width=12,
            min_value=0,
            max_value=1,
        ),
        timeseries(
            "GPU time per step by phase",
            "GPU seconds per step for forward, backward and optimizer, "
            "measured with CUDA events (host timers only see when work was enqueued).",
            "s",
            [
                Query(
                    f"sum by (rank, phase) (rate(bottleneck_train_gpu_phase_seconds_total{{{J}}}[{RI}])) "
                    f"/ ignoring(phase) group_left {steps_rate()}",
                    "rank {{rank}} {{phase}}",
                )
            ],
            width=12,
            stack=True,
            min_value=0,
        ),
        timeseries(
            "CUDA memory",
            "torch.cuda allocated, reserved and peak allocated bytes per rank.",
            "bytes",
            [
                Query(f"bottleneck_train_cuda_memory_allocated_bytes{{{J}}}", "allocated rank {{rank}}"),
                Query(f"bottleneck_train_cuda_memory_reserved_bytes{{{J}}}", "reserved rank {{rank}}"),
                Query(f"bottleneck_train_cuda_memory_peak_bytes{{{J}}}", "peak rank {{rank}}"),
            ],
            width=12,
            min_value=0,
        ),
        drawn(
            s, timeseries,
            "Node GPU utilization",
            "nvidia-smi GPU-Util of the GPUs on the job's nodes, for comparison with the job's own GPU busy share.",
            "percentunit",
            [s.query("gpu_util", f'{CLUSTER}, instance=~"$instance", gpu=~"$gpu"', "{{instance}} GPU {{gpu}}")],
            width=12,
            min_value=0,
            max_value=1,
        ),
    ]


def loader_panels() -> list[Panel]:
    return [
        row("DataLoader"),
        table(
            "DataLoader settings",
            "What each rank's DataLoader was built with: num_workers=0 makes the "
            "training loop load its own data; pin_memory and persistent_workers off cost copies and "
            "restarts.",
            "none",
            [
                Query(f"max by (rank) (bottleneck_train_dataloader_{setting}{{{J}}})", instant=True, table=True)
                for setting in (
                    "num_workers",
                    "batch_size",
                    "prefetch_factor",
                    "pin_memory",
                    "persistent_workers",
                )
            ],
            width=24,
            hide=("Time",),
            rename={
                "Value #A": "num_workers",
                "Value #B": "batch_size",
                "Value #C": "prefetch_factor",
                "Value #D": "pin_memory",
                "Value #E": "persistent_workers",
            },
        ),
    ]


def build(regenerate: str, bundle: str = DEFAULT_BUNDLE) -> dict[str, Any]:
    s = Signals(bundle)
    variables = [
        cluster_variable(),
        job_variable(single=True, description="Training job name sent by the hook."),
        query_variable(
            "rank",
            "Rank",
            f'label_values(bottleneck_train_info{{{CLUSTER}, training_job=~"$training_job"}}, rank)',
            description="Global ranks of the job.",
        ),
        query_variable(
            "instance",
            "Node",
            f'label_values(bottleneck_train_info{{{CLUSTER}, training_job=~"$training_job"}}, instance)',
            description="Nodes the job's ranks run on.",
        ),
        gpu_variable(bundle, "GPUs on the job's nodes."),
    ]
    verdicts = verdict_catalogue.verdict_table(
        "Verdicts on this job",
        "Bottleneck verdicts firing now about this job's ranks (input-bound, IO-bound, straggler, stalled, "
        "imbalance, launch-bound). The verdict timeline dashboard shows each one's signal and advice.",
        'training_job=~"$training_job"',
        "instance, training_job, rank",
        bundle,
        height=5,
    )
    panels = [row("Verdicts"), verdicts, *step_panels(), *throughput_panels(), *gpu_panels(s), *loader_panels()]
    return with_verdict_annotations(dashboard(
        s.uid(UID),
        s.title("Bottleneck / Training job"),
        "One training job: step time split into data wait, "
        "forward, backward and optimizer per rank, data-wait share, samples/s, stragglers and GPU "
        "busy vs step.",
        panels,
        variables,
        tags=s.tags("training"),
        regenerate=regenerate,
    ), bundle)

