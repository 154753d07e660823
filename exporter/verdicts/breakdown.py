"""What the sampled window shows besides the verdicts: each rank's steps split into their phases, each GPU's
utilization.

Reads a series store labelled as Prometheus would label it (``verdicts.evaluation.Samples.store``). Per training
job and rank, the increase over the samples of (docs/metrics.md, "push receiver")::

    bottleneck_train_phase_seconds_total{training_job="resnet",rank="0",phase="data_wait"}  (and forward,
        backward, optimizer, step; collective where the hook times collectives)
    bottleneck_train_steps_total{training_job="resnet",rank="0"}

becomes a ``RankBreakdown``: seconds per step in each phase of the step's partition (``PARTITION``: the hook's
phases and ``other``, the loop's own code between them), their shares of the step, steps per second, and the time
in collectives (which overlaps forward and backward, so it is no part of the partition). Per GPU, the mean, lowest
and highest of ``bottleneck_gpu_utilization_ratio`` over the samples, or of dcgm-exporter's
``DCGM_FI_DEV_GPU_UTIL`` (a percentage) where that was read, becomes a ``GpuUtilization``.

``split`` is the arithmetic alone (phase seconds over some steps → shares and seconds per step), for any reader
of the same counters: the status page's ``status.model._phases`` computes the same split from its snapshots.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from bottleneck_exporter.heuristics import DCGM_TWINS
from bottleneck_exporter.heuristics.promql import SeriesStore
from bottleneck_exporter.wire.schema import COLLECTIVE, JOB_LABEL, STEP, STEP_PHASES

OTHER = "other"
# The phases that partition a step, in the order the hook runs them; ``other`` is the rest of the step.
PARTITION = (*STEP_PHASES, OTHER)
PHASE_SERIES = "bottleneck_train_phase_seconds_total"
STEPS_SERIES = "bottleneck_train_steps_total"
OURS_UTILIZATION = "bottleneck_gpu_utilization_ratio"
DCGM_UTILIZATION = DCGM_TWINS[OURS_UTILIZATION][0]  # DCGM_FI_DEV_GPU_UTIL, scale 0.01
WINDOW, RUN = "window", "run"  # what a rank's split covers: the sampled window, or the run since it started


@dataclasses.dataclass(frozen=True)
class StepSplit:
    """``steps`` steps: the seconds spent in each phase of ``PARTITION`` (``other`` is what the phases leave of
    the whole step), the whole step's seconds, the seconds with a collective in flight (None where not timed)."""

    steps: float
    seconds: dict[str, float]
    step_seconds: float
    collective_seconds: float | None = None

    @property
    def shares(self) -> dict[str, float]:
        return {name: value / self.step_seconds if self.step_seconds > 0 else 0.0
                for name, value in self.seconds.items()}

    @property
    def per_step(self) -> dict[str, float]:
        return {name: value / self.steps if self.steps > 0 else 0.0 for name, value in self.seconds.items()}

    @property
    def seconds_per_step(self) -> float | None:
        return self.step_seconds / self.steps if self.steps > 0 else None

    @property
    def collective_share(self) -> float | None:
        if self.collective_seconds is None or self.step_seconds <= 0:
            return None
        return self.collective_seconds / self.step_seconds


def split(phase_seconds: Mapping[str, float], steps: float) -> StepSplit:
    """The split of ``steps`` steps whose hook phases (``wire.schema.HOST_PHASES``, and ``collective`` where
    timed) took ``phase_seconds``. A phase the hook did not send counts 0; the phases never add up to more than
    the step (clock skew between them is clipped from ``other``)."""
    step = max(0.0, phase_seconds.get(STEP, 0.0))
    seconds = {name: max(0.0, phase_seconds.get(name, 0.0)) for name in STEP_PHASES}
    seconds[OTHER] = max(0.0, step - sum(seconds.values()))
    collective = phase_seconds.get(COLLECTIVE)
    return StepSplit(steps, seconds, step, None if collective is None else max(0.0, collective))


@dataclasses.dataclass(frozen=True)
class RankBreakdown:
    training_job: str
    rank: str
    instance: str
    over: str  # WINDOW: the increase over the samples; RUN: the totals since the rank started (no step in between)
    seconds: float  # from the rank's first sample to its last (0 for one sample)
    split: StepSplit

    @property
    def steps_per_second(self) -> float | None:
        return self.split.steps / self.seconds if self.over == WINDOW and self.seconds > 0 else None

    def as_dict(self) -> dict[str, Any]:
        shares, per_step = self.split.shares, self.split.per_step
        collective = self.split.collective_seconds
        return {
            "rank": self.rank, "instance": self.instance, "over": self.over, "seconds": self.seconds,
            "steps": self.split.steps, "steps_per_second": self.steps_per_second,
            "step_seconds": self.split.seconds_per_step,
            "phases": {name: {"share": shares[name], "seconds_per_step": per_step[name]} for name in PARTITION},
            "collective": None if collective is None else {
                "share": self.split.collective_share,
                "seconds_per_step": collective / self.split.steps if self.split.steps > 0 else 0.0},
        }


@dataclasses.dataclass(frozen=True)
class GpuUtilization:
    instance: str
    gpu: str
    uuid: str
    name: str  # the model, where the samples say it ("" where not)
    source: str  # the exporter whose series it is: bottleneck-exporter or dcgm-exporter
    series: str
    mean: float  # 0-1
    low: float
    high: float
    samples: int

    def as_dict(self) -> dict[str, Any]:
        return {"instance": self.instance, "gpu": self.gpu, "uuid": self.uuid, "name": self.name,
                "source": self.source, "series": self.series, "utilization_ratio": self.mean,
                "min_ratio": self.low, "max_ratio": self.high, "samples": self.samples}


def increase(values: Sequence[float]) -> float:
    """How much a counter grew over ``values`` (oldest first), across restarts: a value below the one before
    starts a new count, as Prometheus' ``increase`` takes it."""
    grown = 0.0
    for before, after in itertools.pairwise(values):
        grown += after - before if after >= before else after
    return grown


def ranks(store: SeriesStore) -> list[RankBreakdown]:
    """Every rank that pushed its step timings, by training job and rank (numerically)."""
    counters: dict[tuple[str, str, str], dict[str, tuple[list[float], list[float]]]] = {}
    for labels, times, values in store.series():
        name = labels["__name__"]
        if name not in (PHASE_SERIES, STEPS_SERIES) or JOB_LABEL not in labels or not times:
            continue
        key = (labels[JOB_LABEL], labels.get("rank", ""), labels.get("instance", ""))
        counters.setdefault(key, {})["steps" if name == STEPS_SERIES else labels.get("phase", "")] = (times, values)
    found = []
    for (job, rank, instance), series in counters.items():
        if "steps" not in series or STEP not in series:
            continue
        times, steps = series["steps"]
        phases = {name: increase(values) for name, (_, values) in series.items() if name != "steps"}
        grown = increase(steps)
        over = WINDOW
        if grown <= 0 or phases[STEP] <= 0:  # no step finished between the samples: the run's totals say more
            over = RUN
            phases = {name: values[-1] for name, (_, values) in series.items() if name != "steps"}
            grown = steps[-1]
        found.append(RankBreakdown(job, rank, instance, over, times[-1] - times[0], split(phases, grown)))
    return sorted(found, key=lambda r: (r.training_job, _number(r.rank), r.rank, r.instance))


def gpus(store: SeriesStore) -> list[GpuUtilization]:
    """Every GPU's utilization over the samples: ours, and dcgm-exporter's where it was read; by node and GPU."""
    names = {(labels.get("instance", ""), labels.get("gpu", ""), labels.get("uuid", "")): labels.get("name", "")
             for labels, _, _ in store.series() if labels["__name__"] == "bottleneck_gpu_info"}
    found = []
    for labels, _, values in store.series():
        name = labels["__name__"]
        if name == OURS_UTILIZATION:
            uuid, source, scale = labels.get("uuid", ""), "bottleneck-exporter", 1.0
            model = names.get((labels.get("instance", ""), labels.get("gpu", ""), uuid), "")
        elif name == DCGM_UTILIZATION.series:
            uuid, source, scale = labels.get("UUID", ""), "dcgm-exporter", DCGM_UTILIZATION.scale
            model = labels.get("modelName", "")
        else:
            continue
        finite = [v * scale for v in values if math.isfinite(v)]
        if finite:
            found.append(GpuUtilization(labels.get("instance", ""), labels.get("gpu", ""), uuid, model, source, name,
                                        sum(finite) / len(finite), min(finite), max(finite), len(finite)))
    return sorted(found, key=lambda g: (g.instance, _numbers(g.gpu), g.gpu, g.source))


def by_job(breakdowns: Iterable[RankBreakdown]) -> dict[str, list[RankBreakdown]]:
    jobs: dict[str, list[RankBreakdown]] = {}
    for breakdown in breakdowns:
        jobs.setdefault(breakdown.training_job, []).append(breakdown)
    return jobs


def _number(text: str) -> int:
    return int(text) if text.isdigit() else -1


def _numbers(gpu: str) -> tuple[int, ...]:
    """A GPU's order: ``0``, ``1``, and a MIG instance ``0/2/1`` after its GPU."""
    return tuple(_number(part) for part in gpu.split("/"))
