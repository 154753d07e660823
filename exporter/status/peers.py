"""The status page beside node_exporter and dcgm-exporter: which bundle it evaluates, and its peers' samples.

Under ``--collector.preset=beside-node-exporter`` (or ``-and-dcgm``) our host (and most GPU) collectors are
off, so the page's verdicts need node_exporter's (and dcgm-exporter's) series: it evaluates the preset's
bundle and reads each peer that bundle needs at ``--node-exporter.url`` / ``--dcgm-exporter.url``, the flags
``diagnose`` has too (``status.node-exporter-url`` / ``status.dcgm-exporter-url`` in the config file; empty: not
read, and the page says which verdicts that leaves without their series).

A peer is read by the status sampler thread only, at most once per ``spacing`` seconds and with a short
timeout: a Prometheus scrape of our /metrics never waits on it. Each read is kept in a ``Recorder`` ring (the
same bounds as our own snapshots, only the series the bundle reads), with ``up`` 1 or 0 as a scrape records it.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from typing import Any

from prometheus_client.metrics_core import Metric

from bottleneck_exporter.collectors.coexistence import PRESETS
from bottleneck_exporter.config import ConfigError, section_values
from bottleneck_exporter.heuristics import DCGM, DEFAULT_BUNDLE, NODE_EXPORTER
from bottleneck_exporter.options import Option
from bottleneck_exporter.status.recorder import Recorder
from bottleneck_exporter.verdicts.peers import (
    DEFAULT_URLS,
    PEER_NAMES,
    URL_DESTS,
    URL_FLAGS,
    Peer,
    PeerError,
    add_url_flags,
    peer,
    peers_of,
    scrape,
)

TIMEOUT = 2.0  # seconds: a peer slower than this counts as down for that read (it shares the sampler thread)
OPTION_OF = {NODE_EXPORTER: "node-exporter-url", DCGM: "dcgm-exporter-url"}  # the keys of the config file


def _url(source: str) -> Any:
    def parse(text: str) -> Peer | None:
        return peer(source, text) if text else None

    return parse


def _help(source: str) -> str:
    return (f"Under a --collector.preset that leaves the {'host' if source == NODE_EXPORTER else 'GPU'} series to "
            f"{PEER_NAMES[source]}, the status page reads it here for its verdicts (empty: not read; in "
            f"--config.file: status.{OPTION_OF[source]})")


OPTIONS: tuple[Option, ...] = tuple(
    Option(OPTION_OF[source], DEFAULT_URLS[source], _help(source), parse=_url(source)) for source in PEER_NAMES)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("status", "The status page on / (in --config.file: status.<option>).")
    add_url_flags(group, lambda source: f"{_help(source)} (default: {DEFAULT_URLS[source]})")


def settings(args: argparse.Namespace, file_config: dict[str, Any], source: str = "") -> tuple[str, list[Peer]]:
    """(the bundle the page evaluates, the peers it reads); raises ConfigError naming the flag or the key."""
    # The default and the config file first; the flags (spelled as diagnose spells them, not --status.<option>)
    # win over both.
    values, _ = section_values(file_config, "status", OPTIONS, argparse.Namespace(), source)
    for name in PEER_NAMES:
        flag = getattr(args, URL_DESTS[name], None)
        if flag is not None:
            try:
                values[OPTION_OF[name]] = _url(name)(flag)
            except ValueError as err:
                raise ConfigError(f"{URL_FLAGS[name]}: {err}") from None
    preset = getattr(args, "preset", None)
    bundle = PRESETS[preset].bundle if preset else DEFAULT_BUNDLE
    return bundle, [values[OPTION_OF[name]] for name in peers_of(bundle) if values[OPTION_OF[name]] is not None]


class PeerCollector:
    """One read of a peer, as a collection for a ``Recorder``: its samples and ``up``; never raises."""

    def __init__(self, target: Peer, timeout: float = TIMEOUT) -> None:
        self.target = target
        self.timeout = timeout
        self.error: str | None = None

    def collect(self) -> Iterable[Metric]:
        metric = Metric(self.target.job, f"{self.target.describe()}, read by the status page", "untyped")
        try:
            samples = scrape(self.target, self.timeout)
            self.error = None
        except PeerError as error:
            samples, self.error = [], str(error)
        for name, labels, value in (*samples, ("up", {}, 0.0 if self.error else 1.0)):
            metric.add_sample(name, labels, value)
        return [metric]


def recorders(peers: Iterable[Peer], names: Iterable[str], spacing: float) -> list[tuple[PeerCollector, Recorder]]:
    """A ring per peer, keeping the series ``names`` (those the bundle reads) and ``up``."""
    kept = frozenset(names) | {"up"}
    return [(collector, Recorder(collector, kept, spacing)) for collector in (PeerCollector(p) for p in peers)]
