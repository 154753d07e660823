"""A row of the scenario table: the alert and severity it tests, what kind of case it is (fires, a near miss,
not yet), the failure it guards against, how to build its input series and the alerts it expects.

Each area's rows are in the module of its name beside this one; ``SCENARIOS`` (the package) holds them all::

    row("InputBound", FIRES, "num_workers_0_rank_waits_80pct_of_each_step", lambda t: rank(t, ...), Expect(RANK0, 0.8))
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from bottleneck_exporter.heuristics.catalogue import HEURISTICS
from bottleneck_exporter.heuristics.promql import parse_duration
from bottleneck_exporter.heuristics.scenarios.series import EXPORTER_JOB, INSTANCE, TRAIN_JOB, Series, Timeline
from bottleneck_exporter.heuristics.sources import Bundle

FIRES, NEAR_MISS, NOT_YET = "fires", "near_miss", "not_yet"


@dataclasses.dataclass(frozen=True)
class Expect:
    """An alert instance the scenario's tier must produce: its labels (without alertname and severity)
    and, when given, its value (compared to 4 significant digits, as the description shows it)."""

    labels: Mapping[str, str]
    value: float | None = None


@dataclasses.dataclass(frozen=True)
class Scenario:
    alert: str  # heuristic name, e.g. "InputBound"
    severity: str
    kind: str  # fires | near_miss | not_yet
    name: str  # the failure it guards against
    build: Callable[[Timeline], list[Series]]
    expect: tuple[Expect, ...] = ()
    start: int = 10  # not_yet: minute the situation begins
    eval_at: int | None = None  # fires / near_miss: default for: + 7 minutes
    # Raw series the expectation depends on beyond the alert's own (a cause label read from them): a bundle
    # whose sources have neither them nor a peer's series in their place does not run the scenario.
    needs: tuple[str, ...] = ()

    def runs_in(self, bundle: Bundle) -> bool:
        return all(bundle.series(name) is not None for name in self.needs)

    @property
    def title(self) -> str:
        return f"{self.alert} {self.severity} {self.kind}: {self.name}"


RANK0 = {"instance": INSTANCE, "job": EXPORTER_JOB, "training_job": TRAIN_JOB, "rank": "0"}
NODE1 = {"instance": INSTANCE, "job": EXPORTER_JOB}
GPU0 = {**NODE1, "gpu": "0", "uuid": "GPU-5e1f7c3a-0000"}
PROC0 = {**NODE1, "process": "train.py", "local_rank": "0"}


def row(alert: str, kind: str, name: str, build: Callable[[Timeline], list[Series]], *expect: Expect,
        severity: str = "warning", start: int = 10, eval_at: int | None = None,
        needs: tuple[str, ...] = ()) -> Scenario:
    return Scenario(alert, severity, kind, name, build, tuple(expect), start, eval_at, needs)


def for_minutes(alert: str) -> int:
    for heuristic in HEURISTICS:
        if heuristic.name == alert:
            return int(parse_duration(heuristic.for_) // 60)
    raise KeyError(alert)
