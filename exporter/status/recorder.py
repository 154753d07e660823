"""Recent samples of this exporter's own collections, kept in memory for the status page.

Wraps the orchestrator (itself a prometheus_client collector): every collection, a Prometheus scrape or the
status sampler's, passes through ``collect()`` and leaves a snapshot of the samples the page and the catalogue
read, at most one per ``spacing`` seconds. Bounded twice: at most ``MAX_SNAPSHOTS`` snapshots, none older
than ``MAX_AGE_SECONDS`` (the oldest drop out), and only series whose names are in ``names`` (those the
catalogue's expressions and the page read). A snapshot whose series are those of the one before shares its list of
series and adds only an array of values, 8 bytes a sample: 1,500 series (a 128-core node with 8 GPUs) cost
under 1 MB for the whole ring. The latest collection is kept besides, whether it joined the ring or not: the
page shows it (``refresh`` takes one when the last is too old, one at a time). Nothing is evaluated here: the
verdicts are computed when the page is asked for (``bottleneck_exporter.status.verdicts``).
"""

from __future__ import annotations

import array
import collections
import dataclasses
import threading
import time
from collections.abc import Callable, Iterable, Iterator

from prometheus_client.metrics_core import Metric

from bottleneck_exporter.collectors.base import Collector

# At most 64 snapshots, none older than five minutes (the catalogue's default rate window).
MAX_SNAPSHOTS = 64
MAX_AGE_SECONDS = 300.0

Labels = tuple[tuple[str, str], ...]
Series = tuple[tuple[str, Labels], ...]  # (sample name, sorted labels) of each value


@dataclasses.dataclass(frozen=True)
class Snapshot:
    at: float  # Unix time of the collection
    series: Series
    numbers: array.array  # of "d", one per series

    @property
    def samples(self) -> Iterator[tuple[str, Labels, float]]:
        return ((name, labels, value) for (name, labels), value in zip(self.series, self.numbers, strict=True))

    def values(self, name: str) -> list[tuple[dict[str, str], float]]:
        return [(dict(labels), value) for (sample, labels), value in zip(self.series, self.numbers, strict=True)
                if sample == name]


class Recorder:
    def __init__(self, inner: Collector, names: Iterable[str], spacing: float, size: int = MAX_SNAPSHOTS,
                 max_age: float = MAX_AGE_SECONDS, clock: Callable[[], float] = time.time) -> None:
        self.inner = inner
        self.names = frozenset(names)
        self.spacing = spacing
        self.max_age = max_age
        self.collected = threading.Event()  # set after the first collection
        self.last_collection: float | None = None
        self._clock = clock
        self._ring: collections.deque[Snapshot] = collections.deque(maxlen=size)
        self._latest: Snapshot | None = None
        self._lock = threading.Lock()
        self._collecting = 0  # collections in flight: a scrape's, the sampler's, a page's
        self._collected = threading.Condition(self._lock)  # notified as each ends

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            self._collecting += 1
        return self._collect()

    def _collect(self) -> list[Metric]:
        """One collection, counted in ``_collecting`` by the caller."""
        try:
            families = list(self.inner.collect())
            now = self._clock()
            kept = [s for family in families for s in family.samples if s.name in self.names]
            series = tuple((s.name, tuple(sorted(s.labels.items()))) for s in kept)
            numbers = array.array("d", (float(s.value) for s in kept))
            with self._lock:
                self.last_collection = now
                if self._latest is not None and self._latest.series == series:
                    series = self._latest.series  # the same series as before: share them
                self._latest = Snapshot(now, series, numbers)
                if not self._ring or now - self._ring[-1].at >= self.spacing:
                    self._ring.append(self._latest)
                while now - self._ring[0].at > self.max_age:
                    self._ring.popleft()
        finally:
            with self._lock:
                self._collecting -= 1
                self._collected.notify_all()
        self.collected.set()
        return families

    def refresh(self, max_age: float, wait: float) -> None:
        """Make the latest collection at most ``max_age`` seconds old: collect unless there is one that recent.
        One at a time: a caller that finds a collection in flight (a scrape's, the sampler's, another page's)
        waits for it, ``wait`` seconds at most, rather than starting another; so however many ask, there is at
        most one collection of theirs per ``max_age`` seconds, and a collection that hangs holds them ``wait``."""
        with self._lock:
            def fresh() -> bool:
                return self.last_collection is not None and self._clock() - self.last_collection < max_age

            if fresh():
                return
            if self._collecting:
                self._collected.wait_for(lambda: fresh() or not self._collecting, timeout=wait)
                return
            self._collecting += 1  # claimed under the lock: whoever asks next waits for this one
        self._collect()

    def collect_if_idle(self, interval: float) -> bool:
        """Collect unless a collection (a scrape) happened in the last ``interval`` seconds: a node that
        Prometheus scrapes pays for no extra collection. Returns whether it collected."""
        with self._lock:
            last = self.last_collection
        if last is not None and self._clock() - last < interval:
            return False
        self.collect()
        return True

    def snapshots(self) -> list[Snapshot]:
        """The ring, oldest first."""
        with self._lock:
            return list(self._ring)

    def latest(self) -> Snapshot | None:
        """The latest collection, in the ring or not (it joins the ring only ``spacing`` after the last one)."""
        with self._lock:
            return self._latest
