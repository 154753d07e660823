"""Time the training process spends in Python's garbage collector, by generation, from ``gc.callbacks``.

The interpreter calls every entry of ``gc.callbacks`` at the start and at the stop of each collection, on the
thread that collects, holding the GIL: a collection stops every Python thread, the training thread too,
whichever thread ran it. ``GcClock`` registers such an entry; the session sends its totals in each datagram,
which the exporter turns into::

    bottleneck_train_gc_seconds_total{training_job="resnet",rank="0",generation="2"} 41.5
    bottleneck_train_gc_collections_total{training_job="resnet",rank="0",generation="2"} 420.0

What a collection costs the training thread, beyond the collection (benchmarks/hook_overhead.py --idle
collections): the interpreter's own part of calling any entry of ``gc.callbacks`` (it builds an info dict and
a phase string for each call, twice per collection), which no entry can avoid, and the entry's own code. So the
entry is a plain function (a callable object costs the interpreter a method lookup per call) that only logs:
the clock's reading at the start, the clock's reading and the generation at the stop; the log is folded into
the totals when they are read (once a datagram) or when it grows long. Never raises: an exception out of a gc
callback would be printed by the interpreter on every collection.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Callable
from time import perf_counter
from typing import Any

GENERATIONS = 3  # gc.get_count(): generations 0, 1 and 2 (the oldest; a full collection)
# Entries of the log past which the callback folds it (three per collection): bounds memory when nothing
# reads the totals (the hook's address is off).
LOG_LIMIT = 3 << 12


class GcClock:
    __slots__ = ("_collections", "_first", "_folding", "_log", "_second", "_seconds", "callback")

    def __init__(self) -> None:
        self._seconds = [0.0] * GENERATIONS
        self._collections = [0] * GENERATIONS
        # Flat, as the collections come: start time, stop time, generation (an int; -1 when unknown).
        log: list[float | int] = []
        self._log = log
        # The clock readings not yet closed by a generation: a collection's start (and stop) in progress.
        self._first: float | None = None
        self._second: float | None = None
        self._folding = threading.Lock()
        append = log.append
        fold = self._fold_unless_folding

        def bottleneck_gc_clock(phase: str, info: dict[str, Any], _append: Callable[[Any], None] = append,
                                _now: Callable[[], float] = perf_counter) -> None:
            _append(_now())
            if phase == "stop":
                try:
                    _append(info["generation"])
                    if len(log) > LOG_LIMIT:
                        fold()
                except Exception:  # an info without it (another interpreter): that collection is not counted
                    _append(-1)

        self.callback = bottleneck_gc_clock

    @property
    def seconds(self) -> list[float]:
        """Seconds in collections so far, by generation."""
        self.fold()
        return list(self._seconds)

    @property
    def collections(self) -> list[int]:
        """Collections so far, by generation."""
        self.fold()
        return list(self._collections)

    def totals(self) -> tuple[list[float], list[int]]:
        """Seconds and collections by generation, from one fold."""
        self.fold()
        return list(self._seconds), list(self._collections)

    def logged(self) -> int:
        """Entries logged and not yet folded (three per collection)."""
        return len(self._log)

    def fold(self, wait: bool = True) -> None:
        """Turn the collections logged so far into the totals; with ``wait=False`` only if no other fold runs.
        The session folds at its step ends' folds (benchmarks/hook_overhead.py: folded only when a datagram
        reads them, a second of collections made the datagram several times dearer)."""
        folding = self._folding
        if not folding.acquire(blocking=wait):
            return
        try:
            self._fold()
        finally:
            folding.release()

    def _fold_unless_folding(self) -> None:
        # From inside a collection: another thread's fold may be under way (a collection can set off
        # finalizers that let the GIL go); it folds these entries, or the next fold does.
        self.fold(wait=False)

    def _fold(self) -> None:
        log = self._log
        count = len(log)
        if not count:
            return
        # Only what is read here: a collection logged meanwhile (one this very fold's allocations set off, or
        # another thread's) stays for the next fold.
        entries = log[:count]
        del log[:count]
        first, second = self._first, self._second
        seconds, collections = self._seconds, self._collections
        for entry in entries:
            if type(entry) is float:
                if first is None:
                    first = entry
                elif second is None:
                    second = entry
                else:  # a stop whose generation never came: keep the latest pair
                    first, second = second, entry
                continue
            # A generation closes the collection: with a start and a stop before it, counted; with only a
            # stop (the clock attached during a collection: its start went unseen), not.
            if second is not None and first is not None and 0 <= entry < GENERATIONS:
                seconds[entry] += second - first  # type: ignore[index]
                collections[entry] += 1  # type: ignore[index]
            first = second = None
        self._first, self._second = first, second

    def attach(self) -> None:
        if not any(entry is self.callback for entry in gc.callbacks):
            gc.callbacks.append(self.callback)

    def detach(self) -> None:
        with contextlib.suppress(ValueError):
            gc.callbacks.remove(self.callback)

    def forked(self) -> None:
        """In a forked child: the lock may have been held by a thread that does not exist here."""
        self._folding = threading.Lock()
