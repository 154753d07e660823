"""Time a rank spends in its collectives: DDP's gradient all-reduce, timed by a communication hook.

DDP all-reduces each gradient bucket as soon as backward has filled it, so collectives overlap backward:
their time is a phase of its own, not part of the partition of the step. It is the host time during which
at least one of the rank's collectives was in flight (launched, not yet completed), which includes the time
spent waiting for the slowest peer to join::

    bottleneck_train_phase_seconds_total{training_job="resnet",rank="0",phase="collective"} 4.2

How: DDP's default all-reduce, registered as a communication hook (``torch.distributed`` ``allreduce_hook``,
the same arithmetic: divide by the world size, sum) whose launch and completion are timed with
``perf_counter()``; the completion is the future's callback, on whichever thread completes it. Nothing waits
on the device. Only on the gloo backend: there the future completes when the all-reduce has; on NCCL it
completes at launch (the wait is on the GPU stream), so host timing would say nothing. Not timed either: a
model that has its own communication hook (DDP takes one only), FSDP.

Imports torch only inside ``attach``, which runs once a DDP model is seen.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable
from time import perf_counter
from typing import Any

log = logging.getLogger("exporter.hook")


class CollectiveClock:
    """Collective intervals as they complete (``log``: start, end, start, end, ...), folded into the time
    covered by at least one of them."""

    def __init__(self) -> None:
        self.log: list[float] = []
        self._seconds = 0.0
        self._covered_until = 0.0  # the latest end folded so far
        self._folding = threading.Lock()

    def record(self, start: float, end: float) -> None:
        log = self.log
        log.append(start)
        log.append(end)

    def seconds(self) -> float:
        """Fold what completed so far; returns the cumulative time with a collective in flight."""
        with self._folding:
            log = self.log
            count = len(log) & ~1
            if count:
                pairs = sorted(zip(log[0:count:2], log[1:count:2], strict=True))
                del log[:count]
                seconds, covered = self._seconds, self._covered_until
                for start, end in pairs:
                    if end > covered:
                        seconds += end - max(start, covered)
                        covered = end
                self._seconds, self._covered_until = seconds, covered
            return self._seconds

    def forked(self) -> None:
        self._folding = threading.Lock()


def timed_allreduce(clock: CollectiveClock, allreduce: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """A DDP communication hook: ``allreduce`` (the default one), its launch and completion logged."""

    def bottleneck_timed_allreduce_hook(process_group: Any, bucket: Any) -> Any:
        start = perf_counter()

        def completed(future: Any) -> Any:
            clock.record(start, perf_counter())
            return future.value()

        return allreduce(process_group, bucket).then(completed)

    # DDP compares the hook's annotations with its own types (GradBucket, Future[Tensor]); these, strings
    # under postponed evaluation, would not match.
    bottleneck_timed_allreduce_hook.__annotations__ = {}
    return bottleneck_timed_allreduce_hook


def attach(clock: CollectiveClock, model: Any) -> bool:
    """Register the timed all-reduce on ``model`` if it is a DDP model on gloo without a hook of its own."""
    parallel = sys.modules.get("torch.nn.parallel")
    if parallel is None or not isinstance(model, parallel.DistributedDataParallel):
        return False
    if getattr(model, "_comm_hooks", None):
        log.info("bottleneck hook: the DDP model has its own communication hook; collective time not measured")
        return False
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    group = model.process_group
    if dist.get_backend(group) != "gloo":
        log.info("bottleneck hook: collective time is measured on the gloo backend only (this is %s)",
                 dist.get_backend(group))
        return False
    model.register_comm_hook(group, timed_allreduce(clock, allreduce_hook))
    return True
