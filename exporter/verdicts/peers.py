"""The exporters beside ours (node_exporter, dcgm-exporter), scraped and labelled as Prometheus labels them.

Standalone ``diagnose`` and the status page evaluate the catalogue without a Prometheus. Under a bundle whose
host or GPU series come from node_exporter or dcgm-exporter (``bottleneck_exporter.heuristics.sources``), they scrape
those exporters themselves, and every sample must look as it would in Prometheus, or the bundle's joins
(``on (instance, gpu)``) and selectors would match nothing:

* each exporter is a scrape job of its own (``job`` as the translators give it, ``sources.PEER_JOB``), ours
  the exporter job of the catalogue;
* every exporter of one node shares one ``instance`` (a stack relabels it to the node name);
* a scraped ``job`` or ``instance`` label becomes ``exported_job`` / ``exported_instance`` (``honor_labels:
  false``, Prometheus' default);
* each scrape adds ``up`` for its job: 1, or 0 when the exporter did not answer.

``Points`` gathers such samples into the evaluator's series store; ``scrape`` reads one exporter over HTTP, with
the engine's one bounded read (``bottleneck_exporter.verdicts.scrape``).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import urllib.parse
from collections.abc import Callable, Iterable, Mapping, Sequence

from bottleneck_exporter.heuristics import BUNDLES, DCGM, NODE_EXPORTER, Catalogue
from bottleneck_exporter.heuristics.promql import SeriesKey, SeriesStore
from bottleneck_exporter.heuristics.sources import PEER_JOB, SOURCES, family_of
from bottleneck_exporter.verdicts.scrape import Sample, ScrapeError
from bottleneck_exporter.verdicts.scrape import scrape as read_exposition

Labels = Mapping[str, str] | tuple[tuple[str, str], ...]  # as scraped, or as a recorder's snapshot holds them
# How people name each peer (flags, messages), and the port it listens on by default.
PEER_NAMES = {NODE_EXPORTER: "node_exporter", DCGM: "dcgm-exporter"}
DEFAULT_URLS = {NODE_EXPORTER: "http://localhost:9100/metrics", DCGM: "http://localhost:9400/metrics"}
# The one spelling of each peer's URL on a command line: diagnose's, and the exporter's (its status page reads them).
URL_FLAGS = {NODE_EXPORTER: "--node-exporter.url", DCGM: "--dcgm-exporter.url"}
URL_DESTS = {NODE_EXPORTER: "node_exporter_url", DCGM: "dcgm_exporter_url"}
TARGET_LABELS = ("job", "instance")


class PeerError(ScrapeError):
    """A peer exporter did not answer, or did not answer with a Prometheus exposition."""


@dataclasses.dataclass(frozen=True)
class Peer:
    source: str  # sources.NODE_EXPORTER or sources.DCGM
    url: str

    @property
    def job(self) -> str:
        return PEER_JOB[self.source]["job"]

    @property
    def name(self) -> str:
        return PEER_NAMES[self.source]

    def describe(self) -> str:
        return f"{self.name} at {self.url}"


def add_url_flags(group: argparse._ActionsContainer, help_of: Callable[[str], str]) -> None:
    """``--node-exporter.url`` and ``--dcgm-exporter.url``, not given by default (None); ``help_of(source)`` says
    what the command does with each."""
    for source in PEER_NAMES:
        group.add_argument(URL_FLAGS[source], dest=URL_DESTS[source], default=None, metavar="URL",
                           help=help_of(source).replace("%", "%%"))  # argparse %-formats help strings


def peer(source: str, url: str) -> Peer:
    """A peer at ``url`` (``/metrics`` added to a bare host); raises ValueError for a URL that is not http(s)."""
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ValueError(f"{PEER_NAMES[source]} URL: expected http://HOST:PORT/metrics, got {url!r}")
    if parsed.path in ("", "/"):
        url = url.rstrip("/") + "/metrics"
    return Peer(source, url)


def peers_given(args: argparse.Namespace) -> list[Peer]:
    """The peers named by ``add_url_flags``' flags; raises ValueError for a URL that is not http(s)."""
    urls = {source: getattr(args, URL_DESTS[source]) for source in PEER_NAMES}
    return [peer(source, url) for source, url in urls.items() if url]


def peers_of(bundle: str) -> tuple[str, ...]:
    """The peer sources ``bundle`` reads (node_exporter, dcgm-exporter), in that order."""
    chosen = BUNDLES[bundle].sources.items()
    return tuple(p for p in PEER_NAMES if any(SOURCES[family][source].provides(p, "") for family, source in chosen))


def bundle_for(given: Iterable[str]) -> str:
    """The first bundle (in ``BUNDLES``' order: ours before dcgm-exporter alone) whose peers are ``given``."""
    given = set(given)
    for name in BUNDLES:
        if set(peers_of(name)) == given:
            return name
    names = " and ".join(PEER_NAMES[p] for p in PEER_NAMES if p in given)
    raise ValueError(f"no rule bundle reads {names} alone; bundles and the exporters they read: " + "; ".join(
        f"{name}: {', '.join(PEER_NAMES[p] for p in peers_of(name)) or 'bottleneck-exporter only'}"
        for name in BUNDLES))


def check_bundle(bundle: str, given: Iterable[str]) -> None:
    """Refuse a bundle whose peers are not all ``given``, or a peer the bundle does not read."""
    wanted, given = set(peers_of(bundle)), set(given)
    for source in PEER_NAMES:
        flag = URL_FLAGS[source]
        if source in wanted - given:
            raise ValueError(f"bundle {bundle} reads {PEER_NAMES[source]}: give {flag}")
        if source in given - wanted:
            raise ValueError(f"bundle {bundle} does not read {PEER_NAMES[source]}, yet {flag} was given; "
                             f"pick a bundle that does (--bundle {bundle_for(given)})")


def unjudged(catalogue: Catalogue, sources: Iterable[str]) -> list[str]:
    """The alerts of ``catalogue`` that read a series of one of ``sources`` (peers that did not answer)."""
    down = set(sources)
    return sorted({rule.alert for rule in catalogue.alerts
                   if any((family_of(s) or ("", ""))[1] in down for s in catalogue.reads.get(rule.heuristic.name, ()))})


def scrape(target: Peer, timeout: float) -> list[Sample]:
    """The samples ``target`` exposes, as scraped (labels untouched); raises PeerError."""
    try:
        return read_exposition(target.url, timeout)
    except ScrapeError as err:
        raise PeerError(f"{target.describe()}: {err}") from None


def as_scraped(labels: Mapping[str, str], job: str, instance: str) -> dict[str, str]:
    """``labels`` of a scraped sample with the target's ``job`` and ``instance``, as with honor_labels: false."""
    out = {f"exported_{k}" if k in TARGET_LABELS else k: v for k, v in labels.items()}
    return {**out, "job": job, "instance": instance}


class Points:
    """Samples of several scrapes over time, labelled as scraped (``as_scraped``), for the Python evaluator."""

    def __init__(self, instance: str) -> None:
        self.instance = instance
        self._points: dict[tuple[tuple[str, str], ...], list[tuple[float, float]]] = {}
        # The labelled key of each (job, name, labels) given as a tuple: a recorder's snapshots repeat the same
        # series at every sample, and labelling them again for each was most of a status page's verdicts.
        self._keys: dict[tuple[str, str, tuple[tuple[str, str], ...]], tuple[tuple[str, str], ...]] = {}
        self._columns: dict[tuple[str, int], tuple[object, list[list[tuple[float, float]]], frozenset[SeriesKey]]] = {}
        # Staleness, as Prometheus marks it: each job's series in its last scrape, and when each series was last
        # missing from a scrape of its job that followed one that had it.
        self._scraped: dict[str, frozenset[SeriesKey]] = {}
        self._stale: dict[SeriesKey, list[float]] = {}

    def add(self, at: float, job: str, samples: Iterable[tuple[str, Labels, float]], up: bool = True) -> None:
        """One scrape of ``job`` at ``at``: its samples (none when it failed) and its ``up``."""
        keys = []
        for name, labels, value in (*samples, ("up", (), 1.0 if up else 0.0)):
            if math.isinf(value):
                continue
            if isinstance(labels, tuple):
                key = self._keys.get((job, name, labels))
                if key is None:
                    key = self._keys[job, name, labels] = self._key(job, name, labels)
            else:
                key = self._key(job, name, labels)
            self._points.setdefault(key, []).append((at, value))
            keys.append(key)
        self._scrape_of(job, at, frozenset(keys))

    def _scrape_of(self, job: str, at: float, keys: frozenset[SeriesKey]) -> None:
        """A scrape of ``job`` at ``at`` had ``keys``: those of its scrape before that it lacks went stale."""
        before = self._scraped.get(job)
        if before is not None and before is not keys:
            for key in before - keys:
                self._stale.setdefault(key, []).append(at)
        self._scraped[job] = keys

    def add_columns(self, at: float, job: str, series: Sequence[tuple[str, Labels]], values: Sequence[float]) -> None:
        """Like ``add`` (the scrape answered): sample i is ``series[i]`` of value ``values[i]``. Calls that pass
        the same ``series`` object (a recorder's snapshots share theirs while the series stay the same) label it
        and find its points once, not at every call: at the push bounds, 64 snapshots of 1,850 series."""
        cached = self._columns.get((job, id(series)))
        if cached is None or cached[0] is not series:
            keys = [self._key(job, name, labels) for name, labels in series]
            cached = self._columns[job, id(series)] = series, [self._points.setdefault(k, []) for k in keys], \
                frozenset([*keys, self._key(job, "up", ())])
        for points, value in zip(cached[1], values, strict=True):
            if not math.isinf(value):
                points.append((at, value))
        self._points.setdefault(self._key(job, "up", ()), []).append((at, 1.0))
        self._scrape_of(job, at, cached[2])

    def _key(self, job: str, name: str, labels: Labels) -> tuple[tuple[str, str], ...]:
        return tuple(sorted({**as_scraped(dict(labels), job, self.instance), "__name__": name}.items()))

    def forget_before(self, at: float) -> None:
        """Drop the points older than ``at`` (and a series left with none): a long run keeps a bounded window."""
        for key, series in list(self._points.items()):
            keep = next((i for i, (t, _) in enumerate(series) if t >= at), len(series))
            if keep == len(series):
                del self._points[key]
            elif keep:
                del series[:keep]
        self._columns.clear()  # add_columns' cached lists may be gone from _points now
        self._stale = {key: kept for key, times in self._stale.items() if key in self._points
                       and (kept := [t for t in times if t >= at])}

    def store(self) -> SeriesStore:
        store = SeriesStore()
        for key, series in self._points.items():
            store.add(dict(key), series, self._stale.get(key, ()))
        return store
