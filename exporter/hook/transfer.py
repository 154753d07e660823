"""The host-to-device copy of each training batch, where a framework moves batches in one known place:
Lightning's ``Strategy.batch_to_device`` (the training loop calls it on the trainer's strategy between fetching
a batch and ``on_train_batch_start``). Timed on the host, no device call. The exporter shows::

    bottleneck_train_host_to_device_seconds_total{training_job="resnet",rank="0"} 4.2
    bottleneck_train_host_to_device_copies_total{training_job="resnet",rank="0"} 1200.0

Why the host's wall time is what the copy costs the training thread (not the copy's device time): a copy from
pageable memory is synchronous with the host even with ``non_blocking=True`` (CUDA waits for the stream's
earlier work, then returns once the driver has staged the data in a pinned buffer of its own), so the time
includes waiting for the previous step's kernels; from pinned memory with ``non_blocking=True`` the call returns
once the copy is queued, and the copy overlaps compute. Either way the time is part of the rank's data wait
(the Lightning callback's data-wait phase runs from one batch's end to the next one's start).

Not timed, and why (docs/hook.md, "Host-to-device copies"): a plain loop's own ``batch.to(device)`` (timing it
would mean wrapping ``Tensor.to`` for every tensor of the process), and Hugging Face's Trainer, whose batches
accelerate's ``DataLoaderShard`` moves inside the DataLoader iterator (in data wait, with no hook of its own).
"""

from __future__ import annotations

from collections.abc import Callable
from time import perf_counter
from typing import Any


class CopyClock:
    """Seconds the training loop spent moving batches to the device, and how many it moved."""

    __slots__ = ("copies", "seconds")

    def __init__(self) -> None:
        self.seconds = 0.0
        self.copies = 0


class TimedTransfer:
    """A strategy's ``batch_to_device`` that adds its time to ``clock`` while ``training()`` is true (the
    validation loop and Lightning's sanity check call the same method: their copies are no training step's)."""

    def __init__(self, original: Callable[..., Any], clock: CopyClock, training: Callable[[], bool]) -> None:
        self.original = original
        self.clock = clock
        self.training = training

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            counted = self.training()
        except Exception:  # the hook never raises into training: an unknown trainer state is not counted
            counted = False
        if not counted:
            return self.original(*args, **kwargs)
        start = perf_counter()
        try:
            return self.original(*args, **kwargs)
        finally:
            self.clock.seconds += perf_counter() - start
            self.clock.copies += 1


def time_batch_transfers(strategy: Any, clock: CopyClock, training: Callable[[], bool]) -> bool:
    """Wrap ``strategy.batch_to_device`` on this one strategy object (not its class: other trainers in the
    process keep theirs); False where it has none or it is wrapped already."""
    original = getattr(strategy, "batch_to_device", None)
    if not callable(original) or isinstance(original, TimedTransfer):
        return False
    strategy.batch_to_device = TimedTransfer(original, clock, training)
    return True


def untime_batch_transfers(strategy: Any) -> None:
    """Give the strategy its own ``batch_to_device`` back (the instance attribute ``time_batch_transfers`` set)."""
    if isinstance(vars(strategy).get("batch_to_device"), TimedTransfer):
        del strategy.batch_to_device
