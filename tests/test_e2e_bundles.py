"""End to end with the exporters a cluster already runs: Debian's real ``prometheus-node-exporter`` beside our
exporter (host collectors off), a real Prometheus with the node-exporter bundle and real PyTorch training runs;
and a recorded dcgm-exporter scrape served as a static target to a real Prometheus with the
node-exporter-dcgm bundle. Short rate window and ``for:`` (generator parameters), as in test_e2e_rules.py."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from bottleneck_exporter import diagnose
from bottleneck_exporter.heuristics import generate
from bottleneck_exporter.heuristics.catalogue import resolve
from tests.conftest import DCGM_FIXTURE, ROOT, free_port, wait_until
from tests.promstack import (
    FOR,
    OPERATOR_TARGET_LABELS,
    RATE_WINDOW,
    RULE_INTERVAL,
    Process,
    Prometheus,
    Target,
    alerts_of,
    operator_relabel_configs,
)

pytestmark = [pytest.mark.tools, pytest.mark.torch, pytest.mark.live]

HOST_COLLECTORS_OFF = ["--no-collector.cpu", "--no-collector.memory", "--no-collector.pressure",
                       "--no-collector.disk", "--no-collector.network"]
NODE = "e2e-node"


def bundle_rules(tmp_path: Path, bundle: str) -> list[Path]:
    """``bundle``'s rules with the test's rate window and for:, written under ``tmp_path``."""
    rules = tmp_path / "rules"
    assert generate.main(["--out", str(rules), "--set", f"rate_window={RATE_WINDOW}", "--set",
                          f"rule_interval={RULE_INTERVAL}", "--for", FOR]) == 0
    return [rules / f for f in generate.bundle_files(bundle)]




def test_input_bound_run_fires_with_the_node_exporter_bundle_fed_by_node_exporter(
        tmp_path: Path, start_exporter: Any, node_exporter: Process,
        trainers: Callable[..., subprocess.Popen[str]]) -> None:
    socket_path = tmp_path / "push.sock"
    exporter = start_exporter([f"--push.socket={socket_path}", "--no-collector.gpu", *HOST_COLLECTORS_OFF])
    prometheus = Prometheus(tmp_path, [Target(f"127.0.0.1:{exporter.port}", NODE)],
                            bundle_rules(tmp_path, "node-exporter"),
                            peers={"node-exporter": [Target(f"127.0.0.1:{node_exporter.port}", NODE)]}).start()
    try:
        trainers("e2e-slow", "slow", socket_path)
        firing = wait_until(
            lambda: [a for a in alerts_of(prometheus, "e2e-slow")
                     if a["labels"]["alertname"] == "BottleneckInputBound" and a["state"] == "firing"],
            240, "BottleneckInputBound to fire for the num_workers=0 run (node-exporter bundle)")
        assert firing[0]["labels"]["instance"] == NODE
        # The node signals come from node_exporter: our exporter exports no host series, and the recorded
        # node signals carry node_exporter's scrape job.
        assert prometheus.query('count({__name__=~"bottleneck_(cpu|cpus|memory|pressure|disk|network)_.*"})') == []
        busy = prometheus.query(f"instance:bottleneck_cpu_busy:ratio_rate{RATE_WINDOW}")
        assert [(s["metric"]["instance"], s["metric"]["job"]) for s in busy] == [(NODE, "node-exporter")]
        stalls = prometheus.query(f"instance:bottleneck_io_pressure_some:ratio_rate{RATE_WINDOW}")
        assert stalls and 0 <= float(stalls[0]["value"][1]) <= 1
        # diagnose follows the bundle: it evaluates the node-exporter bundle's conditions.
        out = io.StringIO()
        code = diagnose.main(["--prometheus.url", prometheus.url, "--bundle", "node-exporter", "--json",
                              "--set", f"rate_window={RATE_WINDOW}"], stdout=out)
        assert code in (diagnose.EXIT_OK, diagnose.EXIT_CRITICAL)
        verdicts = json.loads(out.getvalue())["verdicts"]
        slow = [v["alert"] for v in verdicts if v["labels"].get("training_job") == "e2e-slow"]
        assert "BottleneckInputBound" in slow
    finally:
        prometheus.stop()


def test_cpu_contention_run_fires_the_same_alerts_from_node_exporter_as_from_our_host_collectors(
        tmp_path: Path, start_exporter: Any, node_exporter: Process,
        trainers: Callable[..., subprocess.Popen[str]]) -> None:
    """A CPU-bound input pipeline with twice as many DataLoader workers as cores: the cores saturate, tasks
    queue. Prometheus runs the node-exporter bundle; our exporter keeps its host collectors on here, only so
    that the bottleneck bundle's conditions of every alert that reads host series (spelled out: no recording
    rules needed) can be evaluated on the same Prometheus from our series, and compared with the alerts the
    bundle raises from node_exporter's series."""
    socket_path = tmp_path / "push.sock"
    exporter = start_exporter([f"--push.socket={socket_path}", "--no-collector.gpu"])
    prometheus = Prometheus(tmp_path, [Target(f"127.0.0.1:{exporter.port}", NODE)],
                            bundle_rules(tmp_path, "node-exporter"),
                            peers={"node-exporter": [Target(f"127.0.0.1:{node_exporter.port}", NODE)]}).start()
    ours = resolve({"rate_window": RATE_WINDOW}, FOR)
    theirs = resolve({"rate_window": RATE_WINDOW}, FOR, "node-exporter")
    alerts = ("InputBound", "IoBound", "CpuSaturated", "CpuOverloaded", "ContextSwitchStorm", "MemoryPressure",
              "Swapping", "NetworkBound", "DataLoaderWorkersExceedCpus")
    try:
        trainers("e2e-contention", "slow", socket_path, "--workers", str(2 * (os.cpu_count() or 1)))
        # Both sources read the same kernel counters: the signals each records agree.
        spelled = {r.key: r.expr for r in ours.records}
        for key in ("cpu_busy", "cpu_pressure"):
            record = next(r.record for r in theirs.records if r.key == key)

            def pair(expr: str = spelled[key], record: str = record) -> tuple[float, float] | None:
                mine, peer = prometheus.query(expr), prometheus.query(record)
                return (float(mine[0]["value"][1]), float(peer[0]["value"][1])) if mine and peer else None

            mine, peer = wait_until(pair, 120, f"{key} from both sources")
            assert abs(mine - peer) < 0.15, (key, mine, peer)

        def settled() -> dict[str, tuple[bool, bool]] | None:
            """Per alert: (its condition holds on our series, it fires from node_exporter's), once the
            condition has held, or not held, for 20 s on end."""
            outcome = {}
            firing = {a["labels"]["alertname"] for a in prometheus.alerts() if a["state"] == "firing"}
            for name in alerts:
                condition = f"count({ours.alert(name).inline_expr})"
                held = prometheus.query(f"count_over_time(({condition})[20s:1s]) >= 20")
                absent = prometheus.query(f"absent_over_time(({condition})[20s:1s])")
                if not (held or absent):
                    return None
                outcome[name] = (bool(held), theirs.alert(name).alert in firing)
            agree = all(a == b for a, b in outcome.values()) and any(a for a, _ in outcome.values())
            return outcome if agree else None

        outcome = wait_until(settled, 300, "the alerts from node_exporter's series to match the conditions on "
                             "ours, with at least one firing")
        print("alert: (holds on our series, fires from node_exporter's):", outcome)
    finally:
        prometheus.stop()




def fixture_values(name: str) -> dict[str, float]:
    """UUID → value of ``name`` in the recorded scrape."""
    found = {}
    for line in DCGM_FIXTURE.read_text().splitlines():
        match = re.match(rf'{name}{{.*UUID="([^"]+)".*}} (\S+)$', line)
        if match:
            found[match.group(1)] = float(match.group(2))
    return found


@pytest.mark.parametrize("bundle", ["node-exporter-dcgm", "node-exporter-dcgm-only"])
def test_recorded_dcgm_exporter_scrape_records_our_normalised_gpu_signals(tmp_path: Path, dcgm_exporter: str,
                                                                          bundle: str) -> None:
    prometheus = Prometheus(tmp_path, [], bundle_rules(tmp_path, bundle),
                            peers={"dcgm-exporter": [Target(dcgm_exporter, NODE)]}).start()
    try:
        util_record = f"instance_gpu:bottleneck_gpu_utilization:avg{RATE_WINDOW}"
        util = wait_until(lambda: prometheus.query(util_record), 90, util_record)
        memory = wait_until(lambda: prometheus.query("instance_gpu:bottleneck_gpu_memory_used:ratio"), 30,
                            "the GPU memory ratio")
        percent, used = fixture_values("DCGM_FI_DEV_GPU_UTIL"), fixture_values("DCGM_FI_DEV_FB_USED")
        free, reserved = fixture_values("DCGM_FI_DEV_FB_FREE"), fixture_values("DCGM_FI_DEV_FB_RESERVED")
        assert len(percent) == 4
        for result, expected in ((util, {u: p / 100 for u, p in percent.items()}),
                                 (memory, {u: used[u] / (used[u] + free[u] + reserved[u]) for u in used})):
            got = {s["metric"]["uuid"]: float(s["value"][1]) for s in result}
            assert got == pytest.approx(expected)
            for s in result:
                # Our GPU labels (gpu, uuid) and the scrape's (instance, job), plus the pod using the GPU;
                # none of dcgm-exporter's own.
                assert set(s["metric"]) - {"container", "namespace", "pod"} == {"__name__", "instance", "job",
                                                                                 "gpu", "uuid"}, s["metric"]
        pods = {s["metric"]["uuid"]: s["metric"].get("pod") for s in util}
        assert pods["GPU-00000000-0000-0000-0000-000000000000"] == "resnet-0"
    finally:
        prometheus.stop()


def _steps_pushed(exporter: Any, job: str) -> bool:
    text = requests.get(f"{exporter.url}/metrics", timeout=10).text
    return bool(re.search(rf'bottleneck_train_steps_total{{[^}}]*training_job="{job}"[^}}]*}} [1-9]', text))


def _standalone(args: list[str]) -> tuple[int, dict[str, Any]]:
    out = io.StringIO()
    code = diagnose.main([*args, "--json"], stdout=out, stderr=io.StringIO())
    return code, json.loads(out.getvalue())


def test_standalone_diagnose_reads_node_exporter_names_input_bound_and_survives_it_missing(
        tmp_path: Path, start_exporter: Any, node_exporter: Process,
        trainers: Callable[..., subprocess.Popen[str]]) -> None:
    """No Prometheus: diagnose samples our exporter (host collectors off, as under the preset) and the real
    node_exporter, and evaluates the node-exporter bundle it picks from the flags."""
    socket_path = tmp_path / "push.sock"
    exporter = start_exporter([f"--push.socket={socket_path}", "--collector.preset=beside-node-exporter",
                               "--no-collector.gpu"])
    trainers("e2e-slow", "slow", socket_path)
    wait_until(lambda: _steps_pushed(exporter, "e2e-slow"), 120, "the trainer's steps on our /metrics")
    ours = ["--exporter.url", f"{exporter.url}/metrics", "--window", "16", "--interval", "2"]

    code, report = _standalone([*ours, "--node-exporter.url", f"http://127.0.0.1:{node_exporter.port}/metrics"])
    assert code in (diagnose.EXIT_OK, diagnose.EXIT_CRITICAL)
    assert report["bundle"] == "node-exporter"
    assert [(s["name"], s["job"], s["failed"]) for s in report["sources"]] == [
        ("bottleneck-exporter", "bottleneck-exporter", 0), ("node_exporter", "node-exporter", 0)]
    assert not [m for m in report["missing"] if m.startswith("host CPU")]  # node_exporter's CPU series were read
    slow = {v["alert"] for v in report["verdicts"] if v["labels"].get("training_job") == "e2e-slow"}
    assert "BottleneckInputBound" in slow

    # node_exporter gone: said, with the verdicts that lack its series; the training verdict is not lost.
    code, report = _standalone([*ours, "--node-exporter.url", f"http://127.0.0.1:{free_port()}/metrics"])
    assert code in (diagnose.EXIT_OK, diagnose.EXIT_CRITICAL)
    peer = report["sources"][1]
    assert peer["failed"] == peer["scrapes"] > 0 and "refused" in peer["error"]
    assert "BottleneckCpuSaturated" in peer["unjudged"]
    assert [m for m in report["missing"] if m.startswith("host CPU")]
    slow = {v["alert"] for v in report["verdicts"] if v["labels"].get("training_job") == "e2e-slow"}
    assert "BottleneckInputBound" in slow


def test_standalone_diagnose_gives_gpu_findings_from_the_recorded_dcgm_exporter_scrape(
        tmp_path: Path, node_exporter: Process, dcgm_exporter: str) -> None:
    """The node-exporter-dcgm bundle, standalone: our collectors in process (host and GPU off), node_exporter,
    and the recorded dcgm-exporter scrape. GPU 1 of the recording has 71202 of 81592 MiB in use: 87%."""
    code, report = _standalone([
        "--window", "4", "--interval", "2", "--set", "gpu_memory_full_ratio=0.8",
        "--node-exporter.url", f"http://127.0.0.1:{node_exporter.port}/metrics",
        "--dcgm-exporter.url", f"http://{dcgm_exporter}/metrics",
        "--collector.preset=beside-node-exporter-and-dcgm", "--no-collector.gpu",
        f"--push.socket={tmp_path}/push.sock"])
    assert code in (diagnose.EXIT_OK, diagnose.EXIT_CRITICAL)
    assert report["bundle"] == "node-exporter-dcgm"
    assert [s["name"] for s in report["sources"]] == ["bottleneck-exporter", "node_exporter", "dcgm-exporter"]
    assert not [m for m in report["missing"] if m.startswith(("GPU", "host CPU"))]
    full = [v for v in report["verdicts"] if v["alert"] == "BottleneckGpuMemoryNearlyFull"]
    assert [(v["labels"]["gpu"], v["labels"]["uuid"], v["labels"]["job"]) for v in full] == [
        ("1", "GPU-00000001-0000-0000-0000-000000000001", "dcgm-exporter")]
    assert full[0]["value"] == pytest.approx(71202 / (71202 + 9878 + fixture_values("DCGM_FI_DEV_FB_RESERVED")[
        "GPU-00000001-0000-0000-0000-000000000001"]))
    assert full[0]["state"] == "pending" and full[0]["evidence"]


GPU_OPERATOR_VALUES = ROOT / "deploy/kubernetes/gpu-operator/dcgm-exporter-values.yaml"
KUBE_NODE = "gpu-node-1"
# kube-prometheus-stack's node-exporter ServiceMonitor: instance = the node's name.
NODE_EXPORTER_RELABELINGS = [{"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "instance",
                              "action": "replace"}]


def service_monitor_job(service: str, address: str, monitor: dict[str, Any]) -> dict[str, Any]:
    """The scrape job prometheus-operator writes for a ServiceMonitor endpoint (``monitor``: its honorLabels
    and relabelings), for one target carrying the labels Kubernetes service discovery gives a pod behind
    ``service`` on KUBE_NODE."""
    meta = {"__meta_kubernetes_namespace": "gpu-operator" if "dcgm" in service else "monitoring",
            "__meta_kubernetes_service_name": service, "__meta_kubernetes_pod_name": f"{service}-x7k2p",
            "__meta_kubernetes_pod_container_name": service, "__meta_kubernetes_endpoint_port_name": "metrics",
            "__meta_kubernetes_pod_node_name": KUBE_NODE}
    return {"job_name": f"serviceMonitor/{service}/0", "honor_labels": bool(monitor.get("honorLabels", False)),
            "static_configs": [{"targets": [address], "labels": meta}],
            "relabel_configs": OPERATOR_TARGET_LABELS + operator_relabel_configs(monitor.get("relabelings", []))}


def test_the_shipped_dcgm_exporter_relabelling_joins_its_gpus_with_the_node_on_instance(
        tmp_path: Path, dcgm_exporter: str, node_exporter: Process) -> None:
    """kube-prometheus-stack's node-exporter and the GPU Operator's dcgm-exporter as prometheus-operator scrapes
    them: dcgm-exporter twice, with the shipped Helm values' ServiceMonitor and with the chart's defaults
    (honorLabels false, no relabelings). The node-exporter-dcgm bundle's GPU signals join the node's on
    instance for the first only."""
    shipped = yaml.safe_load(GPU_OPERATOR_VALUES.read_text())["dcgmExporter"]["serviceMonitor"]
    jobs = [service_monitor_job("nvidia-dcgm-exporter", dcgm_exporter, shipped),
            service_monitor_job("nvidia-dcgm-exporter-defaults", dcgm_exporter, {}),
            service_monitor_job("node-exporter", f"127.0.0.1:{node_exporter.port}",
                                {"relabelings": NODE_EXPORTER_RELABELINGS})]
    prometheus = Prometheus(tmp_path, [], bundle_rules(tmp_path, "node-exporter-dcgm"), scrape_configs=jobs).start()
    records = {r.key: r.record for r in resolve({"rate_window": RATE_WINDOW}, FOR, "node-exporter-dcgm").records}
    try:
        # Every GPU is recorded from both jobs; the rules' joins with the node's CPU (CpuSaturated's starved GPU,
        # the straggler's node cause) are on instance.
        util = wait_until(lambda: len(prometheus.query(records["gpu_util"])) == 8 and prometheus.query(
            records["gpu_util"]), 90, "both dcgm-exporter jobs' GPU utilization recorded")
        wait_until(lambda: prometheus.query(records["cpu_busy"]), 60, "the node's CPU busy from node_exporter")
        instances = {s["metric"]["job"]: s["metric"]["instance"] for s in util}
        assert instances == {"nvidia-dcgm-exporter": KUBE_NODE, "nvidia-dcgm-exporter-defaults": dcgm_exporter}
        for gpu in ("gpu_util", "gpu_mem", "gpu_temp"):
            joined = prometheus.query(f'{records[gpu]} * on (instance) group_left () {records["cpu_busy"]}')
            assert sorted(s["metric"]["gpu"] for s in joined) == ["0", "1", "2", "3"], (gpu, joined)
            assert {s["metric"]["job"] for s in joined} == {"nvidia-dcgm-exporter"}, gpu
            assert prometheus.query(f'{records[gpu]}{{job="nvidia-dcgm-exporter-defaults"}} '
                                    f'and on (instance) {records["cpu_busy"]}') == [], gpu
        # honorLabels: the workload's pod stays pod; with the chart's default it is exported_pod.
        pods = {(s["metric"]["job"], s["metric"]["gpu"]): (s["metric"].get("pod"), s["metric"].get("exported_pod"))
                for s in util}
        assert pods[("nvidia-dcgm-exporter", "0")] == ("resnet-0", None)
        assert pods[("nvidia-dcgm-exporter-defaults", "0")] == ("nvidia-dcgm-exporter-defaults-x7k2p", "resnet-0")
    finally:
        prometheus.stop()
