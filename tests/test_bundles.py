"""Rule bundles per source: the scenario table, translated to node_exporter's and dcgm-exporter's series, under
promtool for every bundle; the translators checked against a real node_exporter scrape and a recorded
dcgm-exporter scrape; left-out verdicts named in the runbook and the bundle's files."""

from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from bottleneck_exporter import diagnose
from bottleneck_exporter.collectors.coexistence import NODE_EXPORTER as NODE_EXPORTER_TWINS
from bottleneck_exporter.heuristics import generate
from bottleneck_exporter.heuristics.catalogue import resolve
from bottleneck_exporter.heuristics.scenarios import SCENARIOS
from bottleneck_exporter.heuristics.scenarios.replay import ScenarioError, replay, scrape_job
from bottleneck_exporter.heuristics.scenarios.series import Series
from bottleneck_exporter.heuristics.scenarios.table import FIRES
from bottleneck_exporter.heuristics.sources import BUNDLES, DEFAULT_BUNDLE, GPU, HOST, OURS, family_of, gpu_unique
from tests.conftest import DCGM_FIXTURE, ROOT, require_tool
from tests.promstack import Process

OTHER_BUNDLES = [b for b in BUNDLES if b != DEFAULT_BUNDLE]


def translated(bundle: str) -> list[Series]:
    """Every series the scenario table feeds to ``bundle``'s rules."""
    catalogue = resolve(bundle=bundle)
    return [s for scenario in SCENARIOS if scenario.alert not in catalogue.left_out
            and scenario.runs_in(BUNDLES[bundle]) for s in replay(scenario, catalogue).series]


def exposition_labels(text: str) -> dict[str, set[frozenset[str]]]:
    """Series name → the label-name sets it has in a Prometheus text exposition."""
    found: dict[str, set[frozenset[str]]] = {}
    for line in text.splitlines():
        match = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s", line)
        if match and not line.startswith("#"):
            names = frozenset(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="', match.group(3) or ""))
            found.setdefault(match.group(1), set()).add(names)
    return found


def test_every_bundles_rule_files_pass_promtool_check() -> None:
    files = [str(ROOT / f) for b in OTHER_BUNDLES for f in generate.bundle_files(b)]
    result = subprocess.run([require_tool("promtool"), "check", "rules", *files], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("bundle", OTHER_BUNDLES)
def test_promtool_runs_the_committed_scenario_table_of_the_bundle(bundle: str, tmp_path: Path) -> None:
    """The file an operator runs (promtool test rules prometheus/bundles/<bundle>/tests/scenarios.yml), from
    another directory: the rule files are found next to it. Its content is drift-tested with every generated
    file (tests/test_rules.py); generating it replays every scenario through the Python evaluator first
    (ScenarioError when it disagrees with the scenario's exact expectation)."""
    path = ROOT / generate.bundle_rule_test(bundle)
    tests = yaml.safe_load(path.read_text())["tests"]
    catalogue = resolve(bundle=bundle)
    alerts = {check["alertname"] for test in tests for check in test["alert_rule_test"]}
    assert alerts == {r.alert for r in catalogue.alerts}, "every alert of the bundle, and only those"
    assert len(tests) == len([s for s in SCENARIOS if s.alert not in catalogue.left_out
                              and s.runs_in(BUNDLES[bundle])])
    result = subprocess.run([require_tool("promtool"), "test", "rules", str(path)], capture_output=True, text=True,
                            cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert result.stdout.count("SUCCESS") == 1


@pytest.mark.parametrize(("bundle", "alert", "job"), [
    ("bottleneck", "CpuSaturated", "bottleneck-exporter"),
    ("node-exporter", "CpuSaturated", "node-exporter"),
    ("node-exporter", "GpuTooHot", "bottleneck-exporter"),
    ("node-exporter-dcgm", "NetworkBound", "node-exporter"),
    ("node-exporter-dcgm", "GpuTooHot", "dcgm-exporter"),  # the temperature is dcgm-exporter's
    ("node-exporter-dcgm", "GpuThrottled", "bottleneck-exporter"),  # the clock events only we have
    ("node-exporter-dcgm", "InputBound", "bottleneck-exporter"),
    ("node-exporter-dcgm-only", "GpuMemoryNearlyFull", "dcgm-exporter"),
])
def test_committed_bundle_tests_expect_the_scrape_job_of_the_exporter_whose_series_label_the_alert(
        bundle: str, alert: str, job: str) -> None:
    """Regression: the scenario expectations (written with our job) were compared with a bundle's alerts
    ignoring the job; now they are translated to the job the alert really carries, and compared exactly."""
    catalogue = resolve(bundle=bundle)
    assert scrape_job(catalogue.alert(alert)) == job
    if bundle == DEFAULT_BUNDLE:
        return
    tests = yaml.safe_load((ROOT / generate.bundle_rule_test(bundle)).read_text())["tests"]
    jobs = {expected["exp_labels"]["job"] for test in tests for check in test["alert_rule_test"]
            if check["alertname"] == f"Bottleneck{alert}" for expected in check["exp_alerts"]}
    assert jobs == {job}


def test_a_scenario_expecting_the_wrong_scrape_job_fails_its_replay(monkeypatch: pytest.MonkeyPatch) -> None:
    import bottleneck_exporter.heuristics.scenarios.replay as replay_module

    catalogue = resolve(bundle="node-exporter")
    scenario = next(s for s in SCENARIOS if s.alert == "NetworkBound" and s.kind == FIRES)
    replay(scenario, catalogue)
    monkeypatch.setattr(replay_module, "scrape_job", lambda rule: "bottleneck-exporter")
    with pytest.raises(ScenarioError, match="'job': 'bottleneck-exporter'"):
        replay(scenario, catalogue)


def test_node_exporter_bundle_reads_no_series_of_our_host_collectors() -> None:
    rules = (ROOT / "prometheus/bundles/node-exporter/recording-rules.yml").read_text()
    rules += (ROOT / "prometheus/bundles/node-exporter/alert-rules.yml").read_text()
    ours = set(re.findall(r"\b(bottleneck_(?:cpu|cpus|load1|context|memory|pressure|disk|network)[a-z0-9_]*)\b",
                          re.sub(r"[a-z_]+:bottleneck_[a-z0-9_]+:[a-z0-9_]+", "", rules)))
    assert ours == set()
    assert "node_cpu_seconds_total" in rules and "node_pressure_io_waiting_seconds_total" in rules


def test_node_exporter_translation_names_only_series_a_real_node_exporter_exposes(tmp_path: Path) -> None:
    exporter = Process("node_exporter", tmp_path)
    exporter.spawn([require_tool("prometheus-node-exporter"), f"--web.listen-address=127.0.0.1:{exporter.port}"])
    try:
        exporter.wait_ready("/metrics")
        text = requests.get(exporter.url + "/metrics", timeout=10).text
        scrape = exposition_labels(text)
    finally:
        exporter.stop()
    names = {n for n in (dict(s.labels)["__name__"] for s in translated("node-exporter")) if n.startswith("node_")}
    assert "node_cpu_seconds_total" in names and "node_vmstat_pswpin" in names
    for name in sorted(names):
        if name.startswith("node_schedstat_"):  # /proc/schedstat is missing in some containers (this one)
            assert name in scrape or 'node_scrape_collector_success{collector="schedstat"} 0' in text
            continue
        assert name in scrape, f"{name} is not in node_exporter's scrape"
    labels = {frozenset(k for k, _ in s.labels if k not in ("__name__", "instance", "job"))
              for s in translated("node-exporter") if dict(s.labels)["__name__"] == "node_cpu_seconds_total"}
    assert labels == {frozenset({"cpu", "mode"})} and frozenset({"cpu", "mode"}) in scrape["node_cpu_seconds_total"]


def test_dcgm_translation_has_the_names_and_labels_of_the_recorded_dcgm_exporter_scrape() -> None:
    scrape = exposition_labels(DCGM_FIXTURE.read_text())
    series = [s for s in translated("node-exporter-dcgm-only") if dict(s.labels)["__name__"].startswith("DCGM_")]
    assert {dict(s.labels)["__name__"] for s in series} == {
        "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_RESERVED",
        "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"}
    kube = {"container", "namespace", "pod"}  # only on a GPU allocated to a pod
    for s in series:
        name = dict(s.labels)["__name__"]
        mine = frozenset(k for k, _ in s.labels if k not in ("__name__", "instance", "job"))
        assert any(mine == theirs - kube for theirs in scrape[name]), (name, mine, scrape[name])
    utilization = [v for s in series if dict(s.labels)["__name__"] == "DCGM_FI_DEV_GPU_UTIL" for v in s.track if v]
    assert max(utilization) > 1, "dcgm-exporter's GPU_UTIL is in percent"


@pytest.mark.parametrize("bundle", ["node-exporter-dcgm", "node-exporter-dcgm-only"])
def test_dcgm_bundles_read_the_tensor_core_activity_of_dcgm_exporter(bundle: str) -> None:
    """Regression: they recorded the busiest Tensor-Core activity as 0, and NoMixedPrecision fired on a job whose
    exact float32 matmuls ran beside busy Tensor Cores (lower precision the hook cannot see)."""
    catalogue = resolve(bundle=bundle)
    assert "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE" in catalogue.reads["NoMixedPrecision"]
    assert "instance:bottleneck_gpu_tensor_activity:max" not in catalogue.reduced


def test_a_verdict_that_needs_our_sub_second_samples_is_left_out_of_the_dcgm_bundle_and_the_runbook_says_so() -> None:
    dcgm = resolve(bundle="node-exporter-dcgm-only")
    # Beside dcgm-exporter, our gpu collector's unique series (the preset) still carry the samples.
    assert "GpuSawtooth" in dcgm.left_out and "GpuSawtooth" not in resolve(bundle="node-exporter-dcgm").left_out
    assert "BottleneckGpuSawtooth" not in {r.alert for r in dcgm.alerts}
    alerts = (ROOT / "prometheus/bundles/node-exporter-dcgm-only/alert-rules.yml").read_text()
    assert "alert: BottleneckGpuSawtooth" not in alerts
    assert "# Left out: BottleneckGpuSawtooth (needs bottleneck_gpu_utilization_samples_bucket" in alerts
    runbook = (ROOT / "docs/runbook.md").read_text()
    section = runbook.split("## BottleneckGpuSawtooth")[1].split("\n## ")[0]
    assert "**Sources.** Reads GPU series from bottleneck-exporter. In the bundles `bottleneck`, `node-exporter`, " \
        "`node-exporter-dcgm`." in section
    assert "Left out of `node-exporter-dcgm-only`: it needs bottleneck-exporter's gpu collector (NVML)" in section
    assert "| BottleneckGpuSawtooth | yes | yes | yes | no |" in runbook


def test_every_bundle_records_a_signal_under_the_same_name_whatever_its_source() -> None:
    ours = {r.key: r.record for r in resolve().records}
    for bundle in OTHER_BUNDLES:
        for record in resolve(bundle=bundle).records:
            assert ours[record.key] == record.record
    dcgm = {r.key: r.expr for r in resolve(bundle="node-exporter-dcgm").records}
    assert "DCGM_FI_DEV_GPU_UTIL" in dcgm["gpu_util"] and "node_cpu_seconds_total" in dcgm["cpu_busy_cores"]
    # Only our gpu collector has the PCIe link state: beside dcgm-exporter it records it from ours.
    assert "bottleneck_gpu_pcie_link_width" in dcgm["pcie"]


def test_translators_give_each_peers_series_the_peers_scrape_job() -> None:
    """A join between series of two exporters without on (...) matches nothing in a real stack, where each
    exporter is a scrape job of its own; the translated scenario series carry those jobs so promtool finds it."""
    jobs = {(dict(s.labels)["__name__"][:5], dict(s.labels)["job"]) for s in translated("node-exporter-dcgm")
            if dict(s.labels)["__name__"][:5] in ("node_", "DCGM_")}
    assert jobs == {("node_", "node-exporter"), ("DCGM_", "dcgm-exporter")}


def test_an_unknown_bundle_is_an_error_naming_the_known_ones() -> None:
    with pytest.raises(ValueError, match="unknown bundle 'dcgm'; known: bottleneck, node-exporter"):
        resolve(bundle="dcgm")


def test_diagnose_refuses_a_bundle_it_does_not_know_naming_those_it_does(capsys: pytest.CaptureFixture[str]) -> None:
    """(A known bundle whose exporters were not given: tests/test_peers.py.)"""
    assert diagnose.main(["--bundle", "nvidia"], stderr=io.StringIO()) == diagnose.EXIT_USAGE
    err = capsys.readouterr().err  # argparse's own message
    assert "invalid choice: 'nvidia'" in err and "'node-exporter-dcgm-only'" in err


@pytest.mark.parametrize(("overlay", "bundle"), [("beside-node-exporter-and-dcgm", "node-exporter-dcgm"),
                                                 ("kube-prometheus-stack", "node-exporter"),
                                                 ("beside-node-exporter-and-dcgm-only", "node-exporter-dcgm-only")])
def test_the_overlay_beside_node_exporter_installs_its_bundle(overlay: str, bundle: str) -> None:
    generator = ROOT / "deploy/kubernetes/generate_prometheusrule.py"
    check = subprocess.run([sys.executable, str(generator), "--check"], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stderr
    rendered = subprocess.run([require_tool("kubectl"), "kustomize",
                               str(ROOT / "deploy/kubernetes/overlays" / overlay)],
                              capture_output=True, text=True, timeout=120, check=True).stdout
    (rule,) = [o for o in yaml.safe_load_all(rendered) if o and o["kind"] == "PrometheusRule"]
    expected = [group for f in generate.bundle_files(bundle)
                for group in yaml.safe_load((ROOT / f).read_text())["groups"]]
    assert rule["spec"]["groups"] == expected
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"


@pytest.mark.parametrize(("bundle", "preset"), [("node-exporter", "beside-node-exporter"),
                                                ("node-exporter-dcgm", "beside-node-exporter-and-dcgm"),
                                                ("node-exporter-dcgm-only", "beside-node-exporter-and-dcgm-only")])
def test_the_exporter_under_the_bundles_preset_exports_every_series_of_ours_the_bundle_reads(
        bundle: str, preset: str, start_exporter: Any) -> None:
    """The bundle and the preset describe the same deployment: what the rules read from us, the preset keeps."""
    profile = f"--collector.gpu.profile={ROOT / 'tests/fixtures/gpu-profiles/hopper-4x-h100.yaml'}"
    scraped = {}
    for mode, args in (("preset", [f"--collector.preset={preset}", profile]), ("default", [profile])):
        exporter = start_exporter(args)
        scraped[mode] = set(exposition_labels(requests.get(exporter.url + "/metrics", timeout=30).text))
    read = {m for series in resolve(bundle=bundle).reads.values() for m in series}
    ours = {m for m in read if family_of(m) in ((GPU, OURS), (HOST, OURS))}
    assert not {m for m in read if family_of(m) == (HOST, OURS)}
    # Series that only appear with an event (an XID) are absent from both scrapes; the preset keeps the rest.
    assert ours & scraped["default"] <= scraped["preset"], sorted(ours & scraped["default"] - scraped["preset"])
    assert all(gpu_unique(m) for m in ours - scraped["default"])
    if not ours:  # the GPU series come from dcgm-exporter alone: none of ours, not even kubernetes' GPU info
        assert not {m for m in scraped["preset"] if m.startswith("bottleneck_gpu_") or m in NODE_EXPORTER_TWINS}
        assert {m for m in scraped["default"] if m.startswith("bottleneck_gpu_")}
