"""The verdicts this exporter can compute from its own recent samples: the verdict engine over the status page's rings.

The same engine as ``bottleneck-exporter diagnose`` standalone (``bottleneck_exporter.verdicts``): the recorder's
snapshots, and those of the peers the bundle reads (``bottleneck_exporter.status.peers``), become a series store
labelled as Prometheus would (``bottleneck_exporter.verdicts.peers.Points``: ours in ``<exporter_job>``, each peer in
its own job, ``up`` per read), every alert expression of the bundle is evaluated at the last snapshot, rate windows
being the recorded span. ``for:`` is not judged here: that would evaluate every alert at every snapshot of the ring
on each request. Computed only when asked (the status page), never in the background.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any

from bottleneck_exporter.heuristics import DEFAULT_BUNDLE, resolve, selector_names
from bottleneck_exporter.heuristics.promql import parse
from bottleneck_exporter.status.recorder import Snapshot
from bottleneck_exporter.verdicts import evaluation
from bottleneck_exporter.verdicts.evaluation import Finding, Samples, exporter_job
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
    return frozenset().union(*(selector_names(parse(rule.inline_expr)) for rule in resolve(bundle=bundle).alerts))


def evaluate(snapshots: Sequence[Snapshot], instance: str, bundle: str = DEFAULT_BUNDLE,
             peers: Sequence[tuple[Peer, Sequence[Snapshot], str | None]] = ()) -> Verdicts:
    """Verdicts of ``bundle`` over ``snapshots`` (oldest first) and each peer's (peer, its snapshots, its last
    error), the series labelled ``instance`` as Prometheus would."""
    if len(snapshots) < MIN_SNAPSHOTS:
        return Verdicts(0.0, len(snapshots), [], [], [], bundle)
    points = Points(instance)
    job = exporter_job()  # resolving the catalogue is not free: once, not per snapshot
    for snapshot in snapshots:
        points.add_columns(snapshot.at, job, snapshot.series, snapshot.numbers)
    first, last = snapshots[0].at, snapshots[-1].at
    for target, recorded, _ in peers:
        for snapshot in recorded:
            if first - 1 <= snapshot.at <= last:  # what the evaluation at ``last`` sees, as for ours
                up = {name: value for name, _, value in snapshot.samples}.get("up", 0.0) == 1.0
                points.add(snapshot.at, target.job, [s for s in snapshot.samples if s[0] != "up"], up)
    judged = evaluation.evaluate(Samples(points.store(), [s.at for s in snapshots]), bundle, hold_for=False)
    read = [{"name": target.name, "url": target.url, "job": target.job, "up": error is None, "error": error,
             "unjudged": [] if error is None else unjudged(judged.catalogue, [target.source])}
            for target, _, error in peers]
    return Verdicts(judged.window_seconds, len(snapshots), judged.findings, judged.errors, judged.missing, bundle,
                    read)
