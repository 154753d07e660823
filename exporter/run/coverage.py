"""What ``bottleneck-exporter run`` measured of the training, and what it could not see, read from the series it
sampled (the last value of each rank's counters).

The automatic instrumentation (``bottleneck_exporter.hook.auto``) attaches to what PyTorch exposes: a
``DataLoader``, a module called with gradients on, a ``torch.optim`` optimizer. A loop without one of them leaves
its phase at zero, which the verdicts would read as "no time there"; ``unseen`` says so instead::

    job train: the optimizer: no torch.optim optimizer stepped; every batch counts as a step

``measured`` is what the JSON report's ``run.measured`` holds (``refused``: its ``run.refused``)::

    {"training_job": "train", "rank": "0", "steps": 120.0, "samples": 480.0,
     "phase_seconds": {"data_wait": 10.2, "forward": 0.9, "backward": 1.7, "optimizer": 0.3, "step": 13.4}}
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bottleneck_exporter.heuristics.promql import SeriesStore
from bottleneck_exporter.wire.schema import JOB_LABEL

NO_TRAINING = ("the training: no process of the command sent step timings (it never imported torch, ran under "
               "python -I, -E or -S, which skip the instrumentation, or is not a Python program); the verdicts are "
               "the node's and its processes' alone, from /proc")
UNSEEN_PHASES = (
    ("data_wait", "data wait: no torch DataLoader was iterated with gradients on (a loader of its own, or one "
                  "iterated under no_grad)"),
    ("forward", "forward and backward: no model found (no module with parameters to train was called with "
                "gradients on after a DataLoader's iter()); they count as time outside the phases"),
    ("optimizer", "the optimizer: no torch.optim optimizer stepped; every batch counts as a step"),
)
_COUNTERS = {"bottleneck_train_steps_total": "steps", "bottleneck_train_samples_total": "samples"}


def measured(store: SeriesStore) -> list[dict[str, Any]]:
    """Each rank's last step and sample counts and phase seconds, by job and rank."""
    ranks: dict[tuple[str, str], dict[str, Any]] = {}
    for labels, _, values in store.series():
        name, job = labels.get("__name__", ""), labels.get(JOB_LABEL)
        if job is None or not values or (name not in _COUNTERS and name != "bottleneck_train_phase_seconds_total"):
            continue
        rank = ranks.setdefault((job, labels.get("rank", "")), {
            JOB_LABEL: job, "rank": labels.get("rank", ""), "steps": 0.0, "samples": 0.0, "phase_seconds": {}})
        if name in _COUNTERS:
            rank[_COUNTERS[name]] = values[-1]
        else:
            rank["phase_seconds"][labels.get("phase", "")] = values[-1]
    return [ranks[key] for key in sorted(ranks, key=lambda k: (k[0], int(k[1]) if k[1].isdigit() else 0, k[1]))]


def refused(store: SeriesStore) -> dict[str, float]:
    """The datagrams the receiver refused, by reason (none: an empty dict). From one run's own command, a refusal
    means two senders for one rank (``not_owner``, ``stale``) or a hook of another version (``bad_schema``)."""
    counts: dict[str, float] = {}
    for labels, _, values in store.series():
        if labels.get("__name__") == "bottleneck_push_rejected_total" and values and values[-1] > 0:
            counts[labels.get("reason", "")] = values[-1]
    return dict(sorted(counts.items()))


def unseen(ranks: Sequence[dict[str, Any]]) -> list[str]:
    """One line per thing nothing measured: the training as a whole, or a phase no rank of a job reported."""
    if not ranks:
        return [NO_TRAINING]
    lines = []
    for job in sorted({r[JOB_LABEL] for r in ranks}):
        of_job = [r for r in ranks if r[JOB_LABEL] == job]
        if not any(r["steps"] for r in of_job):
            lines.append(f"job {job}: no training step completed")
            continue
        lines += [f"job {job}: {text}" for phase, text in UNSEEN_PHASES
                  if not any(r["phase_seconds"].get(phase) for r in of_job)]
    return lines
