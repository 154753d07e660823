"""Step timing inside the training process: host phases from a monotonic clock, GPU phases from CUDA events.

``StepClock`` partitions the host timeline: each mark closes the running phase and opens the next, so the
phases of a step add up to (at most) the step; marks are logged as they happen and folded into totals
later. ``GpuTimer`` records an event at the same marks and reads them back steps later, only once
``query()`` says the GPU has passed them: it never calls ``synchronize()`` or anything else that waits on
the device. Both end up as cumulative totals in the datagram::

    bottleneck_train_phase_seconds_total{training_job="resnet",rank="0",phase="forward"} 0.9
    bottleneck_train_gpu_phase_seconds_total{training_job="resnet",rank="0",phase="forward"} 0.8

Imports nothing from torch: the GPU timer takes an event factory (``torch.cuda.Event`` in real use, a fake
in tests).
"""

from __future__ import annotations

import collections
import itertools
import math
import threading
from bisect import bisect_left
from collections.abc import Callable
from time import perf_counter
from typing import Any, NamedTuple, Protocol

from bottleneck_exporter.wire.schema import GPU_PHASES, STEP_BUCKETS, STEP_PHASES

# Phase indices (positions in StepClock.phase_totals): DATA_WAIT to OPTIMIZER are those of
# wire.schema.STEP_PHASES, the datagram's names for them. OTHER is time in no measured phase (your own code
# between steps): it is part of the step total but not of any phase. STEP_END is a mark, not a phase: it
# closes the running step and opens OTHER; SKIPPED_STEP_END does the same for a step whose optimizer step
# AMP's GradScaler skipped (inf/NaN gradients): a step of the loop all the same, also counted apart.
DATA_WAIT, FORWARD, BACKWARD, OPTIMIZER, OTHER, STEP_END, SKIPPED_STEP_END = range(7)
_GPU_MARKED = frozenset(STEP_PHASES.index(name) for name in GPU_PHASES)

# Entries of StepClock.log past which the hot paths fold it (about 1 MiB): bounds memory when marks come but
# no step ends (the session folds at step ends).
LOG_LIMIT = 1 << 16

# Long steps (SageMaker's StepOutlier, TraceML's jitter): a step is long when it lasts more than the median of
# the last RECENT_STEPS steps plus three standard deviations, the deviation estimated from their interquartile
# range (IQR / 1.349 for a normal distribution), so that the long steps themselves do not widen it as they
# widen a plain standard deviation; and more than LONG_STEP_FACTOR times the median, so that the jitter of a
# very regular loop is not counted, nor that of a loop on a machine whose cores are shared (a healthy CPU loop
# at a load of 7 per core loses 4% to steps above three times its median, 6% to those above 1.5 times;
# one that evaluates every 25 steps, 20%). Until TUNE_STEPS steps have been seen no step is long (the
# first steps compile and warm caches: that is the start-up's time, bottleneck_train_startup_seconds).
RECENT_STEPS = 128
TUNE_STEPS = 16
# The bound moves slowly: it is computed again (a sort of RECENT_STEPS floats, the dearest part of a datagram's
# long-step work) at most every TUNE_SECONDS of steps, and only once a quarter of the ring is new.
TUNE_SECONDS = 5.0
LONG_STEP_FACTOR = 3.0
# Long steps come back alone (an evaluation pass, a save, a shard switch), or a few together, between runs of
# regular steps: long steps with fewer than LONG_STEP_GAP regular steps between them are one cluster, counted
# as they are if it holds at most LONG_CLUSTER_MAX of them. A larger cluster is the loop's steps all getting
# slower for a while (another process takes the cores, in bursts; the GPU clocks down), with a step of regular
# length here and there among them: the bound, from the last RECENT_STEPS steps and computed again only every
# TUNE_SECONDS, lags behind them for as long as half its ring still holds the faster steps, and would count
# most steps of those seconds as long, their time above the old median lost (on a 2-core machine whose load
# came and went by 10, healthy CPU loops lost 14-26% so, and got BottleneckLongSteps; see
# tests/test_hook_lost_time.py). In such a cluster only the steps longer than LONG_STEP_FACTOR times the
# cluster's own median are long, by their time above it: an evaluation pass during the slow seconds.
LONG_STEP_GAP = 4
LONG_CLUSTER_MAX = 4


class Totals(NamedTuple):
    """One consistent reading of a StepClock (steps, buckets and times from the same fold). A named tuple, not a
    frozen dataclass: made once a datagram, whose own cost is the budget's (a frozen dataclass sets each field
    through ``object.__setattr__``)."""

    phase_seconds: tuple[float, ...]  # by phase index: DATA_WAIT .. OTHER
    step_seconds: float
    steps: int
    skipped_steps: int
    buckets: tuple[int, ...]  # completed steps per STEP_BUCKETS upper bound, then +Inf
    last_step_end: float | None  # perf_counter() time of the last step end; None before the first
    samples: float
    long_steps: int = 0  # steps longer than the long-step bound of their time (RECENT_STEPS says which)
    long_step_excess_seconds: float = 0.0  # their time above the median step, all together
    median_step_seconds: float | None = None  # of the last RECENT_STEPS steps; None before TUNE_STEPS steps
    first_step_end: float | None = None  # perf_counter() time of the first step end; None before it


class StepClock:
    """The host timeline of the steps: per-phase totals, step count and time, samples, step-time histogram.

    Marks are recorded, not computed: a mark appends its phase and ``perf_counter()`` to ``log`` (flat: phase, time,
    phase, time, ...), and ``fold()`` later turns the log into the totals, a few steps at once: at a step end every
    ``session.FOLD_ENTRIES`` entries, when the log passes ``LOG_LIMIT`` entries, and before any total is read. Why: a
    mark runs in the middle of the training step, where every Python operation is paid with cold caches, and two appends
    cost less there than the same arithmetic done in place (benchmarks/hook_overhead.py).
    The per-step hot paths (``bottleneck_exporter.hook.loader``, ``bottleneck_exporter.hook.forward``, the optimizer
    hooks in ``bottleneck_exporter.hook.session``) append inline; ``switch(phase)`` is the same mark as a call, for the
    framework callbacks.

    Folds may run on two threads (the training thread's, and another that reads the totals, such as a
    framework's or a test's): a lock makes them take turns, and the training thread never waits for it
    (``fold(wait=False)`` skips when another thread is folding anyway).

    Samples: ``fetched_samples`` counts every batch as it is fetched; a step end copies it to
    ``samples_at_step_end``, so the reported samples are those of completed steps.
    """

    __slots__ = ("_buckets", "_cluster", "_cluster_excess", "_cluster_first", "_completed", "_current", "_first_end",
                 "_folding", "_long", "_long_above", "_long_excess", "_median", "_phase_totals", "_recent",
                 "_regular", "_since", "_skipped", "_step_seconds", "_step_start", "_steps", "_tuned",
                 "fetched_samples", "log", "samples_at_step_end")

    def __init__(self) -> None:
        self.log: list[Any] = []
        self.fetched_samples: float = 0
        self.samples_at_step_end: float = 0
        self._phase_totals = [0.0] * 5  # up to the last mark folded
        self._completed: tuple[float, ...] = (0.0,) * 5  # the same at the last step end: what is reported
        self._step_seconds = 0.0
        self._steps = 0
        self._skipped = 0
        self._buckets = [0] * (len(STEP_BUCKETS) + 1)
        self._current = OTHER  # the running phase, as of the last fold
        self._since: float | None = None  # when it began; None until the first mark
        self._step_start = 0.0
        self._folding = threading.Lock()
        # Long steps: the last RECENT_STEPS step times (a ring, by step number), the bound above which a step
        # is long and the median it is measured from, both as of the last reading (_tune).
        self._recent = [0.0] * RECENT_STEPS
        self._long_above = math.inf
        self._median = 0.0
        self._long = 0
        self._long_excess = 0.0
        # The open cluster of long steps (see LONG_STEP_GAP): its steps, their time above the median, and the
        # regular steps since its last one; counted once LONG_STEP_GAP regular steps close it, if it is small.
        self._cluster = 0
        self._cluster_excess = 0.0
        self._cluster_first = 0  # the step number of its first step
        self._regular = 0
        self._first_end: float | None = None
        self._tuned = (0, 0.0)  # steps and the last step's end at the last computation of the bound

    def switch(self, phase: int) -> float:
        """Close the running phase and open ``phase`` (or end the step: ``STEP_END``); returns the mark's time."""
        now = perf_counter()
        log = self.log
        log.append(phase)
        log.append(now)
        if len(log) > LOG_LIMIT:
            self.fold(wait=False)
        return now

    def fold(self, wait: bool = True) -> None:
        """Turn the marks logged so far into the totals; with ``wait=False`` only if no other fold runs."""
        if not self._folding.acquire(blocking=wait):
            return
        try:
            self._fold()
        finally:
            self._folding.release()

    def _fold(self) -> None:
        log = self.log
        count = len(log) & ~1  # whole (phase, time) pairs only
        if not count:
            return
        # Only what is read here: a mark appended meanwhile (by the training thread) stays for the next fold.
        marks = iter(log[:count])
        del log[:count]
        totals, buckets, completed = self._phase_totals, self._buckets, self._completed
        current, since, step_start = self._current, self._since, self._step_start
        steps, skipped, step_seconds = self._steps, self._skipped, self._step_seconds
        recent, long_above, median = self._recent, self._long_above, self._median
        long, long_excess = self._long, self._long_excess
        cluster, cluster_excess, regular = self._cluster, self._cluster_excess, self._regular
        cluster_first = self._cluster_first
        if since is None:  # the first mark ever starts the first step
            current, since = next(marks), next(marks)
            step_start = since
            if current >= STEP_END:
                current = OTHER
        for phase, now in zip(marks, marks, strict=False):  # one iterator twice: (phase, time) pairs
            totals[current] += now - since
            since = now
            if phase >= STEP_END:
                # Only whole steps are reported, so that the phases of a datagram (which a fold may cut in
                # the middle of a step) partition its step time exactly.
                completed = tuple(totals)
                duration = now - step_start
                step_start = now
                if duration > long_above:
                    if not cluster:
                        cluster_first = steps
                    elif steps - cluster_first >= RECENT_STEPS // 2:
                        # A cluster this long is a large one: its steps so far are judged while the ring holds them.
                        found, lost = _outliers(recent, cluster_first, steps - 1)
                        long += found
                        long_excess += lost
                        cluster_first = steps
                    cluster += 1
                    cluster_excess += duration - median
                    regular = 0
                elif cluster:
                    regular += 1
                    if regular >= LONG_STEP_GAP:
                        if cluster > LONG_CLUSTER_MAX:
                            cluster, cluster_excess = _outliers(recent, cluster_first, steps - regular)
                        long += cluster
                        long_excess += cluster_excess
                        cluster, cluster_excess = 0, 0.0
                elif not steps:
                    self._first_end = now
                recent[steps % RECENT_STEPS] = duration
                steps += 1
                if phase == SKIPPED_STEP_END:
                    skipped += 1
                step_seconds += duration
                buckets[bisect_left(STEP_BUCKETS, duration)] += 1
                current = OTHER
            else:
                current = phase
        self._current, self._since, self._step_start = current, since, step_start
        self._steps, self._skipped, self._step_seconds = steps, skipped, step_seconds
        self._long, self._long_excess = long, long_excess
        self._cluster, self._cluster_excess, self._regular = cluster, cluster_excess, regular
        self._cluster_first = cluster_first
        self._completed = completed

    def _tune(self) -> None:
        """The long-step bound and the median from the last RECENT_STEPS steps (see RECENT_STEPS): at a reading
        of the totals (once a datagram) at most every TUNE_SECONDS, never at a step."""
        count = min(self._steps, RECENT_STEPS)
        steps, at = self._tuned
        if count < TUNE_STEPS or (steps and (self._steps - steps < RECENT_STEPS // 4
                                             or self._step_start - at < TUNE_SECONDS)):
            return
        self._tuned = (self._steps, self._step_start)
        ordered = sorted(self._recent[:count])
        median = ordered[count // 2]
        spread = ordered[(3 * count) // 4] - ordered[count // 4]
        self._median = median
        self._long_above = max(median + 3 * spread / 1.349, LONG_STEP_FACTOR * median)

    def totals(self) -> Totals:
        """Fold, then read every total at once (what a datagram carries)."""
        with self._folding:
            self._fold()
            self._tune()
            return Totals(self._completed, self._step_seconds, self._steps, self._skipped,
                          tuple(self._buckets), self._step_start if self._steps else None,
                          float(self.samples_at_step_end), self._long, self._long_excess,
                          self._median if self._long_above < math.inf else None, self._first_end)

    # Single totals, of completed steps, for tests and the framework adapters (each folds first).
    @property
    def phase_totals(self) -> tuple[float, ...]:
        return self.totals().phase_seconds

    @property
    def steps(self) -> int:
        return self.totals().steps

    @property
    def step_seconds(self) -> float:
        return self.totals().step_seconds

    @property
    def buckets(self) -> list[int]:
        """Completed steps per step-time bucket (``STEP_BUCKETS`` upper bounds, then +Inf)."""
        return list(self.totals().buckets)

    @property
    def last_step_end(self) -> float | None:
        """``perf_counter()`` time of the last step end; None before the first."""
        return self.totals().last_step_end

    @property
    def samples(self) -> float:
        return float(self.samples_at_step_end)

    def forked(self) -> None:
        """In a forked child: the lock may have been held by a thread that does not exist here."""
        self._folding = threading.Lock()


def _outliers(recent: list[float], first: int, last: int) -> tuple[int, float]:
    """The long steps of a large cluster (see LONG_STEP_GAP), steps ``first`` to ``last`` (those of them still
    in the ring ``recent``): their count and their time above the cluster's median."""
    durations = [recent[step % RECENT_STEPS] for step in range(max(first, last + 1 - RECENT_STEPS), last + 1)]
    median = sorted(durations)[len(durations) // 2]
    above = [duration for duration in durations if duration > LONG_STEP_FACTOR * median]
    return len(above), sum(above) - len(above) * median


class CudaEventLike(Protocol):
    def record(self) -> Any: ...
    def query(self) -> bool: ...
    def elapsed_time(self, end_event: Any) -> float: ...


class GpuTimer:
    """GPU time per phase from events recorded at the host marks, harvested only once complete.

    ``max_pending`` bounds memory when the GPU is far behind (or an event never completes): the oldest
    unread step is then given up, counted in ``abandoned_steps``, never waited for; so are the steps still
    unread when the session closes. The datagram carries the count (``gpu.dropped_timings``)::

        bottleneck_train_gpu_timings_dropped_total{job="resnet",rank="0"} 3.0
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

    def abandon_pending(self) -> None:
        """Give up every unread step (the process is ending): counted in ``abandoned_steps``, not waited for."""
        self.abandoned_steps += len(self._pending)
        self._pending.clear()
        self._forget_previous()
