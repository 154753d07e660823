"""The verdicts this exporter can compute from its own recent samples, with the catalogue's Python evaluator.

The same rules and evaluator as ``bottleneck-exporter diagnose`` standalone (``bottleneck_exporter.diagnose``): the
recorder's snapshots, and those of the peers the bundle reads (``bottleneck_exporter.status.peers``), become a series
store labelled as Prometheus would (``bottleneck_exporter.verdicts.peers.Points``: ours in ``<exporter_job>``, each
peer in its own job, ``up`` per read), every alert expression of the bundle is evaluated at the last snapshot, rate
windows being the recorded span. Computed only when asked (the status page), never in the background.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence
from typing import Any

from bottleneck_exporter.heuristics.catalogue import resolve
from bottleneck_exporter.heuristics.promql import Aggregate, Binary, Call, Negate, Node, Selector, parse
from bottleneck_exporter.heuristics.sources import DEFAULT_BUNDLE
from bottleneck_exporter.status.recorder import Snapshot
from bottleneck_exporter.verdicts.evaluation import Finding, findings_at, missing_in
from bottleneck_exporter.verdicts.peers import Peer, Points, unjudged

MIN_SNAPSHOTS = 2  # a rate needs two points


@dataclasses.dataclass
class Verdicts:
    window_seconds: float
    snapshots: int
    findings: list[Finding]
    errors: list[tuple[str, str]]
    missing: list[str]
    bundle: str = DEFAULT_BUNDLE
    # Each peer read: name, url, job, up (at the last read), error, the alerts that read its series when down.
    peers: list[dict[str, Any]] = dataclasses.field(default_factory=list)


@functools.cache
def catalogue_names(bundle: str = DEFAULT_BUNDLE) -> frozenset[str]:
    """Every metric name an alert expression of ``bundle`` selects."""
    names: set[str] = set()
    for rule in resolve(bundle=bundle).alerts:
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


def evaluate(snapshots: Sequence[Snapshot], instance: str, bundle: str = DEFAULT_BUNDLE,
             peers: Sequence[tuple[Peer, Sequence[Snapshot], str | None]] = ()) -> Verdicts:
    """Verdicts of ``bundle`` over ``snapshots`` (oldest first) and each peer's (peer, its snapshots, its last
    error), the series labelled ``instance`` as Prometheus would."""
    if len(snapshots) < MIN_SNAPSHOTS:
        return Verdicts(0.0, len(snapshots), [], [], [], bundle)
    points = Points(instance)
    exporter_job = str(resolve().parameters["exporter_job"])  # resolving takes ~10 ms: once, not per snapshot
    for snapshot in snapshots:
        points.add(snapshot.at, exporter_job, snapshot.samples)
    first, last = snapshots[0].at, snapshots[-1].at
    for target, recorded, _ in peers:
        for snapshot in recorded:
            if first - 1 <= snapshot.at <= last:  # what the evaluation at ``last`` sees, as for ours
                up = {name: value for name, _, value in snapshot.samples}.get("up", 0.0) == 1.0
                points.add(snapshot.at, target.job, [s for s in snapshot.samples if s[0] != "up"], up)
    store = points.store()
    window = max(1, math.ceil(last - first) + 1)
    catalogue = resolve({"rate_window": f"{window}s"}, bundle=bundle)
    findings, errors = findings_at(catalogue, store, last)
    read = [{"name": target.name, "url": target.url, "job": target.job, "up": error is None, "error": error,
             "unjudged": [] if error is None else unjudged(catalogue, [target.source])}
            for target, _, error in peers]
    return Verdicts(last - first, len(snapshots), findings, errors, missing_in(store), bundle, read)
