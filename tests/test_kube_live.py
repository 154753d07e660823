"""Live: the real exporter (a recorded MIG GPU, a fixture node with a trainer in a pod, a gRPC kubelet in this
test) scraped by a real Prometheus, and the joins docs/metrics.md and docs/deploy.md tell people to write."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FIXTURES
from tests.promstack import Prometheus, Target, wait_until
from tests.test_kube_identity import fixture_proc, host_root
from tests.test_kube_podresources import Kubelet, container, devices, pod, response

pytestmark = [pytest.mark.live, pytest.mark.tools]

MIG_PROFILE = FIXTURES / "gpu-profiles" / "mig-h200.yaml"
# Two MIG instances of the recorded H200, held by two pods (with MIG on, the whole GPU is not allocatable).
KUBELET = response(
    pod("bert-worker-0", "ml", container("trainer", devices("nvidia.com/mig-2g.35gb",
                                                            "MIG-00000002-0000-0000-0000-000000000002"))),
    pod("nb-3", "research", container("lab", devices("nvidia.com/mig-1g.18gb",
                                                      "MIG-00000003-0000-0000-0000-000000000003"))),
)


def test_gpu_and_trainer_series_join_their_pods_in_prometheus(tmp_path: Path, start_exporter: Any) -> None:
    kubelet = Kubelet(tmp_path / "kubelet.sock", lambda: KUBELET)
    try:
        exporter = start_exporter([
            "--collector.disable-defaults", "--collector.gpu", "--collector.kubernetes", "--collector.training",
            f"--collector.gpu.profile={MIG_PROFILE}", f"--path.procfs={fixture_proc(tmp_path)}",
            f"--path.rootfs={host_root(tmp_path)}",
            f"--collector.kubernetes.pod-resources-socket={tmp_path / 'kubelet.sock'}"])
        (tmp_path / "prom").mkdir()
        prometheus = Prometheus(tmp_path / "prom", [Target(f"127.0.0.1:{exporter.port}", "gpu-node-1")], [])
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
    finally:
        kubelet.stop()
    assert kubelet.calls >= 1
