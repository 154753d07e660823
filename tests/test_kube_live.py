"""Live: the real exporter (a recorded MIG GPU, a fixture node with a trainer in a pod, a gRPC kubelet in this
test) scraped by a real Prometheus, and the joins docs/metrics.md and docs/deploy.md tell people to write."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import FIXTURES, wait_until
from tests.kube_node import fixture_proc, host_root
from tests.kubelet import Kubelet, container, devices, pod, response
from tests.kustomize import by_kind, render
from tests.promstack import Prometheus, Target

pytestmark = [pytest.mark.live, pytest.mark.tools]

MIG_PROFILE = FIXTURES / "gpu-profiles" / "mig-h200.yaml"
# Two MIG instances of the recorded H200, held by two pods (with MIG on, the whole GPU is not allocatable).
KUBELET = response(
    pod("bert-worker-0", "ml", container("trainer", devices("nvidia.com/mig-2g.35gb",
                                                            "MIG-00000002-0000-0000-0000-000000000002"))),
    pod("nb-3", "research", container("lab", devices("nvidia.com/mig-1g.18gb",
                                                      "MIG-00000003-0000-0000-0000-000000000003"))),
)


@pytest.fixture
def gpu_node(tmp_path: Path, start_exporter: Any) -> Iterator[Any]:
    """A real exporter on a node with a kubelet (in this test), the MIG GPU and a trainer in a pod."""
    kubelet = Kubelet(tmp_path / "kubelet.sock", lambda: KUBELET)
    try:
        yield start_exporter([
            "--collector.disable-defaults", "--collector.gpu", "--collector.kubernetes", "--collector.training",
            f"--collector.gpu.profile={MIG_PROFILE}", f"--path.procfs={fixture_proc(tmp_path)}",
            f"--path.rootfs={host_root(tmp_path)}",
            f"--collector.kubernetes.pod-resources-socket={tmp_path / 'kubelet.sock'}"])
    finally:
        kubelet.stop()
    assert kubelet.calls >= 1


def test_gpu_and_trainer_series_join_their_pods_in_prometheus(tmp_path: Path, gpu_node: Any) -> None:
    (tmp_path / "prom").mkdir()
    prometheus = Prometheus(tmp_path / "prom", [Target(f"127.0.0.1:{gpu_node.port}", "gpu-node-1")], [])
    prometheus.start()
    try:
        joined = wait_until(lambda: prometheus.query(
            "bottleneck_gpu_memory_used_bytes * on (instance, uuid) group_left (namespace, pod, container) "
            "bottleneck_gpu_kubernetes_info"), 90, "the GPU join")
        by_gpu = {r["metric"]["gpu"]: (r["metric"]["namespace"], r["metric"]["pod"], r["metric"]["container"])
                  for r in joined}
        assert by_gpu == {"0/3/0": ("ml", "bert-worker-0", "trainer"), "0/9/0": ("research", "nb-3", "lab")}
        trainer = prometheus.query('bottleneck_training_threads{namespace="ml", pod="bert-worker-0", '
                                   'container="trainer", role="main"}')
        assert [r["metric"]["process"] for r in trainer] == ["train.py"]
        per_pod = prometheus.query('sum by (pod) (bottleneck_training_threads{pod!=""})')
        assert [r["metric"]["pod"] for r in per_pod] == ["bert-worker-0"]
        success = prometheus.query('bottleneck_scrape_collector_success{collector="kubernetes"}')
        assert [r["value"][1] for r in success] == ["1"]
    finally:
        prometheus.stop()


def operator_scrape_config(port: int, honor_labels: bool) -> dict[str, Any]:
    """The scrape config prometheus-operator makes of our ServiceMonitor: its own target labels (namespace,
    pod, container of the scraped pod, from Kubernetes service discovery, here static), then the
    ServiceMonitor's relabelings, taken from the rendered manifest."""
    (endpoint,) = by_kind(render("base"), "ServiceMonitor")["spec"]["endpoints"]
    relabelings = [{"source_labels": r["sourceLabels"], "target_label": r["targetLabel"]} if r["action"] == "replace"
                   else {"action": r["action"], "regex": r["regex"]} for r in endpoint["relabelings"]]
    return {"scrape_configs": [{
        "job_name": "bottleneck-exporter", "honor_labels": honor_labels, "scrape_interval": "1s",
        "scrape_timeout": "1s",
        "static_configs": [{"targets": [f"127.0.0.1:{port}"], "labels": {
            "__meta_kubernetes_namespace": "monitoring", "__meta_kubernetes_pod_name": "bottleneck-exporter-x7k2p",
            "__meta_kubernetes_pod_container_name": "bottleneck-exporter",
            "__meta_kubernetes_pod_node_name": "gpu-node-1"}}],
        "relabel_configs": [
            {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
            {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
            *relabelings],
    }]}


@pytest.mark.parametrize("honor_labels", [True, False])
def test_servicemonitor_keeps_the_workloads_pod_and_drops_the_exporters(
        tmp_path: Path, gpu_node: Any, honor_labels: bool) -> None:
    """What the docs promise of the shipped ServiceMonitor, with a real Prometheus: trainer and GPU series keep
    their workload's pod; no series says the exporter's own pod; only `namespace` meets the target's."""
    workdir = tmp_path / "prom"
    workdir.mkdir()
    prometheus = Prometheus(workdir, [], [])
    prometheus.config.write_text(yaml.safe_dump(operator_scrape_config(gpu_node.port, honor_labels)))
    prometheus.start()
    try:
        wait_until(lambda: prometheus.query("bottleneck_gpu_kubernetes_info"), 90, "a scrape")
        namespace = "namespace" if honor_labels else "exported_namespace"
        trainer = prometheus.query('bottleneck_training_threads{process="train.py", local_rank="0", role="main"}')
        assert [(r["metric"].get(namespace), r["metric"].get("pod"), r["metric"].get("container"))
                for r in trainer] == [("ml", "bert-worker-0", "trainer")]
        assert all(r["metric"]["instance"] == "gpu-node-1" for r in trainer)
        gpus = prometheus.query("bottleneck_gpu_kubernetes_info")
        assert sorted(r["metric"]["pod"] for r in gpus) == ["bert-worker-0", "nb-3"]
        # Not a workload's: no pod at all, and the namespace is the exporter's (the target's).
        for expr in ('bottleneck_training_threads{local_rank!="0", role="main"}',
                     'bottleneck_gpu_memory_used_bytes{gpu="0"}', "up"):
            series = prometheus.query(expr)
            assert series, expr
            assert all("pod" not in r["metric"] and "container" not in r["metric"] for r in series), expr
            assert all(r["metric"]["namespace"] == "monitoring" for r in series), expr
    finally:
        prometheus.stop()
