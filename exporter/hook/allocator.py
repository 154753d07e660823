"""The CUDA caching allocator's trouble, read from ``torch.cuda.memory_stats()``: host-side counters of the
allocator, no device synchronisation. Sent in the datagram's ``gpu`` object beside the memory it holds::

    bottleneck_train_cuda_allocator_retries_total{training_job="llm",rank="0"} 12.0
    bottleneck_train_cuda_allocator_ooms_total{training_job="llm",rank="0"} 0.0

A retry is a ``cudaMalloc`` that failed, after which the allocator freed its cached blocks (``cudaFree``
synchronises the device) and tried again; an OOM is one that failed again. Their fragmentation, reserved minus
allocated, the exporter's rules compute from the memory the session already sends.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bottleneck_exporter.wire.schema import GPU_ALLOCATOR

# The key of each GPU_ALLOCATOR reading in torch.cuda.memory_stats().
_STATS = dict(zip(GPU_ALLOCATOR, ("num_alloc_retries", "num_ooms"), strict=True))


def allocator_readings(stats: Mapping[str, Any]) -> dict[str, int]:
    """The GPU_ALLOCATOR counts in ``stats`` (a ``torch.cuda.memory_stats()`` dict); one that is missing or
    not a count (another torch's dict, an allocator that keeps none: ``{}`` before CUDA is initialised) is
    left out, never guessed."""
    readings = {}
    for key, name in _STATS.items():
        value = stats.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            readings[key] = value
    return readings
