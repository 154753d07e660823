"""Whether the batches a CUDA rank's DataLoader yields sit in pinned (page-locked) host memory.

A copy to the GPU from pageable memory goes through a staging buffer the driver pins on the fly, and with
``non_blocking=True`` it is still synchronous with the host: the training thread waits for it instead of
queueing it (Nsight Systems' ``cuda_memcpy_async`` rule flags the same). ``pin_memory=True`` on the
DataLoader (or ``tensor.pin_memory()`` in a custom loader) makes the copy truly asynchronous.

The loader wrapper (``bottleneck_exporter.hook.loader``) hands this one batch in ``CHECK_EVERY``, and only
once the rank trains on CUDA; ``Tensor.is_pinned()`` reads the host allocator's bookkeeping (no device call,
no sync, ~0.4 µs). The counts travel in the datagram's ``host_batches`` and the exporter exposes::

    bottleneck_train_host_batches_total{training_job="bert",rank="0",memory="pageable"} 37.0
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

# One batch in this many is checked: enough to tell a pinned loader from a pageable one within a minute of
# training, too rare to show in the step time (benchmarks/hook_overhead.py measures the wrapper's cost).
CHECK_EVERY = 64
# A batch is a tensor, or tensors in tuples, lists and dicts: nested this deep at most, this many at most.
_MAX_DEPTH = 3
_MAX_TENSORS = 16


def host_tensors(batch: Any, depth: int = 0) -> Iterator[Any]:
    """The CPU tensors of a batch (those a training step copies to the GPU), in order."""
    device = getattr(batch, "device", None)
    if device is not None and hasattr(batch, "is_pinned"):
        if getattr(device, "type", None) == "cpu":
            yield batch
        return
    if depth >= _MAX_DEPTH:
        return
    items = batch.values() if isinstance(batch, dict) else batch if isinstance(batch, (tuple, list)) else ()
    for item in items:
        yield from host_tensors(item, depth + 1)


class PinCheck:
    """Checked batches by where their host tensors live: ``pinned`` (all of them page-locked) or ``pageable``
    (at least one is not). A batch without host tensors (already on the GPU, or no tensors) counts neither."""

    def __init__(self) -> None:
        self.pinned = 0
        self.pageable = 0

    def check(self, batch: Any) -> None:
        found = False
        for index, tensor in enumerate(host_tensors(batch)):
            if index >= _MAX_TENSORS:
                break
            found = True
            if not tensor.is_pinned():
                self.pageable += 1
                return
        if found:
            self.pinned += 1

    @property
    def checked(self) -> int:
        return self.pinned + self.pageable
