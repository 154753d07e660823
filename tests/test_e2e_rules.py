"""End to end: the real exporter, a real Prometheus with the generated rules, real PyTorch training runs.

An input-bound run (num_workers=0, a dataset that burns CPU per item) must fire BottleneckInputBound and
``diagnose --prometheus.url`` must name it; a healthy run next to it (ready tensors) must raise no alert. A
CPU-only run that keeps every core busy with its own compute must not raise BottleneckCpuSaturated;
DataLoader workers sharing saturated cores while the (replayed, idle) GPU waits must raise
BottleneckLoaderSaturated. The
rules are generated with a short rate window and ``for:`` (generator parameters) so this takes a minute,
not ten. Prometheus scrapes with its default ``honor_labels: false`` (what prometheus-operator's
overrideHonorLabels forces): the rules must find the training job in ``training_job``.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from bottleneck_exporter import diagnose
from bottleneck_exporter.heuristics import generate
from bottleneck_exporter.heuristics.catalogue import resolve
from tests.conftest import ROOT, wait_until
from tests.promstack import EXPORTER_JOB, FOR, RATE_WINDOW, RULE_INTERVAL, Prometheus, Target, alerts_of

pytestmark = [pytest.mark.tools, pytest.mark.torch, pytest.mark.live]

CPU_PRESSURE_RATIO = resolve().parameters["cpu_pressure_ratio"]
LOADER_CPU_SHARE = resolve().parameters["loader_cpu_share"]






def test_input_bound_run_fires_and_diagnose_names_it_while_a_healthy_run_stays_quiet(
        tmp_path: Path, start_exporter: Any, trainers: Callable[..., subprocess.Popen[str]]) -> None:
    """Also the regression test for the training job's name riding in ``job``: with honor_labels: false it
    became exported_job and every training rule went silent without an error."""
    rules = tmp_path / "rules"
    assert generate.main(["--out", str(rules), "--set", f"rate_window={RATE_WINDOW}", "--set",
                          f"rule_interval={RULE_INTERVAL}", "--for", FOR]) == 0
    socket_path = tmp_path / "push.sock"
    exporter = start_exporter([f"--push.socket={socket_path}"])
    prometheus = Prometheus(tmp_path, [Target(f"127.0.0.1:{exporter.port}", "e2e-node")],
                            [rules / generate.RECORDING_RULES, rules / generate.ALERT_RULES]).start()
    (scrape,) = yaml.safe_load(prometheus.config.read_text())["scrape_configs"]
    assert scrape.get("honor_labels", False) is False
    try:
        trainers("e2e-slow", "slow", socket_path)
        trainers("e2e-fast", "fast", socket_path)

        firing = wait_until(
            lambda: [a for a in alerts_of(prometheus, "e2e-slow")
                     if a["labels"]["alertname"] == "BottleneckInputBound" and a["state"] == "firing"],
            180, "BottleneckInputBound to fire for the num_workers=0 run")
        assert firing[0]["labels"]["instance"] == "e2e-node"
        assert (firing[0]["labels"]["job"], firing[0]["labels"]["rank"]) == (EXPORTER_JOB, "0")
        assert "Rank 0 of job e2e-slow on e2e-node" in firing[0]["annotations"]["description"]
        # Nothing the exporter sends collides with the scrape's own labels.
        assert prometheus.query('count({__name__=~"bottleneck_.+", exported_job!=""})') == []
        assert prometheus.query('count({__name__=~"bottleneck_.+", exported_instance!=""})') == []
        assert "waits for the next batch" in firing[0]["annotations"]["description"]

        # The healthy run was seen by the rules (its data-wait share is recorded) for longer than the rate
        # window and for: together, and raised nothing.
        record = f'job_rank:bottleneck_train_data_wait:ratio_rate{RATE_WINDOW}{{training_job="e2e-fast"}}'
        samples = wait_until(lambda: prometheus.query(f"count_over_time({record}[40s]) >= 30"), 120,
                             "40s of recorded data-wait share for the healthy run")
        assert samples
        share = float(prometheus.query(record)[0]["value"][1])
        assert share < 0.5
        assert alerts_of(prometheus, "e2e-fast") == []

        out = io.StringIO()
        code = diagnose.main(["--prometheus.url", prometheus.url, "--json"], stdout=out)
        assert code in (diagnose.EXIT_OK, diagnose.EXIT_CRITICAL)
        report = json.loads(out.getvalue())
        slow = [v for v in report["verdicts"] if v["labels"].get("training_job") == "e2e-slow"]
        assert "BottleneckInputBound" in [v["alert"] for v in slow], report
        named = next(v for v in slow if v["alert"] == "BottleneckInputBound")
        assert named["state"] == "firing" and named["value"] > 0.5
        assert named["advice"].startswith("Raise DataLoader num_workers") and named["subject"] == "job e2e-slow"
        # The healthy run is minutes old: a condition of its warm-up (its memory rising while its workers start)
        # may be pending, held for less than its for:, but nothing about it fires.
        healthy = [v for v in report["verdicts"] if v["labels"].get("training_job") == "e2e-fast"]
        assert all(v["state"] == "pending" and v["needs_seconds"] > 0 for v in healthy), healthy
    finally:
        prometheus.stop()


def test_cpu_only_job_using_every_core_for_its_own_compute_is_not_cpu_saturated(
        tmp_path: Path, start_exporter: Any, trainers: Callable[..., subprocess.Popen[str]]) -> None:
    """Regression: a CPU-only job that used every core raised "CPU saturated, stop competing processes". Busy
    cores are a bottleneck only when something starves for them (an underfed GPU, a rank waiting for data,
    tasks queueing for a core). On a machine of its own the job's threads do not queue: no verdict. Where
    other tenants make tasks queue (PSI cpu some above cpu_pressure_ratio all along, as on a shared test
    machine), the verdict is due, and the test checks that it comes."""
    rules = tmp_path / "rules"
    assert generate.main(["--out", str(rules), "--set", f"rate_window={RATE_WINDOW}", "--set",
                          f"rule_interval={RULE_INTERVAL}", "--for", FOR]) == 0
    socket_path = tmp_path / "push.sock"
    exporter = start_exporter([f"--push.socket={socket_path}", "--no-collector.gpu"])
    prometheus = Prometheus(tmp_path, [Target(f"127.0.0.1:{exporter.port}", "e2e-node")],
                            [rules / generate.RECORDING_RULES, rules / generate.ALERT_RULES]).start()
    try:
        trainers("e2e-cpu", "fast", socket_path, "--threads", str(os.cpu_count() or 1))
        busy = f"instance:bottleneck_cpu_busy:ratio_rate{RATE_WINDOW}"
        pressure = f"instance:bottleneck_cpu_pressure_some:ratio_rate{RATE_WINDOW}"
        limit = CPU_PRESSURE_RATIO
        # 30 s of saturated cores while the job trains (longer than the rate window and for: together), with
        # tasks either never or always queueing meanwhile.
        saturated_while = (f"count_over_time({busy}[30s]) >= 25 and min_over_time({busy}[30s]) > 0.9 "
                           "and on (instance) instance:bottleneck_training_processes:count and on (instance) ")
        conditions = {"calm": f"max_over_time({pressure}[30s]) < {limit}",
                      "queueing": f"min_over_time({pressure}[30s]) > {limit}"}

        def settled() -> str | None:
            return next((name for name, expr in conditions.items() if prometheus.query(saturated_while + expr)), None)

        state = wait_until(settled, 240, "30s of saturated cores while the CPU-only job trains, tasks never or "
                           "always queueing")
        saturated = [a for a in prometheus.alerts() if a["labels"]["alertname"] == "BottleneckCpuSaturated"]
        if state == "calm":
            assert saturated == [], "CpuSaturated on a healthy CPU-only job"
        else:
            assert [a["state"] for a in saturated] == ["firing"], saturated
        wait = prometheus.query(
            f'job_rank:bottleneck_train_data_wait:ratio_rate{RATE_WINDOW}{{training_job="e2e-cpu"}}')
        assert wait and float(wait[0]["value"][1]) < 0.2, wait
    finally:
        prometheus.stop()


def test_dataloader_workers_sharing_saturated_cores_while_the_gpu_idles_are_input_bound(
        tmp_path: Path, start_exporter: Any, trainers: Callable[..., subprocess.Popen[str]]) -> None:
    """Regression: DataLoader workers that together saturate the CPUs, each below a full core because they
    share them, while the GPUs idle, got no input-bound verdict (the rule looked for one pegged thread).
    Real workers burn CPU in twice as many processes as cores; the idle GPU is a recorded profile's. Where
    other tenants take most of the CPU (a shared test machine), the loaders are starved rather than
    saturating, and the verdict due is CpuSaturated (an underfed GPU): the test checks whichever holds."""
    rules = tmp_path / "rules"
    assert generate.main(["--out", str(rules), "--set", f"rate_window={RATE_WINDOW}", "--set",
                          f"rule_interval={RULE_INTERVAL}", "--for", FOR]) == 0
    socket_path = tmp_path / "push.sock"
    idle_gpu = ROOT / "tests" / "fixtures" / "gpu-profiles" / "consumer-rtx-2080-super.yaml"
    exporter = start_exporter([f"--push.socket={socket_path}", f"--collector.gpu.profile={idle_gpu}"])
    prometheus = Prometheus(tmp_path, [Target(f"127.0.0.1:{exporter.port}", "e2e-node")],
                            [rules / generate.RECORDING_RULES, rules / generate.ALERT_RULES]).start()
    share = (f"sum by (instance) (instance_process:bottleneck_training_loader_cpu:rate{RATE_WINDOW}) / on (instance) "
             f"instance:bottleneck_cpu_busy_cores:rate{RATE_WINDOW}")

    def verdict() -> tuple[str, dict[str, Any]] | None:
        for alert in prometheus.alerts():
            name = alert["labels"]["alertname"]
            if alert["state"] != "firing":
                continue
            if name == "BottleneckLoaderSaturated":
                return name, alert
            if name == "BottleneckCpuSaturated" and prometheus.query(f"max_over_time(({share})[{RATE_WINDOW}:1s]) "
                                                                     f"< {LOADER_CPU_SHARE}"):
                return name, alert
        return None

    try:
        trainers("e2e-loaders", "slow", socket_path, "--workers", str(2 * (os.cpu_count() or 1)))
        name, alert = wait_until(verdict, 240, "LoaderSaturated (or CpuSaturated where other tenants starve "
                                 "the loaders)")
        if name == "BottleneckLoaderSaturated":
            assert alert["labels"]["process"] == "hook_trainer.py"
            assert "use all the CPU they can get" in alert["annotations"]["description"]
            # No single worker had a core of its own: the verdict came from the workers together.
            busiest = prometheus.query(
                f"instance_process:bottleneck_training_loader_busiest_thread:ratio_avg{RATE_WINDOW}")
            assert busiest and float(busiest[0]["value"][1]) < 0.9, busiest
    finally:
        prometheus.stop()
