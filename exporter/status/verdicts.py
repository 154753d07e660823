"""The verdicts this exporter can compute from its own recent samples, with the catalogue's Python evaluator.

The same rules and evaluator as ``bottleneck-exporter diagnose`` standalone (``exporter.diagnose``): the
recorder's snapshots become a series store (each sample also records ``up{job=<exporter_job>} 1``, as a
Prometheus scrape would), every alert expression of the catalogue is evaluated at the last snapshot, rate
windows being the recorded span. Computed only when asked (the status page), never in the background.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence

from exporter.diagnose import Finding, diagnose_store, missing_in
from exporter.heuristics.catalogue import resolve
from exporter.heuristics.promql import Aggregate, Binary, Call, Negate, Node, Selector, SeriesStore, parse
from exporter.status.recorder import Snapshot

MIN_SNAPSHOTS = 2  # a rate needs two points


@dataclasses.dataclass
class Verdicts:
    window_seconds: float
    snapshots: int
    findings: list[Finding]
    errors: list[tuple[str, str]]
    missing: list[str]


@functools.lru_cache(maxsize=1)
def catalogue_names() -> frozenset[str]:
    """Every metric name an alert expression of the catalogue selects."""
    names: set[str] = set()
    for rule in resolve().alerts:
        _collect_names(parse(rule.inline_expr), names)
    return frozenset(names)


def _collect_names(node: Node, names: set[str]) -> None:
    if isinstance(node, Selector):
        names.update(m.value for m in node.matchers if m.name == "__name__" and m.op == "=")
    elif isinstance(node, Call):
        for arg in node.args:
            _collect_names(arg, names)
    elif isinstance(node, Aggregate):
        _collect_names(node.expr, names)
        if node.param is not None:
            _collect_names(node.param, names)
    elif isinstance(node, Binary):
        _collect_names(node.lhs, names)
        _collect_names(node.rhs, names)
    elif isinstance(node, Negate):
        _collect_names(node.expr, names)


def evaluate(snapshots: Sequence[Snapshot], instance: str) -> Verdicts:
    """Verdicts over ``snapshots`` (oldest first), the series labelled ``instance`` as Prometheus would."""
    if len(snapshots) < MIN_SNAPSHOTS:
        return Verdicts(0.0, len(snapshots), [], [], [])
    scrape_job = str(resolve().parameters["exporter_job"])
    points: dict[tuple[tuple[str, str], ...], list[tuple[float, float]]] = {}
    for snapshot in snapshots:
        for name, labels, value in (*snapshot.samples, ("up", (("job", scrape_job),), 1.0)):
            if math.isinf(value):
                continue
            key = tuple(sorted({**dict(labels), "instance": instance, "__name__": name}.items()))
            points.setdefault(key, []).append((snapshot.at, value))
    store = SeriesStore()
    for key, series in points.items():
        store.add(dict(key), series)
    first, last = snapshots[0].at, snapshots[-1].at
    window = max(1, math.ceil(last - first) + 1)
    findings, errors = diagnose_store(resolve({"rate_window": f"{window}s"}), store, last)
    return Verdicts(last - first, len(snapshots), findings, errors, missing_in(store))
