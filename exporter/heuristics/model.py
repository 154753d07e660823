"""The catalogue's data model: a verdict (``Heuristic``), the recording rules it reads (``Record``), a signal
only dashboards draw (``Signal``), a threshold (``Parameter``), and the areas that hold them (``Area``).

Nothing here knows a verdict: the areas (``bottleneck_exporter.heuristics.areas``) write them in these terms,
``parameters`` holds the thresholds, and ``catalogue`` assembles and resolves them.

Expressions and texts are templates: ``${name}`` is a parameter (``${name:pct}`` renders 0.5 as 50% in texts),
``<<key>>`` a recording rule (``PARAM`` and ``RECORD_REF`` find them), ``<<key>>{phase="step"}`` the series of
a per-series record (a rate of one selector) that match, read from the record and, spelled out, narrowing its
selector (so a family rated once serves every record that reads part of it)::

    Heuristic(name="InputBound", expr="<<data_wait>> > ${data_wait_ratio} unless on (instance) (...)", ...)

Label conventions the expressions rely on: per-rank series carry ``training_job`` (the training job's name,
``bottleneck_exporter.wire.schema.JOB_LABEL``; never Prometheus' own ``job``, so any ``honor_labels`` setting keeps it)
and ``rank``; every series carries ``instance``; ``job`` is Prometheus' scrape job, read only by the
exporter's own alerts; cross-kind joins (a rank with its node or GPU) match ``on (instance)`` only. No
expression spells the cluster label: the generator adds it to every ``by`` and ``on`` (``catalogue.clustered``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

PREFIX = "Bottleneck"
SEVERITIES = ("critical", "warning", "info")
# The alert groups, one per area, in the order the rule files list them.
GROUPS = ("training", "node", "gpu", "exporter")

# Where a rule group can run (its name says which): a node-local group reads each node's series alone (every
# aggregation keeps ``instance``, every join matches on it), so a per-node or per-shard Prometheus can evaluate
# it; a cross-node group combines the series of several nodes (a job's rank median, its stragglers, an exporter
# absent everywhere) and needs them all in one evaluator, a central ruler. Derived from each expression
# (promql.crosses), never assigned by hand.
NODE_LABEL = "instance"
NODE_LOCAL, CROSS_NODE = "node-local", "cross-node"
REACHES = (NODE_LOCAL, CROSS_NODE)


def group_name(area: str, reach: str, recording: bool) -> str:
    """A rule group's name: its area, then where it can run (REACHES): ``bottleneck-training-cross-node``."""
    return f"bottleneck-{area}-{reach}" + (".rules" if recording else "")

PARAM = re.compile(r"\$\{([a-z0-9_]+)(?::pct)?\}")
RECORD_REF = re.compile(r"<<([a-z0-9_]+)>>(?:\{[^{}]*\})?")  # findall: the keys; a match: the narrowing too

# The labels that name a verdict's subject (Heuristic.scope), for the kinds most verdicts are about.
RANK = ("instance", "training_job", "rank")
# A verdict about a rank also carries the namespace and pod the rank runs in (the record ``workload``, which has
# a series for every rank: the target's namespace and no pod where the rank reports no pod), so that
# namespace-scoped routing, silences and kube-prometheus-stack's InfoInhibitor (equal: [namespace]) act on the
# training workload rather than on the exporter's namespace (docs/deploy.md, "Alertmanager in kube-prometheus-stack").
# The record is 1 for every rank, so that the join multiplies by it: adding 0 * it cost every alert an
# arithmetic over every rank's series (docs/rules.md, "What the rules cost on a fleet").
WORKLOAD_JOIN = "* on (instance, training_job, rank) group_left (namespace, pod) <<workload>>"
NODE = ("instance",)
GPU = ("instance", "gpu", "uuid")


class CatalogueError(ValueError):
    """A bad parameter override or an inconsistent catalogue; the message names the key."""


@dataclasses.dataclass(frozen=True)
class Parameter:
    name: str
    default: float | str
    sentence: str
    kind: str = "number"  # number | duration | regex | label | text


@dataclasses.dataclass(frozen=True)
class Record:
    """A recording rule: ``key`` is how expressions refer to it (``<<key>>``); ``name`` is a template.

    A record that reads raw series is a *signal*: ``expr`` reads our own collectors, ``sources`` the same
    signal from another exporter (source name → PromQL, same labels and unit as ``expr``). A bundle records
    the first of them whose series its sources provide, always under ``name``. ``parts`` (alternatives
    joined by ``or``) keep only the parts a bundle can read."""

    key: str
    name: str
    expr: str
    group: str
    sources: Mapping[str, str] = dataclasses.field(default_factory=dict)
    parts: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Signal:
    """A quantity the dashboards draw that no rule records (per-core busy, swap activity, GPU power...).

    ``expr`` reads our own series (``${rate_window}`` is its window, ``<<key>>`` a record). A bundle reads it
    through its sources: ``Bundle.rewrite`` swaps each of our series its sources lack for the peer's twin
    (exporter/collectors/coexistence.py), so no peer's metric name is written here; a bundle whose sources
    have no twin has no such signal, and its dashboards say which source it needs."""

    key: str
    expr: str


class MissingSignal(CatalogueError):
    """A bundle cannot draw a signal: ``names`` are the raw series its sources lack."""

    def __init__(self, message: str, names: set[str]) -> None:
        super().__init__(message)
        self.names = names


@dataclasses.dataclass(frozen=True)
class Tier:
    """One severity of a heuristic. ``overrides`` maps a parameter of the expression to the one this
    tier uses instead (a critical twin reads ``memory_available_ratio_critical``)."""

    severity: str
    overrides: Mapping[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Heuristic:
    name: str  # CamelCase, the alert is PREFIX + name
    verdict: str  # what a person reads in a table: "input-bound (data loading)"
    expr: str
    for_: str
    summary: str
    description: str  # Prometheus template; $value is the evidence in ``unit``
    advice: str
    meaning: str  # runbook: what it means and why it matters
    evidence: str  # runbook: what to look at to confirm it
    scope: tuple[str, ...]  # labels that name the subject: ("instance", "training_job", "rank")
    unit: str  # the most specific Grafana unit of $value: percentunit, s, celsius, count:pages/s, suffix:x
    group: str
    tiers: tuple[Tier, ...] = (Tier("warning"),)
    # What the dashboards draw: the recording rules (keys) the alert compares against ``threshold`` (a
    # parameter's name, or a number); none: the dashboards show the alert's state.
    compares: tuple[str, ...] = ()
    threshold: str = ""
    # A trend: the shortest span of samples ``diagnose`` and ``run`` judge it over, where ``for:`` is not waited
    # for (a duration); over a shorter one a warm-up, or a step's noise, would read as the trend. Empty: any span.
    sampled_over: str = ""

    @property
    def alert(self) -> str:
        return PREFIX + self.name

    @property
    def alert_expr(self) -> str:
        """``expr`` as its alert evaluates it: about a rank, with the rank's workload labels (WORKLOAD_JOIN)."""
        if self.scope != RANK:
            return self.expr
        body = "\n".join("  " + line for line in self.expr.splitlines())
        return f"(\n{body}\n)\n{WORKLOAD_JOIN}"

    @property
    def anchor(self) -> str:
        return self.alert.lower()


@dataclasses.dataclass(frozen=True)
class Area:
    """One area of the catalogue, as node-mixin keeps ``alerts/<area>.libsonnet``: the verdicts of one alert
    group (``name``, one of GROUPS), the recording rules of that group and the signals only dashboards draw.
    Its verdicts may read another area's records: ``<<key>>`` names a record of any area."""

    name: str
    records: tuple[Record, ...] = ()
    signals: tuple[Signal, ...] = ()
    heuristics: tuple[Heuristic, ...] = ()
