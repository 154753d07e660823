"""Labels a fleet can store: no series names a process, a thread or a pod by its id, and none has 30 labels or more.

A pid, tid or pod UID label makes a new series at every restart (and Mimir, Thanos and VictoriaMetrics bill by
series); identity stays in ``_info`` series, joined on demand. Mimir refuses a series with more than
``max_label_names_per_series`` labels (30 by default, ``__name__`` included). Checked on every family the exporter
exposes (the golden scrapes, the push receiver with every optional part of a datagram) and, by the labels each
PromQL construct keeps (``promql.output_labels``), on every recording rule and alert of every bundle, with the
labels a scrape adds (prometheus-operator's target labels, ``cluster``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
import requests

from bottleneck_exporter.cli import build_parser
from bottleneck_exporter.heuristics import BUNDLES, resolve
from bottleneck_exporter.heuristics.promql import Selector, output_labels, parse
from bottleneck_exporter.parts import build_collectors
from bottleneck_exporter.push.receiver import PushReceiver
from bottleneck_exporter.push.store import JobStore
from bottleneck_exporter.training.registry import TrainingRegistry
from tests import kubelet
from tests.conftest import ROOT
from tests.datagrams import full_payload
from tests.promstack import OPERATOR_TARGET_LABELS, Process, start_node_exporter

LIMIT = 30  # Mimir's default max_label_names_per_series, __name__ included
# Labels that name one process, thread or pod instance: a new series at every restart.
IDENTITY = re.compile(r"(^|_)(pid|tid|uid|pids|tids|uids)$")
# What a scrape adds to every series: the scrape job and target, each cluster's external label, and the target
# labels prometheus-operator writes (a clash renames ours to exported_<name>: the count stays the sum).
TARGET_LABELS = frozenset({"job", "instance", "cluster", *(c["target_label"] for c in OPERATOR_TARGET_LABELS)})
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? ", re.M)


def _families(text: str) -> dict[str, set[str]]:
    """Sample name → the label names its samples carry, from an exposition."""
    found: dict[str, set[str]] = {}
    for name, labels in SAMPLE.findall(text):
        found.setdefault(name, set()).update(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="', labels))
    return found


def _merge(*parts: Mapping[str, set[str]]) -> dict[str, set[str]]:
    merged: dict[str, set[str]] = {}
    for part in parts:
        for name, labels in part.items():
            merged.setdefault(name, set()).update(labels)
    return merged


def _receiver_families() -> dict[str, set[str]]:
    """The push receiver's families after a rank sent every optional part, its pod identity included."""
    receiver = PushReceiver(JobStore(max_jobs=4, max_ranks=4, expiry=600))
    payload = {**full_payload("resnet50", 0),
               "kubernetes": {"namespace": "research", "pod": "resnet50-worker-0", "container": "trainer"}}
    assert receiver.handle(json.dumps(payload).encode())
    found: dict[str, set[str]] = {}
    for family in receiver.collect():
        for sample in family.samples:
            found.setdefault(sample.name, set()).update(sample.labels)
    return found


def _kubernetes_families(tmp_path: Path) -> dict[str, set[str]]:
    """The kubernetes collector's families, asking a real gRPC kubelet stand-in for one pod's GPU."""
    answer = kubelet.response(kubelet.pod("bert-0", "ml", kubelet.container(
        "trainer", kubelet.devices("nvidia.com/gpu", "GPU-5e1f7c3a-0000"))))
    server = kubelet.Kubelet(tmp_path / "kubelet.sock", lambda: answer)
    try:
        args = build_parser().parse_args(["--collector.disable-defaults", "--collector.kubernetes",
                                          f"--collector.kubernetes.pod-resources-socket={tmp_path / 'kubelet.sock'}"])
        found: dict[str, set[str]] = {}
        for family in build_collectors(args, {}, TrainingRegistry())["kubernetes"].collect():
            for sample in family.samples:
                found.setdefault(sample.name, set()).update(sample.labels)
        assert found, "the kubernetes collector exported nothing"
        return found
    finally:
        server.stop()


@pytest.fixture(scope="module")
def node_exporter(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Process]:
    # The fixture tree has every file the rules read (this machine may lack /proc/schedstat).
    host = ROOT / "tests" / "fixtures" / "host"
    exporter = start_node_exporter(tmp_path_factory.mktemp("node-exporter"), f"--path.procfs={host / 'proc'}",
                                   f"--path.sysfs={host / 'sys'}")
    yield exporter
    exporter.stop()


@pytest.fixture(scope="module")
def families(node_exporter: Process, tmp_path_factory: pytest.TempPathFactory) -> dict[str, set[str]]:
    """Every family the rules of any bundle can read: ours, node_exporter's (the real binary) and dcgm-exporter's
    (a recorded scrape)."""
    golden = [_families(p.read_text()) for p in sorted((ROOT / "tests" / "golden").glob("*.prom"))]
    dcgm = [_families(p.read_text()) for p in sorted((ROOT / "tests" / "fixtures" / "dcgm-exporter").glob("*.prom"))]
    node = _families(requests.get(f"{node_exporter.url}/metrics", timeout=10).text)
    kubernetes = _kubernetes_families(tmp_path_factory.mktemp("kubelet"))
    return _merge(*golden, _receiver_families(), kubernetes, *dcgm, node, {"up": set()})


def _too_many(labels: set[str] | frozenset[str]) -> bool:
    return len(labels | {"__name__"}) >= LIMIT


def test_no_family_the_exporter_exposes_names_a_process_or_has_too_many_labels(tmp_path: Path) -> None:
    ours = _merge(*(_families(p.read_text()) for p in sorted((ROOT / "tests" / "golden").glob("*.prom"))),
                  _receiver_families(), _kubernetes_families(tmp_path))
    assert len(ours) > 100, "the golden scrapes and the receiver expose the exporter's families"
    # Identity belongs in _info series only (none has it today; a join on demand reads it there).
    assert {name: sorted(filter(IDENTITY.search, labels)) for name, labels in ours.items()
            if not name.endswith("_info") and any(map(IDENTITY.search, labels))} == {}
    assert {name: len(labels | TARGET_LABELS) for name, labels in ours.items() if _too_many(labels | TARGET_LABELS)} \
        == {}


@pytest.mark.parametrize("bundle", list(BUNDLES))
def test_no_recorded_series_or_alert_names_a_process_or_has_too_many_labels(
        bundle: str, families: dict[str, set[str]]) -> None:
    catalogue = resolve(bundle=bundle)
    unknown: set[str] = set()

    def selected(selector: Selector) -> frozenset[str]:
        name = next((m.value for m in selector.matchers if m.name == "__name__" and m.op == "="), None)
        if name is None:
            return frozenset(TARGET_LABELS.union(*families.values()))
        if name not in families:
            unknown.add(name)
        return frozenset(families.get(name, set()) | TARGET_LABELS)

    rules = {r.record: output_labels(parse(r.inline_expr), selected) for r in catalogue.records}
    # An alert's series: ALERTS{alertname, alertstate, severity, ...its expression's labels}.
    rules |= {f"{r.alert} {r.severity}": output_labels(parse(r.inline_expr), selected)
              | {"alertname", "alertstate", "severity"} for r in catalogue.alerts}
    assert unknown == set(), "every series a rule reads is in a scrape this test reads"
    assert {name: sorted(filter(IDENTITY.search, labels)) for name, labels in rules.items()
            if any(map(IDENTITY.search, labels))} == {}
    assert {name: len(labels) for name, labels in rules.items() if _too_many(labels)} == {}
    # The rules keep what names the subject: a rank's verdict its job and rank, every verdict its cluster.
    assert {"cluster", "instance", "training_job", "rank"} <= rules["BottleneckInputBound warning"]


def test_the_limits_catch_an_identity_label_and_a_wide_series() -> None:
    """The checks above can fail: a pid label and 29 labels beside __name__ are caught."""
    assert IDENTITY.search("pid") and IDENTITY.search("worker_pid") and IDENTITY.search("pod_uid")
    assert not IDENTITY.search("rank") and not IDENTITY.search("uuid") and not IDENTITY.search("gpu")
    assert _too_many({f"l{i}" for i in range(29)}) and not _too_many({f"l{i}" for i in range(28)})
