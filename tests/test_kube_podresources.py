"""GPU → pod attribution from the kubelet's pod-resources API, against a real gRPC server on a Unix socket
(``tests.kubelet``), whose answers are encoded by hand from kubelet's api.proto."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from bottleneck_exporter.cli import build_collectors, build_parser
from bottleneck_exporter.collectors.kubernetes import KubernetesCollector
from bottleneck_exporter.collectors.orchestrator import Orchestrator
from bottleneck_exporter.kube.podresources import CLIENT_MISSING, PodResourcesError
from bottleneck_exporter.training.registry import TrainingRegistry
from tests.conftest import ROOT, require_tool, wait_until
from tests.kubelet import Kubelet, container, devices, pod, response

GPU0 = "GPU-5e0c1d2a-3b4c-5d6e-7f80-91a2b3c4d5e6"
GPU1 = "GPU-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9"
MIG = "MIG-77a1b2c3-d4e5-5f60-8172-93a4b5c6d7e8"


# ---- protobuf wire format, by hand ----















CLUSTER = response(
    pod("bert-worker-0", "ml",
        container("trainer", devices("nvidia.com/gpu", GPU0), cpu_ids=[2, 3]),
        container("log-shipper")),
    # Time-slicing: two replicas of GPU1 in one container, one in another pod.
    pod("notebook-7", "research", container("lab", devices("nvidia.com/gpu.shared", f"{GPU1}::0", f"{GPU1}::3"))),
    pod("notebook-8", "research", container("lab", devices("nvidia.com/gpu.shared", f"{GPU1}::1"))),
    pod("mig-job", "ml", container("worker", devices("nvidia.com/mig-1g.18gb", MIG))),
    pod("nic-user", "net", container("app", devices("example.com/sriov", "0000:3b:00.1"))),
)




@pytest.fixture
def kubelet(tmp_path: Path) -> Iterator[Callable[..., Kubelet]]:
    started: list[Kubelet] = []

    def start(answer: Callable[[], bytes] = lambda: CLUSTER) -> Kubelet:
        server = Kubelet(tmp_path / "kubelet.sock", answer)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def collector(socket_path: Path, *flags: str) -> KubernetesCollector:
    args = build_parser().parse_args(["--collector.disable-defaults", "--collector.kubernetes",
                                      f"--collector.kubernetes.pod-resources-socket={socket_path}", *flags])
    built = build_collectors(args, {}, TrainingRegistry())["kubernetes"]
    assert isinstance(built, KubernetesCollector)
    return built


def samples(source: Any) -> list[dict[str, str]]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(source)
    text = generate_latest(registry).decode()
    return [dict(s.labels, __name__=s.name, value=str(s.value))
            for family in text_string_to_metric_families(text) for s in family.samples]


def info(labels: dict[str, str]) -> list[dict[str, str]]:
    return [s for s in labels if s["__name__"] == "bottleneck_gpu_kubernetes_info"]


def test_gpus_mig_instances_and_time_sliced_replicas_map_to_their_containers(tmp_path: Path, kubelet: Any) -> None:
    kubelet()
    found = {(s["uuid"], s["resource"], s["namespace"], s["pod"], s["container"])
             for s in info(samples(collector(tmp_path / "kubelet.sock")))}
    assert found == {
        (GPU0, "nvidia.com/gpu", "ml", "bert-worker-0", "trainer"),
        (GPU1, "nvidia.com/gpu.shared", "research", "notebook-7", "lab"),
        (GPU1, "nvidia.com/gpu.shared", "research", "notebook-8", "lab"),
        (MIG, "nvidia.com/mig-1g.18gb", "ml", "mig-job", "worker"),
    }


def test_time_sliced_replicas_in_one_container_give_one_series(tmp_path: Path, kubelet: Any) -> None:
    kubelet()
    series = [s for s in info(samples(collector(tmp_path / "kubelet.sock"))) if s["pod"] == "notebook-7"]
    assert len(series) == 1 and series[0]["value"] == "1.0"


def test_kubelet_is_asked_once_per_refresh_interval(tmp_path: Path, kubelet: Any) -> None:
    server = kubelet()
    now = [100.0]
    built = collector(tmp_path / "kubelet.sock", "--collector.kubernetes.refresh-interval=10s")
    built._clock = lambda: now[0]
    for _ in range(3):
        list(built.collect())
    assert server.calls == 1
    now[0] += 10
    list(built.collect())
    assert server.calls == 2


def test_pod_leaving_its_gpu_disappears_on_the_next_refresh(tmp_path: Path, kubelet: Any) -> None:
    answers = [CLUSTER, response()]
    kubelet(lambda: answers[0])
    built = collector(tmp_path / "kubelet.sock")
    now = [0.0]
    built._clock = lambda: now[0]
    assert info(samples(built))
    answers.pop(0)
    now[0] += built.refresh
    assert info(samples(built)) == []


def test_off_kubernetes_exports_nothing_and_logs_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    built = collector(tmp_path / "absent.sock")
    orchestrator = Orchestrator({"kubernetes": built})
    with caplog.at_level(logging.DEBUG):
        for _ in range(3):
            scraped = samples(orchestrator)
    assert info(scraped) == []
    (success,) = [s for s in scraped if s["__name__"] == "bottleneck_scrape_collector_success"]
    assert success["value"] == "1.0", "no socket is not a failure"
    messages = [r for r in caplog.records if "pod-resources" in r.getMessage()]
    assert len(messages) == 1 and messages[0].levelno == logging.INFO


def test_kubelet_down_fails_the_collector_not_the_scrape(tmp_path: Path) -> None:
    """A socket file nobody listens on (kubelet stopped or restarting): connection refused."""
    path = tmp_path / "kubelet.sock"
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))
    stale.close()
    built = collector(path, "--collector.kubernetes.timeout=5")
    with pytest.raises(PodResourcesError, match="UNAVAILABLE"):
        list(built.collect())
    scraped = samples(Orchestrator({"kubernetes": built}))
    (success,) = [s for s in scraped if s["__name__"] == "bottleneck_scrape_collector_success"]
    assert success["value"] == "0.0" and info(scraped) == []


def test_slow_kubelet_times_out_without_waiting_for_its_answer(tmp_path: Path, kubelet: Any) -> None:
    """The handler is still blocked when the scrape gives up: the client never waited for the server."""
    release = threading.Event()

    def stuck() -> bytes:
        release.wait(120)
        return CLUSTER

    kubelet(stuck)
    built = collector(tmp_path / "kubelet.sock", "--collector.kubernetes.timeout=0.5")
    try:
        with pytest.raises(PodResourcesError, match="DEADLINE_EXCEEDED"):
            list(built.collect())
        assert not release.is_set()
    finally:
        release.set()


def test_kubelet_back_after_a_failure_is_used_again(tmp_path: Path, kubelet: Any) -> None:
    path = tmp_path / "kubelet.sock"
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))
    stale.close()
    built = collector(path)
    now = [0.0]
    built._clock = lambda: now[0]
    with pytest.raises(PodResourcesError):
        list(built.collect())
    with pytest.raises(PodResourcesError):
        list(built.collect())  # the failure is cached too: a dead kubelet costs one timeout per interval
    path.unlink()
    kubelet()
    now[0] += built.refresh
    assert info(samples(built))


def test_device_ids_that_are_not_uuids_are_left_out_with_one_warning(
        tmp_path: Path, kubelet: Any, caplog: pytest.LogCaptureFixture) -> None:
    kubelet(lambda: response(pod("p", "ns", container("c", devices("nvidia.com/gpu", "0", "1")))))
    built = collector(tmp_path / "kubelet.sock")
    now = [0.0]
    built._clock = lambda: now[0]
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            assert info(samples(built)) == []
            now[0] += built.refresh
    assert len([r for r in caplog.records if "deviceIDStrategy" in r.getMessage()]) == 1


@pytest.mark.parametrize("flag", ["--collector.kubernetes.timeout=0", "--collector.kubernetes.timeout=soon",
                                  "--collector.kubernetes.gpu-resource=("])
def test_bad_option_is_refused_naming_it(tmp_path: Path, flag: str) -> None:
    from bottleneck_exporter.config import ConfigError

    with pytest.raises(ConfigError, match=flag.split("=")[0].removeprefix("--")):
        collector(tmp_path / "kubelet.sock", flag)


NON_ROOT_SCRAPE = """
import logging, sys
from prometheus_client import CollectorRegistry, generate_latest
from bottleneck_exporter.cli import build_collectors, build_parser
from bottleneck_exporter.collectors.orchestrator import Orchestrator
from bottleneck_exporter.training.registry import TrainingRegistry
logging.basicConfig(level=logging.INFO, stream=sys.stderr)
args = build_parser().parse_args(["--collector.disable-defaults", "--collector.kubernetes",
                                  "--collector.kubernetes.pod-resources-socket=" + sys.argv[1]])
registry = CollectorRegistry(auto_describe=False)
registry.register(Orchestrator(build_collectors(args, {}, TrainingRegistry())))
for _ in range(3):
    text = generate_latest(registry).decode()
print(text)
"""


def test_root_only_socket_as_a_non_root_user_is_said_once_and_not_a_failure(kubelet: Any) -> None:
    """The kubelet's socket is srwxr-xr-x root: the base DaemonSet (uid 10001) cannot connect. That is how the
    node is, not a failing collector (BottleneckCollectorFailing would fire on every node)."""
    server = kubelet()
    # No write bit for anyone on the socket; as root, the scrape runs without capabilities (so without the
    # CAP_DAC_OVERRIDE that would ignore the mode), which leaves it where the DaemonSet's uid 10001 is.
    server.path.chmod(0o555)
    command = [sys.executable, "-c", NON_ROOT_SCRAPE, str(server.path)]
    if os.getuid() == 0:
        command = [require_tool("setpriv"), "--bounding-set=-all", "--inh-caps=-all", "--ambient-caps=-all",
                   *command]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert 'bottleneck_scrape_collector_success{collector="kubernetes"} 1.0' in result.stdout
    assert "bottleneck_gpu_kubernetes_info" not in result.stdout
    assert server.calls == 0
    assert result.stderr.count("not writable by uid") == 1, result.stderr


@pytest.mark.live
def test_without_grpcio_the_daemon_serves_and_only_the_kubernetes_collector_fails_naming_the_extra(
        tmp_path: Path, kubelet: Any, start_exporter: Any) -> None:
    """grpcio and protobuf left the required dependencies for the ``kubernetes`` extra: a node with the kubelet's
    socket and a plain ``pip install bottleneck-exporter`` must still start, scrape, and say what to install."""
    server = kubelet()
    blocked = tmp_path / "no-grpcio"
    blocked.mkdir()
    # Shadows the installed grpc as a missing distribution does: `import grpc` raises ModuleNotFoundError.
    (blocked / "grpc.py").write_text("raise ModuleNotFoundError(\"No module named 'grpc'\", name='grpc')\n")
    path = os.pathsep.join(filter(None, (str(blocked), os.environ.get("PYTHONPATH"))))
    exporter = start_exporter([f"--collector.kubernetes.pod-resources-socket={server.path}",
                               "--collector.kubernetes.refresh-interval=0.1s", "--no-collector.gpu",
                               f"--push.socket={tmp_path / 'push.sock'}"],
                              env={"PYTHONPATH": path})
    for _ in range(3):
        scraped = exporter.scrape()
    assert 'bottleneck_scrape_collector_success{collector="kubernetes"} 0.0' in scraped
    assert 'bottleneck_scrape_collector_success{collector="cpu"} 1.0' in scraped
    assert "bottleneck_gpu_kubernetes_info" not in scraped and server.calls == 0
    log = wait_until(lambda: CLIENT_MISSING in exporter.output() and exporter.output(), 10, "the failure's log line")
    assert len([line for line in log.splitlines() if CLIENT_MISSING in line]) == 1, log
