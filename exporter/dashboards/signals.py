"""The catalogue's signals as one rule bundle draws them: queries for panels, and a note where a bundle cannot.

A dashboard module asks ``Signals(bundle).query("gpu_power", G, "GPU {{gpu}}")`` and gets the signal spelled out
for that bundle's sources (exporter/heuristics/catalogue.py ``signal``), or a ``Lack`` naming the raw series the
bundle's sources do not have. ``drawn`` turns a panel whose signals are all lacking into a short text panel that
names the source it needs, never an empty panel::

    Not in the node-exporter-dcgm-only bundle: this panel needs bottleneck_gpu_utilization_samples_bucket,
    from bottleneck-exporter's gpu collector (NVML). ...

Dashboards of the default bundle keep their UIDs and titles; every other bundle's name goes into both.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from bottleneck_exporter.dashboards.panels import Panel, Query, text
from bottleneck_exporter.heuristics.catalogue import signal
from bottleneck_exporter.heuristics.model import MissingSignal
from bottleneck_exporter.heuristics.sources import (
    BUNDLES,
    DCGM_BESIDE_OURS,
    DEFAULT_BUNDLE,
    GPU,
    HOST,
    OURS,
    SOURCES,
    family_of,
)

UID_MAX = 40  # Grafana refuses longer dashboard UIDs


@dataclasses.dataclass(frozen=True)
class Lack:
    """A query a bundle cannot run: the raw series of ours it needs that its sources lack."""

    names: frozenset[str]


def _same(expr: str) -> str:
    return expr


@dataclasses.dataclass(frozen=True)
class Signals:
    bundle: str = DEFAULT_BUNDLE

    def query(self, keys: str | Sequence[str], matchers: str, legend: str = "", *,
              around: Callable[..., str] = _same, window: str = "$__rate_interval", instant: bool = False,
              table: bool = False) -> Query | Lack:
        """One query over the signals ``keys``, each narrowed by ``matchers``; ``around`` builds the query from
        their expressions (an aggregation, a comparison), ``_same`` draws the one signal as it is."""
        exprs: list[str] = []
        lacking: set[str] = set()
        for key in [keys] if isinstance(keys, str) else keys:
            try:
                exprs.append(signal(key, matchers, self.bundle, window))
            except MissingSignal as err:
                lacking |= err.names
        if lacking:
            return Lack(frozenset(lacking))
        return Query(around(*exprs), legend, instant, table)

    def uid(self, base: str) -> str:
        """``bottleneck-node`` for the default bundle, ``bottleneck-node-ne-dcgm`` for node-exporter-dcgm."""
        if self.bundle == DEFAULT_BUNDLE:
            return base
        uid = f"{base}-{self.bundle.replace('node-exporter', 'ne')}"
        if len(uid) > UID_MAX:
            raise ValueError(f"dashboard uid {uid!r} is longer than Grafana's {UID_MAX} characters")
        return uid

    def title(self, base: str) -> str:
        return base if self.bundle == DEFAULT_BUNDLE else f"{base} ({self.bundle} bundle)"

    def tags(self, *tags: str) -> list[str]:
        return [*tags, f"bundle:{self.bundle}"]

    def note(self, title: str, lacking: frozenset[str], *, width: int, height: int) -> Panel:
        """A text panel in place of a panel this bundle cannot draw, naming the source it needs."""
        bundle = BUNDLES[self.bundle]
        needs: dict[str, list[str]] = {}
        for name in sorted(lacking):
            family, _ = family_of(name) or (HOST, "")
            what = SOURCES[family][OURS].what
            if family == GPU and bundle.gpu == DCGM_BESIDE_OURS:
                # Our collector runs here, but exports only what dcgm-exporter lacks; dcgm-exporter's twin of
                # this series carries other labels than the ours it would be compared with.
                what += " exporting it (the bundle's only-unique preset does not)"
            needs.setdefault(what, []).append(f"`{name}`")
        read = {HOST: bundle.host, GPU: bundle.gpu}
        reads = "; ".join(f"{word} series from {SOURCES[family][read[family]].what}"
                          for family, word in ((HOST, "host"), (GPU, "GPU")))
        content = (f"**{title}**: not in the `{self.bundle}` bundle. This panel needs "
                   + "; ".join(f"{', '.join(names)} from {what}" for what, names in needs.items())
                   + f". The bundle reads {reads} (docs/dashboards.md).")
        return text(title, content, width=width, height=height)


def drawn(signals: Signals, build: Callable[..., Panel], title: str, description: str, unit: str,
          queries: Sequence[Query | Lack], *, whole: bool = False, **options: Any) -> Panel:
    """``build(title, description, unit, queries, **options)`` with the queries the bundle can run; a note in
    its place when it can run none, or (``whole``: a table whose columns belong together) not all of them."""
    present = [q for q in queries if isinstance(q, Query)]
    lacking = frozenset().union(*(q.names for q in queries if isinstance(q, Lack)))
    if not present or (whole and lacking):
        return signals.note(title, lacking, width=options.get("width", 12), height=options.get("height", 8))
    return build(title, description, unit, present, **options)
