"""Step timing inside the training process: host phases from a monotonic clock, GPU phases from CUDA events.

``StepClock`` partitions the host timeline: each mark ``switch(phase)`` closes the running phase, so the
phases of a step add up to (at most) the step. ``GpuTimer`` records an event at the same marks and reads
them back steps later, only once ``query()`` says the GPU has passed them: it never calls ``synchronize()``
or anything else that waits on the device. Both end up as cumulative totals in the datagram::

    bottleneck_train_phase_seconds_total{job="resnet",rank="0",phase="forward"} 0.9
    bottleneck_train_gpu_phase_seconds_total{job="resnet",rank="0",phase="forward"} 0.8

Imports nothing from torch: the GPU timer takes an event factory (``torch.cuda.Event`` in real use, a fake
in tests).
"""

from __future__ import annotations

import bisect
import collections
import itertools
import time
from collections.abc import Callable
from typing import Any, Protocol

from exporter.push.schema import STEP_BUCKETS

# Phase indices (positions in StepClock.phase_totals). OTHER is time in no measured phase (your own code
# between steps): it is part of the step total but not of any phase.
DATA_WAIT, FORWARD, BACKWARD, OPTIMIZER, OTHER = range(5)
PHASE_NAMES = ("data_wait", "forward", "backward", "optimizer")
GPU_PHASE_NAMES = ("forward", "backward", "optimizer")
_GPU_MARKED = frozenset((FORWARD, BACKWARD, OPTIMIZER))


class StepClock:
    __slots__ = ("_current", "_pending_samples", "_since", "_step_start", "buckets", "clock", "phase_totals",
                 "samples", "step_seconds", "steps")

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self.phase_totals = [0.0] * 5
        self.step_seconds = 0.0
        self.steps = 0
        self.samples = 0.0
        self.buckets = [0] * (len(STEP_BUCKETS) + 1)
        self._current = OTHER
        self._since: float | None = None
        self._step_start = 0.0
        self._pending_samples = 0.0

    @property
    def started(self) -> bool:
        return self._since is not None

    @property
    def current(self) -> int:
        return self._current

    def switch(self, phase: int) -> float:
        """Close the running phase and open ``phase``; returns the time of the mark."""
        now = self.clock()
        if self._since is None:
            self._step_start = now
        else:
            self.phase_totals[self._current] += now - self._since
        self._current = phase
        self._since = now
        return now

    def add_samples(self, count: float) -> None:
        self._pending_samples += count

    def end_step(self) -> float:
        """Close the running step (a no-op before the first mark); returns the time of the mark."""
        # switch(OTHER) inlined: this runs once per step, and every call is paid with cold caches.
        now = self.clock()
        since = self._since
        if since is None:
            self._step_start = now
        else:
            self.phase_totals[self._current] += now - since
            duration = now - self._step_start
            self._step_start = now
            self.steps += 1
            self.step_seconds += duration
            self.buckets[bisect.bisect_left(STEP_BUCKETS, duration)] += 1
            self.samples += self._pending_samples
            self._pending_samples = 0.0
        self._current = OTHER
        self._since = now
        return now


class CudaEventLike(Protocol):
    def record(self) -> Any: ...
    def query(self) -> bool: ...
    def elapsed_time(self, end_event: Any) -> float: ...


class GpuTimer:
    """GPU time per phase from events recorded at the host marks, harvested only once complete.

    ``max_pending`` bounds memory when the GPU is far behind (or an event never completes): the oldest
    unread step is then given up, counted in ``abandoned_steps``, never waited for.
    """

    def __init__(self, event_factory: Callable[[], CudaEventLike], max_pending: int = 64,
                 harvest_per_step: int = 4) -> None:
        self._factory = event_factory
        self._pool: list[CudaEventLike] = []
        self._marks: list[tuple[int, CudaEventLike]] = []
        self._pending: collections.deque[list[tuple[int, CudaEventLike]]] = collections.deque()
        self._previous_end: CudaEventLike | None = None
        self.max_pending = max_pending
        self.harvest_per_step = harvest_per_step
        self.phase_totals = [0.0] * 5
        self.busy_seconds = 0.0
        self.idle_seconds = 0.0
        self.harvested_steps = 0
        self.abandoned_steps = 0

    def _event(self) -> CudaEventLike:
        event = self._pool.pop() if self._pool else self._factory()
        event.record()
        return event

    def mark(self, phase: int) -> None:
        if phase in _GPU_MARKED:
            self._marks.append((phase, self._event()))

    def end_step(self) -> None:
        if self._marks:
            self._marks.append((OTHER, self._event()))
            self._pending.append(self._marks)
            self._marks = []
        if len(self._pending) > self.max_pending:
            self._pending.popleft()  # not pooled: its events may still be in flight
            self.abandoned_steps += 1
            self._forget_previous()  # the idle gap across an abandoned step is unknown
        self.harvest(self.harvest_per_step)

    def harvest(self, limit: int) -> int:
        """Read back up to ``limit`` finished steps, oldest first; stops at the first unfinished one."""
        done = 0
        while self._pending and done < limit:
            marks = self._pending[0]
            # Events on one stream complete in order, but the user may switch streams between marks:
            # check every event, the last first (the cheap common "not yet" answer).
            if not marks[-1][1].query() or not all(event.query() for _, event in marks[:-1]):
                break
            self._pending.popleft()
            for (phase, start), (_, end) in itertools.pairwise(marks):
                self.phase_totals[phase] += start.elapsed_time(end) / 1000.0
            first, last = marks[0][1], marks[-1][1]
            self.busy_seconds += first.elapsed_time(last) / 1000.0
            if self._previous_end is not None:
                self.idle_seconds += self._previous_end.elapsed_time(first) / 1000.0
            self._forget_previous()
            self._previous_end = last
            self._release(marks[:-1])
            self.harvested_steps += 1
            done += 1
        return done

    def _forget_previous(self) -> None:
        if self._previous_end is not None:
            self._pool.append(self._previous_end)
            self._previous_end = None

    def _release(self, marks: list[tuple[int, CudaEventLike]]) -> None:
        if len(self._pool) < 4 * self.max_pending:
            self._pool.extend(event for _, event in marks)

    def pending_steps(self) -> int:
        return len(self._pending)
