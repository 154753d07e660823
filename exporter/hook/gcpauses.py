"""Time the training process spends in Python's garbage collector, by generation, from ``gc.callbacks``.

The interpreter calls every entry of ``gc.callbacks`` at the start and at the stop of each collection, on the
thread that collects, holding the GIL: a collection stops every Python thread, the training thread too,
whichever thread ran it. ``GcClock`` is such an entry; the session sends its totals in each datagram, which
the exporter turns into::

    bottleneck_train_gc_seconds_total{training_job="resnet",rank="0",generation="2"} 41.5
    bottleneck_train_gc_collections_total{training_job="resnet",rank="0",generation="2"} 420.0

A callback costs about a microsecond per collection (two calls, one clock read each); young collections come
every few hundred allocations, a few per step of a plain loop (benchmarks/hook_overhead.py measures them with
the rest). Never raises: an exception out of a gc callback would be printed by the interpreter on every
collection.
"""

from __future__ import annotations

import contextlib
import gc
from time import perf_counter
from typing import Any

GENERATIONS = 3  # gc.get_count(): generations 0, 1 and 2 (the oldest; a full collection)


class GcClock:
    __slots__ = ("_started", "collections", "seconds")

    def __init__(self) -> None:
        self.seconds = [0.0] * GENERATIONS
        self.collections = [0] * GENERATIONS
        self._started: float | None = None

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        try:
            if phase == "start":
                self._started = perf_counter()
                return
            started = self._started
            if started is None:  # attached during a collection: its start went unseen
                return
            self._started = None
            generation = info["generation"]
            self.seconds[generation] += perf_counter() - started
            self.collections[generation] += 1
        except Exception:  # an unexpected info (a generation the interpreter added) costs that collection only
            return

    def attach(self) -> None:
        if not any(entry is self for entry in gc.callbacks):
            gc.callbacks.append(self)

    def detach(self) -> None:
        with contextlib.suppress(ValueError):
            gc.callbacks.remove(self)
