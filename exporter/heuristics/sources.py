"""Where the catalogue's signals can come from, and which combinations of sources a rule bundle supports.

A *source* is an exporter that can provide one family of raw series: the host (CPU, memory, pressure,
disks, NICs), the GPUs, or the training processes (the hook's push receiver and the training collector,
ours in every bundle: no other exporter has them). A *bundle* picks one source per family; ``make generate``
writes one set of rule files per bundle. Every recording rule records to the same name whatever its source,
so alerts, dashboards and ``diagnose`` read only recording rules.

Which peer series carries each of ours, and in which unit, is written once: the twin tables of
``exporter/collectors/coexistence.py``, held to the real node_exporter and to the recorded dcgm-exporter scrape
(``tests/fixtures/dcgm-exporter/``) by tests/test_coexistence.py. ``Bundle.rewrite`` reads them to draw a
dashboard's signal from a bundle's sources; the scenario table's translators (``scenarios/translate.py``, test
data: the daemon never imports them) read them to write our series as each peer exposes them. dcgm-exporter's
label set: ``gpu``, ``UUID``, ``pci_bus_id``, ``device`` = ``nvidia<gpu>``, ``modelName``, ``hostname``
(``Hostname`` before 4.x), ``DCGM_FI_DRIVER_VERSION``, and ``container``/``namespace``/``pod`` on Kubernetes.
Its default counters have no clock-event reasons, no PCIe link generation/width, no per-code XID counter
(``DCGM_FI_DEV_XID_ERRORS`` is the last XID's value, a gauge) and no sub-second samples: the verdicts on them
need our gpu collector (``--collector.gpu.only-unique`` beside dcgm-exporter).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable, Mapping

from bottleneck_exporter.collectors.coexistence import DCGM_EXPORTER as DCGM_TWINS
from bottleneck_exporter.collectors.coexistence import GPU_UNIQUE, Twin
from bottleneck_exporter.collectors.coexistence import NODE_EXPORTER as NODE_EXPORTER_TWINS
from bottleneck_exporter.heuristics.promql import (
    Aggregate,
    Binary,
    Matcher,
    Node,
    Number,
    Selector,
    parse,
    transform,
    unparse,
)

TRAINING, HOST, GPU = "training", "host", "gpu"
FAMILIES = (TRAINING, HOST, GPU)
FAMILY_WORDS = {TRAINING: "training and scrape", HOST: "host", GPU: "GPU"}  # how the runbook names them
OURS = "bottleneck-exporter"
NODE_EXPORTER = "node_exporter"
DCGM = "dcgm-exporter"
DCGM_BESIDE_OURS = "dcgm-exporter+bottleneck-exporter-unique"
# The scrape job the translators give each peer's series: a stack scrapes each exporter in a job of its own.
PEER_JOB = {NODE_EXPORTER: {"job": "node-exporter"}, DCGM: {"job": "dcgm-exporter"}}

# Labels dcgm-exporter puts on every GPU series that ours do not have (older releases spell Hostname).
DCGM_ONLY_LABELS = ("UUID", "pci_bus_id", "device", "modelName", "Hostname", "hostname", "DCGM_FI_DRIVER_VERSION")


@dataclasses.dataclass(frozen=True)
class Source:
    name: str
    family: str  # the family of series it provides in a bundle
    what: str  # for the runbook: what to run
    provides: Callable[[str, str], bool]  # (origin, series name) → whether this source has it


def family_of(metric: str) -> tuple[str, str] | None:
    """(family, origin: the exporter that exports it) of a raw series name; None for a recording rule's."""
    if ":" in metric:
        return None
    if metric.startswith("node_"):
        return HOST, NODE_EXPORTER
    if metric.startswith("DCGM_"):
        return GPU, DCGM
    if metric.startswith("bottleneck_gpu_"):
        return GPU, OURS
    if metric == "up" or metric.startswith(("bottleneck_train_", "bottleneck_training_", "bottleneck_scrape_")):
        return TRAINING, OURS
    if metric.startswith("bottleneck_"):
        return HOST, OURS
    raise ValueError(f"series {metric!r} belongs to no known source")


# Ours beside dcgm-exporter although not the gpu collector's: the kubernetes collector runs under the dcgm preset
# (only the dcgm-only preset turns it off), and the held-idle rule joins our idle counter with it on uuid.
KUBERNETES_GPU_INFO = "bottleneck_gpu_kubernetes_info"


def gpu_unique(metric: str) -> bool:
    """Whether our exporter exports ``metric`` beside dcgm-exporter (no twin there): the gpu collector's with
    --collector.gpu.only-unique, and the kubernetes collector's GPU allocations."""
    return (re.sub(r"_(bucket|count|sum)$", "", metric) in GPU_UNIQUE or metric in GPU_UNIQUE
            or metric == KUBERNETES_GPU_INFO)


def dcgm_as_ours(expr: str) -> str:
    """A dcgm-exporter expression with our GPU labels: ``uuid`` from its ``UUID``, its other labels dropped."""
    return (f"max without ({', '.join(DCGM_ONLY_LABELS)}) (\n  label_replace(\n    "
            + expr.replace("\n", "\n    ") + ',\n    "uuid", "$1", "UUID", "(.+)"\n  )\n)')


class Unreadable(ValueError):
    """An expression a bundle cannot read: ``names`` are the series of ours it needs and its sources lack."""

    def __init__(self, names: set[str]) -> None:
        super().__init__(", ".join(sorted(names)))
        self.names = names


@functools.cache
def is_series(promql: str) -> bool:
    """Whether a twin's PromQL is one plain series of the peer's (not an expression over its series, not a number):
    only such a twin takes matchers and a range in place of our selector."""
    node = parse(promql)
    return isinstance(node, Selector) and len(node.matchers) == 1 and node.range_seconds is None


def _name(selector: Selector) -> str | None:
    return next((m.value for m in selector.matchers if m.name == "__name__" and m.op == "="), None)


def _peer_selector(selector: Selector, name: str, table: Mapping[str, tuple[Twin, ...]]) -> Node:
    """Our selector of ``name`` as the peer's series, from its twin in ``table``; Unreadable when no twin carries it
    as a selector can (a twin expression under matchers or a range, a unit scaled inside a range)."""
    matchers = [m for m in selector.matchers if m.name != "__name__"]
    pinned = {m.name: m.value for m in matchers if m.op == "="}
    twins = [t for t in table.get(name, ()) if all(pinned.get(k) == v for k, v in t.match.items())]
    if len(twins) != 1:
        raise Unreadable({name})
    twin = twins[0]
    rest = tuple(m for m in matchers if m.name not in twin.match)
    ranged = selector.range_seconds is not None or bool(selector.range_variable)
    if not is_series(twin.series):
        if rest or ranged:
            raise Unreadable({name})
        # Printed as the twin table writes it, where an operand stood: in parentheses, whatever its operators.
        return parse(f"({twin.series})")
    peer = Selector((Matcher("__name__", "=", twin.series), *rest), selector.range_seconds, selector.range_variable)
    if twin.scale == 1:
        return peer
    if ranged:
        raise Unreadable({name})
    return Binary("*", peer, Number(twin.scale))


def _origin(*origins: str) -> Callable[[str, str], bool]:
    return lambda origin, metric: origin in origins


SOURCES: dict[str, dict[str, Source]] = {
    TRAINING: {OURS: Source(OURS, TRAINING, "bottleneck-exporter (push receiver, training collector)",
                            _origin(OURS))},
    HOST: {
        OURS: Source(OURS, HOST, "bottleneck-exporter's host collectors (cpu, memory, pressure, disk, network)",
                     _origin(OURS)),
        NODE_EXPORTER: Source(NODE_EXPORTER, HOST, "node_exporter (default collectors)", _origin(NODE_EXPORTER)),
    },
    GPU: {
        OURS: Source(OURS, GPU, "bottleneck-exporter's gpu collector (NVML)", _origin(OURS)),
        DCGM_BESIDE_OURS: Source(
            DCGM_BESIDE_OURS, GPU, "dcgm-exporter (default counters) beside bottleneck-exporter's gpu collector "
            "with --collector.gpu.only-unique (the preset beside-node-exporter-and-dcgm)",
            lambda origin, metric: origin == DCGM or (origin == OURS and gpu_unique(metric))),
        DCGM: Source(DCGM, GPU, "dcgm-exporter (default counters), bottleneck-exporter's gpu collector off",
                     _origin(DCGM)),
    },
}


@dataclasses.dataclass(frozen=True)
class Bundle:
    name: str
    host: str
    gpu: str
    sentence: str

    @property
    def sources(self) -> dict[str, str]:
        """family → source name."""
        return {TRAINING: OURS, HOST: self.host, GPU: self.gpu}

    def provides(self, metric: str) -> bool:
        found = family_of(metric)
        return found is None or SOURCES[found[0]][self.sources[found[0]]].provides(found[1], metric)

    def _twins(self, family: str) -> Mapping[str, tuple[Twin, ...]]:
        """Our series of ``family`` → their twins in the peer this bundle reads that family from."""
        if family == HOST and self.host == NODE_EXPORTER:
            return NODE_EXPORTER_TWINS
        if family == GPU and self.gpu in (DCGM, DCGM_BESIDE_OURS):
            return DCGM_TWINS
        return {}

    def series(self, name: str) -> str | None:
        """The raw series this bundle holds for our series ``name`` (for a dashboard variable's
        ``label_values``): ours, or its peer's twin; None where neither is a plain series."""
        if self.provides(name):
            return name
        family = (family_of(name) or ("", ""))[0]
        return next((t.series for t in self._twins(family).get(name, ()) if is_series(t.series)), None)

    def rewrite(self, expr: str) -> str:
        """``expr``, written over our series, as this bundle reads it: each of our series its sources lack
        becomes its peer's twin (coexistence.py), dcgm-exporter's with our GPU labels. Unreadable names the
        series no source of the bundle carries; in an expression that mixes dcgm-exporter's GPU series with ours
        (their label sets differ, so nothing matches one to one), the ones only dcgm-exporter has."""
        lacking: set[str] = set()
        ours_gpu: set[str] = set()  # our GPU series read as ours
        peers_gpu: set[str] = set()  # our GPU series read as dcgm-exporter's

        def one(node: Node) -> Node | None:
            if not isinstance(node, Selector):
                return None
            name = _name(node)
            if name is None or not name.startswith("bottleneck_"):
                return None
            family = (family_of(name) or ("", ""))[0]
            if self.provides(name):
                if family == GPU:
                    ours_gpu.add(name)
                return None
            try:
                peer = _peer_selector(node, name, self._twins(family))
            except Unreadable:
                lacking.add(name)
                return None
            if family == GPU:
                peers_gpu.add(name)
            return peer

        node = transform(parse(expr), one)
        if ours_gpu and peers_gpu:
            lacking |= peers_gpu
        if lacking:
            raise Unreadable(lacking)
        return dcgm_as_ours(unparse(node)) if peers_gpu and _keeps_peer_labels(node) else unparse(node)


def _keeps_peer_labels(node: Node) -> bool:
    """Whether ``node``'s result can carry dcgm-exporter's own labels: not after an aggregation by ours alone."""
    return not (isinstance(node, Aggregate) and not node.without
                and not set(node.grouping) & set(DCGM_ONLY_LABELS))


DEFAULT_BUNDLE = "bottleneck"
BUNDLES: dict[str, Bundle] = {b.name: b for b in (
    Bundle(DEFAULT_BUNDLE, OURS, OURS, "everything from bottleneck-exporter (the default)"),
    Bundle("node-exporter", NODE_EXPORTER, OURS, "host series from node_exporter, GPU series from "
           "bottleneck-exporter's gpu collector (bottleneck-exporter --collector.preset=beside-node-exporter)"),
    Bundle("node-exporter-dcgm", NODE_EXPORTER, DCGM_BESIDE_OURS, "host series from node_exporter, GPU series "
           "from dcgm-exporter and what only bottleneck-exporter's gpu collector has (bottleneck-exporter "
           "--collector.preset=beside-node-exporter-and-dcgm)"),
    Bundle("node-exporter-dcgm-only", NODE_EXPORTER, DCGM, "host series from node_exporter, GPU series from "
           "dcgm-exporter only (bottleneck-exporter --collector.preset=beside-node-exporter-and-dcgm-only, where it "
           "has no GPU access)"),
)}
