"""The generated rules: current with the catalogue, accepted by promtool, and tested by the scenario table.

``promtool test rules`` runs the files rendered from exporter/heuristics/scenarios/; the Python side of the
same table is in test_diagnose.py.
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from bottleneck_exporter.collectors import REGISTRY, Context
from bottleneck_exporter.heuristics import catalogue as cat
from bottleneck_exporter.heuristics import generate
from bottleneck_exporter.heuristics.model import PARAM, CatalogueError
from bottleneck_exporter.heuristics.parameters import PARAMETERS
from bottleneck_exporter.heuristics.promql import parse
from bottleneck_exporter.heuristics.scenarios import SCENARIOS
from bottleneck_exporter.heuristics.scenarios.table import FIRES, NEAR_MISS, NOT_YET
from bottleneck_exporter.push.receiver import PushReceiver
from bottleneck_exporter.push.store import JobStore
from tests.conftest import ROOT, require_tool
from tests.kubelet import Kubelet, container, devices, pod, response

CATALOGUE = cat.resolve()
OUTPUTS = functools.cache(lambda: generate.outputs(CATALOGUE))
RULE_FILES = [ROOT / generate.RECORDING_RULES, ROOT / generate.ALERT_RULES]


def test_catalogue_is_consistent() -> None:
    cat.validate()


def test_a_verdict_written_in_another_area_s_module_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """An area's module holds its alert group's verdicts only: the rule files group the alerts by area."""
    training, node, *rest = cat.AREAS
    stray = next(h for h in node.heuristics if h.name == "Swapping")
    monkeypatch.setattr(cat, "AREAS", (dataclasses.replace(training, heuristics=(*training.heuristics, stray)), node,
                                       *rest))
    with pytest.raises(CatalogueError, match="heuristic Swapping of area training: group 'node'"):
        cat.validate()


def test_a_narrowed_record_is_read_as_its_selector_narrowed_and_only_a_per_series_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """<<phase_rate>>{phase="step"} reads the recorded rate's step series: spelled out (the Python evaluator,
    the dashboards) the rate of that series alone. An aggregation or a join narrowed after the fact need not be
    the same series, so the catalogue refuses to narrow one, naming it."""
    stepping = CATALOGUE.records[[r.key for r in CATALOGUE.records].index("stepping")]
    assert 'job_rank_phase:bottleneck_train_phase_seconds:rate5m{phase="step"}' in stepping.expr
    assert 'rate(bottleneck_train_phase_seconds_total{phase="step"}[5m])' in stepping.inline_expr
    monkeypatch.setitem(cat.RECORDS, "stepping", dataclasses.replace(
        cat.RECORDS["stepping"], expr='<<collective_time>>{rank="0"}'))
    with pytest.raises(CatalogueError, match=r'<<collective_time>>\{rank="0"\}: only a per-series record'):
        cat.resolve()


def test_committed_files_match_what_the_generator_writes() -> None:
    stale = [path for path, text in OUTPUTS().items()
             if not (ROOT / path).exists() or (ROOT / path).read_text() != text]
    assert not stale, f"generated files out of date, run `{generate.COMMAND}` (make generate): {stale}"
    committed = sorted(p.name for p in (ROOT / generate.RULE_TESTS).glob("*.yml"))
    assert committed == sorted(Path(p).name for p in generate.render_rule_tests_names()), "stale rule tests"


def test_generator_check_mode_names_a_drifted_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert generate.main(["--out", str(tmp_path)]) == 0
    assert generate.main(["--out", str(tmp_path), "--check"]) == 0
    alerts = tmp_path / generate.ALERT_RULES
    alerts.write_text(alerts.read_text().replace("> 0.5", "> 0.6"))
    assert generate.main(["--out", str(tmp_path), "--check"]) == 1
    assert generate.ALERT_RULES in capsys.readouterr().err


def test_every_generated_file_says_how_to_regenerate_it() -> None:
    for path in OUTPUTS():
        first = (ROOT / path).read_text().splitlines()[0]
        assert generate.COMMAND in first and "regenerate" in first, path


def test_promtool_check_rules_is_clean() -> None:
    result = subprocess.run([require_tool("promtool"), "check", "rules", *map(str, RULE_FILES)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "WARNING" not in result.stdout + result.stderr
    assert f"SUCCESS: {len(CATALOGUE.records)} rules found" in result.stdout
    assert f"SUCCESS: {len(CATALOGUE.alerts)} rules found" in result.stdout


def test_promtool_runs_every_scenario_against_the_generated_rules() -> None:
    files = sorted(glob.glob(str(ROOT / generate.RULE_TESTS / "*.yml")))
    result = subprocess.run([require_tool("promtool"), "test", "rules", *files],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert result.stdout.count("SUCCESS") == len(files)
    tests = sum(len(yaml.safe_load(Path(f).read_text())["tests"]) for f in files)
    assert tests == len(SCENARIOS)


def test_every_alert_and_severity_has_a_firing_a_near_miss_and_a_not_yet_scenario() -> None:
    kinds: dict[tuple[str, str], set[str]] = {}
    for scenario in SCENARIOS:
        kinds.setdefault((scenario.alert, scenario.severity), set()).add(scenario.kind)
    for rule in CATALOGUE.alerts:
        found = kinds.get((rule.heuristic.name, rule.severity), set())
        missing = {FIRES, NEAR_MISS, NOT_YET} - found
        assert not missing, f"{rule.alert} {rule.severity} has no {missing} scenario"


def test_scenario_names_are_unique_and_name_a_failure() -> None:
    titles = [s.title for s in SCENARIOS]
    assert len(titles) == len(set(titles))
    assert all(re.fullmatch(r"[a-z0-9_]+", s.name) and len(s.name) > 10 for s in SCENARIOS)


def test_alert_rules_follow_the_conventions() -> None:
    groups = yaml.safe_load((ROOT / generate.ALERT_RULES).read_text())["groups"]
    rules = [r for g in groups for r in g["rules"]]
    assert len(rules) == len(CATALOGUE.alerts)
    runbook = (ROOT / generate.RUNBOOK).read_text()
    base = str(CATALOGUE.parameters["runbook_base_url"])
    for rule in rules:
        assert re.fullmatch(r"Bottleneck[A-Z][A-Za-z0-9]+", rule["alert"])
        assert rule["labels"]["severity"] in ("critical", "warning", "info")
        assert re.fullmatch(r"\d+[smh]", rule["for"]), rule["alert"]
        annotations = rule["annotations"]
        assert {"summary", "description", "verdict", "advice", "runbook_url"} <= set(annotations)
        assert "$value" in annotations["description"] or rule["alert"] in (
            "BottleneckGpuLost", "BottleneckExporterDown", "BottleneckExporterAbsent", "BottleneckCollectorFailing"
        ), rule["alert"]
        assert annotations["runbook_url"] == f"{base}#{rule['alert'].lower()}"
        assert f"\n## {rule['alert']}\n" in runbook, f"no runbook section (anchor) for {rule['alert']}"


def test_no_parameter_is_left_unfilled_in_a_generated_file() -> None:
    """Regression: the runbook printed the meaning and evidence texts raw (`up{job="${exporter_job}"}`)."""
    for path, text in OUTPUTS().items():
        assert not PARAM.search(text), f"{path}: {PARAM.search(text)}"


def test_recording_rules_are_named_level_metric_operation() -> None:
    for record in CATALOGUE.records:
        level, metric, operation = record.record.split(":")
        assert re.fullmatch(r"[a-z]+(_[a-z]+)*", level) and metric.startswith("bottleneck_"), record.record
        assert re.fullmatch(r"[a-z0-9_]+", operation), record.record


def test_every_parameter_is_read_by_some_rule() -> None:
    # The generator itself reads these: a link in every alert, the label every clause keeps, the groups' interval.
    used = {name for h in cat.HEURISTICS for name in cat.parameters_read(h)} | {"runbook_base_url", "cluster_label",
                                                                              "rule_interval"}
    assert set(PARAMETERS) == used


def test_a_bad_parameter_override_names_the_key() -> None:
    with pytest.raises(CatalogueError, match="data_wait_ratio: expected a number"):
        cat.resolve({"data_wait_ratio": "half"})
    with pytest.raises(CatalogueError, match="unknown parameter 'data_wait'"):
        cat.resolve({"data_wait": 0.5})
    with pytest.raises(CatalogueError, match="rate_window: expected a duration"):
        cat.resolve({"rate_window": "5 minutes"})
    assert generate.main(["--check", "--set", "nonsense"]) == 2


def test_overrides_reach_the_rules_and_the_record_names() -> None:
    custom = cat.resolve({"rate_window": "2m", "data_wait_ratio": 0.3}, for_override="30s")
    rule = custom.alert("InputBound")
    assert rule.expr.splitlines()[1].strip() == "job_rank:bottleneck_train_data_wait:ratio_rate2m > 0.3"
    assert rule.for_ == "30s"
    assert "[2m]" in rule.inline_expr and "[5m]" not in rule.inline_expr
    assert "threshold 30%" in rule.description


def test_every_metric_the_rules_read_is_exposed_by_the_exporter(tmp_path: Path) -> None:
    """Regression guard for a renamed metric: the rules would silently never fire."""
    text = "".join(Path(p).read_text() for p in glob.glob(str(ROOT / "tests" / "golden" / "*.prom")))
    receiver = PushReceiver(JobStore(max_jobs=4, max_ranks=4, expiry=600))
    datagram = {
        "v": 1, "job": "resnet50", "rank": 0, "local_rank": 0, "world_size": 1, "device": "cuda:0", "pid": 4242,
        "seq": 1, "time": 1718000000.25, "dropped": 0, "steps": 120, "samples": 3840,
        "kubernetes": {"namespace": "ml", "pod": "resnet50-worker-0", "container": "trainer"},
        "phase_seconds": {"data_wait": 10.2, "forward": 0.9, "backward": 1.7, "optimizer": 0.3, "step": 13.4,
                          "collective": 1.2},
        "step_buckets": [0, 0, 0, 0, 0, 0, 3, 100, 17, 0, 0, 0, 0, 0, 0, 0], "collective_exposed_seconds": 0.4,
        "loader": {"num_workers": 0, "pin_memory": False, "batch_size": 32, "prefetch_factor": None,
                   "persistent_workers": False, "worker_pids": []},
        "gpu": {"phase_seconds": {"forward": 0.8, "backward": 1.6, "optimizer": 0.3}, "busy_seconds": 2.7,
                "idle_seconds": 10.1, "memory_allocated_bytes": 1.2e9, "memory_reserved_bytes": 2.0e9,
                "memory_peak_bytes": 1.5e9, "memory_total_bytes": 80e9, "allocator_retries": 3, "allocator_ooms": 0},
        "host_batches": {"pinned": 0, "pageable": 2},
        "startup_seconds": 84.2, "long_steps": {"count": 4, "excess_seconds": 2.1, "median_seconds": 0.1},
        "checkpoint": {"seconds": 1.9, "saves": 4}, "gc": {"seconds": [0.01, 0.02, 0.3], "collections": [90, 8, 2]},
        "compile": {"compiles": 3, "recompiles": 2, "seconds": 4.5},
        "setup": {"data_parallel_devices": 0, "sampled_forwards": 40, "autocast_forwards": 0, "loader_iterators": 3,
                  "loader_worker_starts": 3, "process_group_backend": "nccl", "parameters_dtype": "float32",
                  "compute_capability": 8.0, "float32_matmul_precision": "high"},
    }
    assert receiver.handle(json.dumps(datagram).encode())
    exposed = set(re.findall(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]", text, re.M))
    exposed |= {s.name for family in receiver.collect() for s in family.samples}
    exposed.add("up")  # Prometheus' own
    # The kubernetes collector, against a real gRPC kubelet (it has no golden scrape).
    kubelet = Kubelet(tmp_path / "kubelet.sock", lambda: response(pod("nb-0", "research", container(
        "lab", devices("nvidia.com/gpu", "GPU-00000003-0000-0000-0000-000000000003")))))
    try:
        ctx = Context(options={"pod-resources-socket": str(tmp_path / "kubelet.sock")})
        exposed |= {s.name for family in REGISTRY["kubernetes"].factory(ctx).collect() for s in family.samples}
    finally:
        kubelet.stop()
    read = set().union(*(cat.selector_names(parse(rule.inline_expr)) for rule in CATALOGUE.alerts))
    assert read - exposed == set()
    # The sawtooth rule reads two histogram buckets by their bound: they must be the collector's bounds.
    for name in ("sawtooth_idle_le", "sawtooth_busy_le"):
        bound = CATALOGUE.parameters[name]
        assert re.search(rf'^bottleneck_gpu_utilization_samples_bucket{{[^}}]*le="{re.escape(str(bound))}"', text,
                         re.M), name
