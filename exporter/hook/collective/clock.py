"""The clock of a rank's collectives and the stopwatches that time each launch (``hook.collective``).

``CollectiveClock`` folds the intervals during which a collective was in flight into one cumulative time. How
each launch is timed depends on the process group's backend (``Stopwatches``), never by waiting on the device:

- gloo: ``HostStopwatch``, ``perf_counter()`` at launch and at completion (the work's future, on whichever
  thread completes it): on gloo the future completes when the collective has.
- NCCL: ``GpuStopwatch``, a CUDA event recorded before the launch and one after it on the stream that
  consumes the result, read back later only once ``query()`` says the GPU passed it. NCCL's future
  completes at launch (the wait is on the GPU stream), so host times would say nothing.

``timed_launch`` wraps one launch; ``ddp``, ``fsdp2`` and ``fsdp1`` call it where they see the launches. Imports
torch only inside the functions that need it (a CUDA event, a group's backend), called once a model is seen.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
import weakref
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from time import perf_counter
from typing import Any, Protocol

from bottleneck_exporter.hook.timing import CudaEventLike

log = logging.getLogger("bottleneck_exporter.hook")

HOST, GPU = "host", "gpu"
LOG_LIMIT = 1 << 12  # entries of CollectiveClock.log past which recording folds it (2048 collectives)


class CollectiveClock:
    """Collective intervals as they complete (``log``: start, end, start, end, ...), folded into the time
    covered by at least one of them. Its intervals are all on one timeline: the host's ``perf_counter()``
    (gloo) or the GPU's (NCCL, seconds from a reference event), whichever stopwatch came first.

    Intervals need not arrive in time order: a long all-reduce read back after a later short one (GPU events
    are harvested as they complete, gloo futures complete on several threads) still counts its time before
    the short one's. So the union of the last ``KEPT_INTERVALS`` disjoint intervals is kept, and each new
    interval counts only what it adds to it; what ends before the oldest kept interval (``_floor``) is no
    longer known, and a part of a late interval that falls there is not counted (an undercount, never a
    double count)."""

    KEPT_INTERVALS = 64

    def __init__(self) -> None:
        self.log: list[float] = []
        self._seconds = 0.0
        self._starts: list[float] = []  # the union of the recent intervals: disjoint, in time order
        self._ends: list[float] = []
        self._floor = float("-inf")  # the end of the latest interval forgotten
        self._folding = threading.Lock()
        self.kind: str | None = None  # HOST or GPU, fixed by the first stopwatch
        self.gpu: GpuStopwatch | None = None
        # Set when the session closes: DDP and FSDP keep the hook's communication hooks, and the model may
        # train on; its collectives then run untimed (no CUDA event recorded for a clock nobody reads).
        self.stopped = False
        # The part of that time the training thread waited (ExposedWait), where the launches show it.
        self.exposed: ExposedWait | None = None

    def record(self, start: float, end: float) -> None:
        log = self.log
        log.extend((start, end))  # one call: gloo's threads may record at the same time
        if len(log) >= LOG_LIMIT:
            # No datagram reads it (the hook's address is off): fold here, so memory stays bounded.
            self._fold()

    def seconds(self) -> float:
        """Fold what completed so far; returns the cumulative time with a collective in flight."""
        if self.gpu is not None:
            self.gpu.harvest()
        return self._fold()

    def logged(self) -> int:
        """Entries logged and not yet folded (two per collective), the exposed wait's included."""
        exposed = self.exposed
        return len(self.log) + (len(exposed.clock.log) if exposed is not None else 0)

    def fold(self) -> None:
        """Fold what completed so far, the exposed wait's too: at the session's step-end folds, so that a
        datagram folds only the last few steps' collectives, not a whole interval's
        (benchmarks/hook_overhead.py --ddp)."""
        self.seconds()
        if self.exposed is not None:
            self.exposed.seconds()

    def _fold(self) -> float:
        with self._folding:
            log = self.log
            count = len(log) & ~1
            if count:
                pairs = sorted(zip(log[0:count:2], log[1:count:2], strict=True))
                del log[:count]
                for start, end in pairs:
                    self._add(max(start, self._floor), end)
                excess = len(self._starts) - self.KEPT_INTERVALS
                if excess > 0:
                    self._floor = self._ends[excess - 1]
                    del self._starts[:excess], self._ends[:excess]
            return self._seconds

    def _add(self, start: float, end: float) -> None:
        """Merge [start, end] into the kept union, counting the time it covers that the union did not."""
        if end <= start:
            return
        starts, ends = self._starts, self._ends
        if not starts or start > ends[-1]:  # after everything kept (the usual case): all of it is new
            starts.append(start)
            ends.append(end)
            self._seconds += end - start
            return
        if start >= starts[-1]:  # touches the last kept interval only (the next usual case)
            if end > ends[-1]:
                self._seconds += end - ends[-1]
                ends[-1] = end
            return
        first = bisect_left(ends, start)  # the first kept interval that ends at or after start
        last = bisect_right(starts, end)  # past the last one that starts at or before end
        covered = sum(min(ends[i], end) - max(starts[i], start) for i in range(first, last))
        self._seconds += (end - start) - covered
        if first < last:
            start, end = min(start, starts[first]), max(end, ends[last - 1])
        starts[first:last] = [start]
        ends[first:last] = [end]

    def forked(self) -> None:
        self._folding = threading.Lock()
        if self.gpu is not None:
            self.gpu.forked()


class ExposedWait:
    """The part of the collectives' time that compute did not hide: what the training thread waits for.

    DDP launches a bucket's all-reduce as soon as backward has filled it, and launches the bucket that holds
    the model's first layers last, once backward has computed their gradients: from that launch on, the rank
    has nothing left to compute and waits (DDP's reducer waits for every bucket before backward returns).
    So a backward's exposed time runs from its last launch (``launched(start, last=True)``) to the latest
    completion after it (``completed``, for every bucket): on the host timeline of gloo, whose futures complete when the
    collective has. The union of those intervals is folded as the collectives' own (a ``CollectiveClock``);
    the in-flight time minus this is the time that overlapped compute, HTA's communication-computation
    overlap (compute while communicating / communicating)."""

    def __init__(self) -> None:
        self.clock = CollectiveClock()
        self._since: float | None = None  # the current backward's last launch; None before it

    def launched(self, start: float, last: bool) -> None:
        """A bucket launched at ``start``; ``last``: the backward's last (GradBucket.is_last()). A launch
        that is not the last after a last one starts the next backward (DDP waited for all of the previous
        one's before backward returned)."""
        if last:
            self._since = start
        elif self._since is not None:
            self._since = None

    def completed(self, end: float) -> None:
        since = self._since
        if since is not None and end > since:
            self.clock.record(since, end)

    def seconds(self) -> float:
        return self.clock.seconds()

    def forked(self) -> None:
        self.clock.forked()


class Stopwatch(Protocol):
    def start(self) -> Any: ...
    def stop(self, token: Any) -> None: ...


class HostStopwatch:
    """Host time from launch to completion (gloo)."""

    def __init__(self, clock: CollectiveClock) -> None:
        self.clock = clock

    def start(self) -> float:
        return perf_counter()

    def stop(self, token: float) -> None:
        self.clock.record(token, perf_counter())


class GpuStopwatch:
    """GPU time from launch to completion (NCCL), from CUDA events read back only once complete.

    ``start`` records an event on the current stream before the launch (the collective cannot begin before
    its input is ready there); ``stop`` records one on the stream that consumes the result, after the launch
    (FSDP's current stream, which NCCL makes wait for the collective; inside a DDP future's callback, a
    stream that waits for it). Intervals become seconds from a reference event (the first one recorded), so
    overlapping collectives on different streams fold into one timeline. ``harvest`` (when a datagram is built,
    at a step end) reads back the pairs the GPU has passed, in any order; ``max_pending`` bounds memory when
    the GPU is far behind or an event never completes: the oldest pair is then given up, counted in
    ``abandoned``, never waited for.
    """

    def __init__(self, clock: CollectiveClock, event_factory: Callable[[], CudaEventLike],
                 max_pending: int = 4096) -> None:
        self.clock = clock
        self._factory = event_factory
        self._reference: CudaEventLike | None = None
        self._pool: list[CudaEventLike] = []
        self._pending: collections.deque[tuple[CudaEventLike, CudaEventLike]] = collections.deque()
        self._harvesting = threading.Lock()
        self.max_pending = max_pending
        self.abandoned = 0

    def _event(self) -> CudaEventLike:
        try:
            event = self._pool.pop()
        except IndexError:
            event = self._factory()
        event.record()
        return event

    def start(self) -> CudaEventLike:
        if self._reference is None:
            self._reference = self._event()
        return self._event()

    def stop(self, token: CudaEventLike) -> None:
        pending = self._pending
        pending.append((token, self._event()))
        if len(pending) > self.max_pending:
            # Not pooled: its events may still be in flight. A harvest on another thread may have emptied
            # the queue meanwhile.
            with contextlib.suppress(IndexError):
                pending.popleft()
                self.abandoned += 1

    def harvest(self) -> int:
        """Read back every pair the GPU has passed into the clock; returns how many."""
        reference = self._reference
        if reference is None or not self._pending:
            return 0
        with self._harvesting:
            if not reference.query():
                return 0
            pending, done, kept = self._pending, 0, []
            # popleft/append are atomic: stop() may append from another thread meanwhile.
            for _ in range(len(pending)):
                start, end = pending.popleft()
                if end.query() and start.query():
                    self.clock.record(reference.elapsed_time(start) / 1000.0,
                                      reference.elapsed_time(end) / 1000.0)
                    if len(self._pool) < 64:
                        self._pool += (start, end)
                    done += 1
                else:
                    kept.append((start, end))
            pending.extendleft(reversed(kept))
            return done

    def pending(self) -> int:
        return len(self._pending)

    def forked(self) -> None:
        self._harvesting = threading.Lock()


class Stopwatches:
    """The stopwatch for each process group, by its backend: gloo on the host, NCCL on the GPU, anything
    else not timed. One clock holds one timeline, so a second kind (a gloo group beside NCCL ones) is not
    timed either; each refusal is logged (once per attach: at instrument() and again at the first forward)."""

    def __init__(self, clock: CollectiveClock, backend_of: Callable[[Any], str],
                 gpu_event_factory: Callable[[], CudaEventLike] | None = None) -> None:
        self.clock = clock
        self._backend_of = backend_of
        self._gpu_event_factory = gpu_event_factory
        # Weak keys: the hook must not keep a process group alive after destroy_process_group() (its threads
        # and connections would outlive it, and be torn down only at interpreter exit).
        self._by_group: weakref.WeakKeyDictionary[Any, Stopwatch | None] = weakref.WeakKeyDictionary()

    def for_group(self, group: Any) -> Stopwatch | None:
        if self.clock.stopped:
            return None
        try:  # (try, not contextlib.suppress: this runs at every collective launch)
            return self._by_group[group]
        except (KeyError, TypeError):  # TypeError: a group with no weak references
            pass
        try:
            watch = self._stopwatch(self._backend_of(group))
        except Exception:  # inside FSDP's or DDP's collective launch: never into training
            timing_failed()
            return None
        with contextlib.suppress(TypeError):  # not remembered: looked up again at its next collective
            self._by_group[group] = watch
        return watch

    def _stopwatch(self, backend: str) -> Stopwatch | None:
        kind = {"gloo": HOST, "nccl": GPU}.get(backend)
        clock = self.clock
        if kind is None or (clock.kind is not None and clock.kind != kind):
            log.info("bottleneck hook: collectives on the %s backend are not timed (%s)", backend,
                     "gloo and NCCL only" if kind is None else f"this rank's are timed on the {clock.kind}")
            return None
        clock.kind = kind
        if kind == HOST:
            return HostStopwatch(clock)
        if clock.gpu is None:
            factory = self._gpu_event_factory or _cuda_event
            clock.gpu = GpuStopwatch(clock, factory)
        return clock.gpu


def _cuda_event() -> CudaEventLike:
    import torch

    return torch.cuda.Event(enable_timing=True)


def backend_of(group: Any) -> str:
    import torch.distributed as dist

    return str(dist.get_backend(group)).lower()


def timed_launch(watch: Stopwatch | None, launch: Callable[[], Any], synchronous: bool = False) -> Any:
    """``launch()``, a collective, timed by ``watch``: until the future of the ``Work`` it returns completes,
    or, when it is ``synchronous`` (or returns None), until it returns: on gloo it has completed then, on NCCL
    it is enqueued on the current stream, where the stop event follows it. Its result is passed back. A
    failure of the timing is logged once and never reaches training; the collective's own errors do."""
    if watch is None:
        return launch()
    try:
        token = watch.start()
    except Exception:
        timing_failed()
        return launch()
    result = launch()
    try:
        if synchronous or result is None:
            watch.stop(token)
        else:
            result.get_future().then(lambda _: _stop_quietly(watch, token))
    except Exception:
        timing_failed()
    return result


def _stop_quietly(watch: Stopwatch, token: Any) -> None:
    try:
        watch.stop(token)
    except Exception:
        timing_failed()


_failures = [0]


def timing_failed() -> None:
    _failures[0] += 1
    if _failures[0] == 1:
        log.warning("bottleneck hook: timing a collective failed; the collective ran untimed", exc_info=True)
