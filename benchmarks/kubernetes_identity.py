"""What Kubernetes identity costs a scrape: the kubelet pod-resources call and the trainers' pod lookup.

    .venv/bin/python benchmarks/kubernetes_identity.py [--pods 110] [--trainers 32] [--repeat 200]

Starts a gRPC server on a Unix socket that answers ``v1.PodResourcesLister/List`` like a full node's kubelet
(``--pods`` pods, the kubelet's default maximum, with two containers each, one GPU per pod for the first 8),
then prints the median and p90 of: one ``List`` call (a fresh channel each time, as the collector does), a
scrape of the ``kubernetes`` collector that reuses its cached answer, and the training collector's pod lookup
for ``--trainers`` processes against a host root holding the kubelet's log directories for those pods (the
cgroup files are read once per process; the log listings on every scrape). Also prints the exporter's RSS
growth from loading grpc and making the first call.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent import futures
from pathlib import Path

from bottleneck_exporter.collectors.base import Context
from bottleneck_exporter.collectors.kubernetes import KubernetesCollector
from bottleneck_exporter.kube.podresources import list_pod_resources, messages
from bottleneck_exporter.kube.processes import ProcessPods


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def kubelet_answer(pods: int) -> bytes:
    classes = messages()
    response = classes["ListPodResourcesResponse"]()
    for index in range(pods):
        pod = response.pod_resources.add(name=f"train-{index:03d}-worker-0", namespace="ml")
        trainer = pod.containers.add(name="trainer")
        if index < 8:
            gpu = f"GPU-{index:08x}-0000-0000-0000-000000000000"
            trainer.devices.add(resource_name="nvidia.com/gpu", device_ids=[gpu])
        pod.containers.add(name="log-shipper")
    return bytes(response.SerializeToString())


def uid(index: int) -> str:
    return f"{index:08x}-4b1a-4f6e-9c3d-7a8b9c0d1e2f"


def container_id(index: int) -> str:
    return f"{index:064x}"


def host_tree(root: Path, pods: int, trainers: int) -> tuple[Path, Path]:
    proc, host = root / "proc", root / "host"
    for index in range(pods):
        pod_dir = host / "var/log/pods" / f"ml_train-{index:03d}-worker-0_{uid(index)}"
        for name in ("trainer", "log-shipper"):
            (pod_dir / name).mkdir(parents=True)
        links = host / "var/log/containers"
        links.mkdir(parents=True, exist_ok=True)
        (links / f"train-{index:03d}-worker-0_ml_trainer-{container_id(index)}.log").symlink_to(pod_dir / "trainer")
    for pid in range(1000, 1000 + trainers):
        index = pid - 1000
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "cgroup").write_text(
            "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
            f"{uid(index).replace('-', '_')}.slice/cri-containerd-{container_id(index)}.scope\n")
    return proc, host


def timed(repeat: int, action: Callable[[], object]) -> tuple[float, float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.9)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=110)
    parser.add_argument("--trainers", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()

    before = rss_kib()
    import grpc

    answer = kubelet_answer(args.pods)
    with tempfile.TemporaryDirectory() as tmp:
        socket_path = Path(tmp) / "kubelet.sock"
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        handler = grpc.unary_unary_rpc_method_handler(lambda request, context: answer)
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
            "v1.PodResourcesLister", {"List": handler}),))
        server.add_insecure_port(f"unix:{socket_path}")
        server.start()
        try:
            list_pod_resources(str(socket_path), 2.0)
            print(f"RSS after loading grpc, a server and one call: +{(rss_kib() - before) / 1024:.1f} MiB")
            print(f"kubelet answer: {len(answer)} bytes for {args.pods} pods")
            median, p90 = timed(args.repeat, lambda: list_pod_resources(str(socket_path), 2.0))
            print(f"List call (fresh channel):            median {median * 1e3:.2f} ms  p90 {p90 * 1e3:.2f} ms")
            collector = KubernetesCollector(Context(options={"pod-resources-socket": str(socket_path)}))
            list(collector.collect())
            median, p90 = timed(args.repeat, lambda: list(collector.collect()))
            print(f"kubernetes collector, cached answer:  median {median * 1e6:.0f} us  p90 {p90 * 1e6:.0f} us")
        finally:
            server.stop(grace=None)

        proc, host = host_tree(Path(tmp), args.pods, args.trainers)
        pods = ProcessPods(str(proc), str(host))
        processes = [((pid, 1), pid) for pid in range(1000, 1000 + args.trainers)]
        assert len(pods.identify(processes)) == args.trainers
        median, p90 = timed(args.repeat, lambda: pods.identify(processes))
        print(f"pod lookup for {args.trainers} trainers, {args.pods} pods: median {median * 1e3:.2f} ms  "
              f"p90 {p90 * 1e3:.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
