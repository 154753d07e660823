"""GPU time held idle: seconds in which a GPU's utilization stayed near zero, told apart by whether a process
held memory on it, and per process that held it, as counters the gpu collector exposes::

    bottleneck_gpu_idle_seconds_total{gpu="3",uuid="GPU-…",held="process"} 28800.0
    bottleneck_gpu_process_idle_seconds_total{gpu="3",uuid="GPU-…",process="ipykernel_launcher",local_rank=""} 28800.0

A GPU allocated to a pod is held whether or not a process has memory on it: the rules join the counter
with ``bottleneck_gpu_kubernetes_info`` on ``uuid`` for that (namespace, pod), and with
``bottleneck_training_process_info`` on ``process`` and ``local_rank`` for the training job.

Time is counted between two readings of the same GPU, on the backend's clock, when the busiest utilization
seen since the previous reading (the sub-second samples where the GPU has them, else GPU-Util) is at or
below the idle threshold: a GPU that worked a single sample since the last scrape is not idle.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

HELD_BY_PROCESS, NOT_HELD = "process", "none"


@dataclasses.dataclass(frozen=True)
class Reading:
    """One scrape's view of one GPU."""

    now: float  # backend clock, seconds
    busiest: float | None  # highest utilization since the previous reading, 0-1; None: unknown
    holders: frozenset[tuple[str, str]] | None  # (process, local_rank) holding memory; None: unknown


class IdleLedger:
    """Idle seconds per (GPU, held) and per (GPU, process, local_rank), carried between scrapes."""

    def __init__(self, idle_ratio: float) -> None:
        self.idle_ratio = idle_ratio
        self._last: dict[str, float] = {}
        self.gpu_seconds: dict[tuple[str, str], float] = {}
        self.process_seconds: dict[tuple[str, str, str], float] = {}

    def observe(self, gpu: str, reading: Reading) -> None:
        previous = self._last.get(gpu)
        self._last[gpu] = reading.now
        if reading.busiest is None:
            return
        held = HELD_BY_PROCESS if reading.holders else NOT_HELD
        for kind in (HELD_BY_PROCESS, NOT_HELD):
            self.gpu_seconds.setdefault((gpu, kind), 0.0)
        holders = reading.holders or frozenset()
        # A process's counter lives while it holds the GPU; it starts at 0 so increase() sees its first interval.
        kept = {key: seconds for key, seconds in self.process_seconds.items()
                if key[0] != gpu or key[1:] in holders}
        for process, local_rank in holders:
            kept.setdefault((gpu, process, local_rank), 0.0)
        self.process_seconds = kept
        if previous is None or reading.busiest > self.idle_ratio or reading.now <= previous:
            return
        elapsed = reading.now - previous
        self.gpu_seconds[(gpu, held)] += elapsed
        for process, local_rank in holders:
            self.process_seconds[(gpu, process, local_rank)] += elapsed

    def forget(self, present: Iterable[str]) -> None:
        """Drop the GPUs that are no longer listed (a MIG instance destroyed)."""
        keep = set(present)
        self._last = {gpu: at for gpu, at in self._last.items() if gpu in keep}
        self.gpu_seconds = {key: s for key, s in self.gpu_seconds.items() if key[0] in keep}
        self.process_seconds = {key: s for key, s in self.process_seconds.items() if key[0] in keep}
