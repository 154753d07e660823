"""Sampling for the engine: our exporter's series (a running exporter over HTTP, or the collectors and push
receiver in this process) and its peers', every ``interval`` seconds, labelled as a Prometheus scrape labels them.

A ``Source`` is where our exporter's samples come from: ``HttpSource`` (a running exporter owns the push socket,
so it sees the training runs) or ``InProcessSource`` (the parts built in this process: ``diagnose`` on a node with no
exporter, ``run`` beside the training process it starts). A ``Sampler`` scrapes it and the peers together and
records what each answered; ``Sampler.samples()`` is what ``verdicts.evaluation.evaluate`` reads::

    sampler = Sampler(InProcessSource(parts), socket.gethostname(), exporter_job())
    sampler.run(window=60, interval=5)
    evaluation = evaluate(sampler.samples(), bundle)

Every HTTP read is the engine's bounded one (``verdicts.scrape``). A peer that does not answer costs its own series
(``up`` 0), never the others'; our exporter not answering is ``Unreachable``: nothing can be judged without it.
"""

from __future__ import annotations

import dataclasses
import socket
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from bottleneck_exporter.verdicts.evaluation import Samples
from bottleneck_exporter.verdicts.peers import Peer, PeerError, Points, scrape
from bottleneck_exporter.verdicts.scrape import Sample, ScrapeError, Unreachable
from bottleneck_exporter.verdicts.scrape import scrape as read_exposition

EXPORTER_TIMEOUT = 10.0  # seconds for one scrape of our exporter (a node with many GPUs and ranks is slower)
PEER_TIMEOUT = 5.0  # seconds for one scrape of node_exporter or dcgm-exporter


class Source(Protocol):
    kind: str  # "exporter" (over HTTP) or "in-process", as the report names it
    url: str  # where it is read: an URL, or "in-process"
    target: str  # what the report says it sampled: the URL, or this node's name

    def describe(self) -> str: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def samples(self) -> list[Sample]: ...


class HttpSource:
    """A running exporter, read over HTTP (``/metrics`` added to a bare host)."""

    kind = "exporter"

    def __init__(self, url: str, timeout: float = EXPORTER_TIMEOUT) -> None:
        self.url = url if urllib.parse.urlparse(url).path not in ("", "/") else url.rstrip("/") + "/metrics"
        self.target = self.url
        self.timeout = timeout

    def describe(self) -> str:
        return f"the exporter at {self.url}"

    def start(self) -> None:
        self.samples()  # an exporter that does not answer stops here, before any sampling

    def stop(self) -> None:
        pass

    def samples(self) -> list[Sample]:
        try:
            return read_exposition(self.url, self.timeout)
        except ScrapeError as err:
            raise Unreachable(f"{self.url}: {err}") from None


class InProcessSource:
    """The collectors and the push receiver (``bottleneck_exporter.parts``), run inside this process."""

    kind = "in-process"
    url = "in-process"

    def __init__(self, parts: Mapping[str, Any]) -> None:
        from prometheus_client import CollectorRegistry

        from bottleneck_exporter.collectors.orchestrator import Orchestrator

        self.parts = parts
        self.target = socket.gethostname()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(Orchestrator(parts))

    def describe(self) -> str:
        return "this node (collectors and push receiver in this process)"

    def start(self) -> None:
        from bottleneck_exporter.parts import start

        start(self.parts)

    def stop(self) -> None:
        from bottleneck_exporter.parts import stop

        stop(self.parts)

    def samples(self) -> list[Sample]:
        return [(s.name, dict(s.labels), float(s.value)) for family in self.registry.collect() for s in family.samples]


@dataclasses.dataclass
class Sampled:
    """One exporter's record over the window: how many scrapes, how many failed, the first failure."""

    name: str
    url: str
    job: str
    scrapes: int = 0
    failed: int = 0
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class Sampler:
    """Scrapes ``source`` (in the ``scrape_job``) and ``peers`` (each in its own job) together, all with
    ``instance``, each scrape recording its ``up``: the rules about the monitoring itself (exporter down or absent)
    then read what they would read in Prometheus."""

    def __init__(self, source: Source, instance: str, scrape_job: str, peers: Sequence[Peer] = (),
                 peer_timeout: float = PEER_TIMEOUT, clock: Callable[[], float] = time.time,
                 keep: float | None = None) -> None:
        """``keep``: seconds of samples kept (the last ones), for a sampling as long as what it watches (``run``);
        None keeps them all."""
        self.source = source
        self.keep = keep
        self.instance = instance
        self.scrape_job = scrape_job
        self.peers = tuple(peers)
        self.peer_timeout = peer_timeout
        self.clock = clock
        self.times: list[float] = []
        # What each exporter answered: ours first, then each peer in the order given.
        self.record = [Sampled("bottleneck-exporter", source.url, scrape_job),
                       *(Sampled(p.name, p.url, p.job) for p in self.peers)]
        self._points = Points(instance)

    def take(self) -> float:
        """One scrape of the source and of each peer, now; returns its time. Raises Unreachable when our
        exporter does not answer."""
        now = self.clock()
        self._points.add(now, self.scrape_job, self.source.samples())
        self.record[0].scrapes += 1
        for target, sampled in zip(self.peers, self.record[1:], strict=True):
            sampled.scrapes += 1
            try:
                self._points.add(now, target.job, scrape(target, self.peer_timeout))
            except PeerError as error:
                sampled.failed += 1
                sampled.error = sampled.error or str(error)
                self._points.add(now, target.job, (), up=False)
        self.times.append(now)
        if self.keep is not None and now - self.times[0] > self.keep:
            oldest = now - self.keep
            self.times = [t for t in self.times if t >= oldest]
            self._points.forget_before(oldest)
        return now

    def run(self, window: float, interval: float, progress: Callable[[float, float], None] | None = None,
            done: Callable[[], bool] | None = None, sleep: Callable[[float], None] = time.sleep) -> None:
        """Take a sample every ``interval`` seconds for ``window`` seconds (the first at once, the last at the
        end), or until ``done()`` says so after a sample; ``progress(elapsed, window)`` after each."""
        start = self.clock()
        end = start + window
        while True:
            now = self.take()
            if progress is not None:
                progress(now - start, window)
            if now >= end or (done is not None and done()):
                return
            sleep(max(0.0, min(interval, end - self.clock())))

    def samples(self) -> Samples:
        return Samples(self._points.store(), list(self.times))
