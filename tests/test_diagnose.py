"""``bottleneck-exporter diagnose``: the Python evaluator against the scenario table, against a real Prometheus,
and standalone on this machine (alone, and watching a real PyTorch run instrumented with the hook).
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from bottleneck_exporter import diagnose
from bottleneck_exporter.heuristics import promql
from bottleneck_exporter.heuristics.catalogue import resolve
from bottleneck_exporter.heuristics.scenarios import SCENARIOS
from bottleneck_exporter.heuristics.scenarios.builders import gpu, node, process, rank
from bottleneck_exporter.heuristics.scenarios.replay import replay
from bottleneck_exporter.heuristics.scenarios.series import Series, Timeline, store_of
from bottleneck_exporter.heuristics.scenarios.table import FIRES, NEAR_MISS, NOT_YET, Scenario
from bottleneck_exporter.verdicts import evaluation, prometheus
from tests.conftest import ROOT, free_port, require_tool, wait_until
from tests.promstack import Prometheus

CATALOGUE = resolve()


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.title for s in SCENARIOS])
def test_python_evaluator_agrees_with_the_scenario_table(scenario: Scenario) -> None:
    """The same table promtool runs (tests/rules/); replay raises when the evaluator disagrees with it."""
    outcome = replay(scenario, CATALOGUE)
    # diagnose's own entry point, over the same series, finds the same instances of the alert.
    findings, errors = evaluation.findings_at(CATALOGUE, store_of(outcome.series), outcome.eval_at * 60.0)
    assert not errors
    found = {(f.rule.severity, tuple(sorted(f.labels.items()))) for f in findings
             if f.rule.heuristic.name == scenario.alert}
    active = {(severity, inst.labels) for severity, insts in outcome.active[outcome.eval_at].items()
              for inst in insts}
    # diagnose leaves out a warning whose critical twin holds, as Alertmanager's inhibition does.
    inhibited = {("warning", labels) for severity, labels in active if severity == "critical"}
    assert found == active - inhibited
    if scenario.kind == NEAR_MISS:
        assert scenario.severity not in {severity for severity, _ in found}
    elif scenario.kind == FIRES:
        assert {(scenario.severity, tuple(sorted(e.labels.items()))) for e in scenario.expect} <= found | inhibited


@pytest.mark.parametrize("scenario", [s for s in SCENARIOS if s.kind in (FIRES, NOT_YET)],
                         ids=[s.title for s in SCENARIOS if s.kind in (FIRES, NOT_YET)])
def test_standalone_respects_for_firing_only_after_it_and_says_how_long_a_pending_verdict_needs(
        scenario: Scenario) -> None:
    """Regression: standalone diagnose reported a verdict the moment its condition held, ignoring for:."""
    outcome = replay(scenario, CATALOGUE)
    times = [m * 60.0 for m in range(outcome.eval_at + 1)]
    findings, _ = evaluation.findings_at(CATALOGUE, store_of(outcome.series), times[-1])
    evaluation.hold_states(CATALOGUE, store_of(outcome.series), times, findings)
    mine = [f for f in findings if f.rule.heuristic.name == scenario.alert and f.rule.severity == scenario.severity]
    expected = {tuple(sorted(e.labels.items())) for e in scenario.expect}
    for finding in mine:
        if tuple(sorted(finding.labels.items())) not in expected:
            continue
        if scenario.kind == FIRES:
            assert (finding.state, finding.needs_seconds) == ("firing", None)
        else:  # replay evaluates a not-yet scenario one minute before its for: has elapsed
            assert (finding.state, finding.needs_seconds) == ("pending", 60.0)
    assert expected <= {tuple(sorted(f.labels.items())) for f in mine}


# ---------------------------------------------------------------------------------------------- real Prometheus

MINUTES = 12


def fleet(tl: Timeline) -> list[Series]:
    """node-a: a num_workers=0 job and memory almost gone; node-b: a GPU at its slowdown temperature; node-c: a GPU
    that reached it two minutes ago, less than the alert's for:."""
    lately = dataclasses.replace(tl, start=tl.length - 2)
    return (rank(tl, instance="node-a", data_wait=0.4, forward=0.04, optimizer=0.01)
            + node(tl, instance="node-a", mem_available=0.03) + process(tl, instance="node-a", main=1.0, workers=0)
            + node(tl, instance="node-b") + gpu(tl, instance="node-b", temp=88)
            + node(tl, instance="node-c") + gpu(lately, instance="node-c", temp=88, before={"temp": 65}))


Points = list[tuple[dict[str, str], list[tuple[float, float]]]]


def wall_clock(series: list[Series], end: float) -> Points:
    """The series' samples at wall-clock times, the last minute at ``end``. Values that are times (the last
    step's timestamp) move with them: left at the table's minute 0, the job would read as stalled since 1970."""
    start = end - MINUTES * 60
    points = []
    for s in series:
        labels = dict(s.labels)
        shift = start if labels["__name__"] == "bottleneck_train_last_step_timestamp_seconds" else 0.0
        points.append((labels, [(start + m * 60, v + shift) for m, v in enumerate(s.track) if v is not None]))
    return points


def backfill(points: Points, tsdb: Path) -> None:
    """Write the samples into a TSDB block with promtool."""
    lines = []
    # OpenMetrics: a family's samples together, each series in time order, no blanks after commas.
    for labels, samples in sorted(points, key=lambda p: sorted(p[0].items())):
        labels = dict(labels)
        name = labels.pop("__name__")
        selector = name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"
        lines += [f"{selector} {value!r} {at:.3f}" for at, value in samples]
    source = tsdb.parent / "fleet.om"
    source.write_text("\n".join(lines) + "\n# EOF\n")
    result = subprocess.run([require_tool("promtool"), "tsdb", "create-blocks-from", "openmetrics", str(source),
                             str(tsdb)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def _keys(verdicts: list[dict[str, Any]]) -> set[tuple[str, str, tuple[tuple[str, str], ...]]]:
    return {(str(v["alert"]), str(v["severity"]), tuple(sorted(v["labels"].items()))) for v in verdicts}


@pytest.mark.tools
def test_diagnose_against_a_real_prometheus_matches_the_python_evaluator(tmp_path: Path) -> None:
    points = wall_clock(fleet(Timeline(MINUTES)), time.time())
    backfill(points, tmp_path / "tsdb")
    # No rule files loaded: diagnose spells the recording rules out itself.
    prometheus = Prometheus(tmp_path, targets=[], rule_files=[]).start()
    try:
        out = io.StringIO()
        code = diagnose.main(["--prometheus.url", prometheus.url, "--json"], stdout=out)
        asked_at = time.time()
        # The same fleet with the critical memory line moved below 3%: warnings only, so exit status 0.
        lenient = io.StringIO()
        lenient_code = diagnose.main(["--prometheus.url", prometheus.url, "--json",
                                      "--set", "memory_available_ratio_critical=0.01"], stdout=lenient)
    finally:
        prometheus.stop()
    report = json.loads(out.getvalue())
    assert report["errors"] == []
    # No rules are installed, so ALERTS knows nothing: each state is what Prometheus says of how long the
    # condition held. node-c's GPU has been hot for two minutes of its five, and stays out of the exit status.
    states = {(v["alert"], v["labels"]["instance"]): (v["state"], v["needs_seconds"]) for v in report["verdicts"]}
    # Held at two or three of the rule intervals, as they fall against the samples' minutes.
    assert states.pop(("BottleneckGpuTooHot", "node-c")) in (("pending", 180.0), ("pending", 120.0))
    assert set(states.values()) == {("firing", None)}
    got = _keys(report["verdicts"])
    node_a = {"instance": "node-a", "job": "bottleneck-exporter"}
    rank_0 = {**node_a, "training_job": "resnet50", "rank": "0"}
    assert ("BottleneckInputBound", "warning", tuple(sorted(rank_0.items()))) in got
    assert {v["subject"] for v in report["verdicts"] if v["alert"] == "BottleneckInputBound"} == {"job resnet50"}
    assert ("BottleneckMemoryPressure", "critical", tuple(sorted(node_a.items()))) in got
    assert ("BottleneckMemoryPressure", "warning", tuple(sorted(node_a.items()))) not in got, "inhibited by its twin"
    hot = {"instance": "node-b", "job": "bottleneck-exporter", "gpu": "0", "uuid": "GPU-5e1f7c3a-0000"}
    assert ("BottleneckGpuTooHot", "warning", tuple(sorted(hot.items()))) in got
    assert not [v for v in report["verdicts"] if v["alert"] == "BottleneckTrainingStalled"], "the job steps"
    assert code == diagnose.EXIT_CRITICAL and report["critical"] is True
    warnings_only = json.loads(lenient.getvalue())
    assert lenient_code == diagnose.EXIT_OK and warnings_only["critical"] is False
    assert ("BottleneckMemoryPressure", "warning", tuple(sorted(node_a.items()))) in _keys(warnings_only["verdicts"])
    # The Python evaluator over the same samples, at the time of the query, finds exactly the same verdicts.
    store = promql.SeriesStore()
    for labels, samples in points:
        store.add(labels, samples)
    findings, errors = evaluation.findings_at(CATALOGUE, store, asked_at)
    assert not errors
    assert _keys([f.as_dict() for f in findings]) == got
    evidence = next(v for v in report["verdicts"] if v["alert"] == "BottleneckInputBound")
    assert evidence["evidence"].startswith("Rank 0 of job resnet50 on node-a waits for the next batch 80% of")
    assert evidence["advice"].startswith("Raise DataLoader num_workers")


@pytest.mark.parametrize(("alert", "labels", "subject"), [
    ("InputBound", {"instance": "node-a", "job": "bottleneck-exporter", "training_job": "resnet50", "rank": "0"},
     "job resnet50"),
    ("GpuImbalance", {"training_job": "resnet50"}, "job resnet50"),
    ("MemoryPressure", {"instance": "node-a", "job": "bottleneck-exporter"}, "node node-a"),
    ("ExporterDown", {"instance": "node-a", "job": "bottleneck-exporter"}, "node node-a"),
    ("ExporterAbsent", {"job": "bottleneck-exporter"}, "scrape job bottleneck-exporter"),
])
def test_a_verdict_belongs_to_its_training_job_never_to_the_scrape_job(
        alert: str, labels: dict[str, str], subject: str) -> None:
    """Every scraped series carries the scrape job in ``job``; a training verdict is filed under the training
    job's name (``training_job``), a node's under the node."""
    finding = evaluation.Finding(resolve().alert(alert), labels, 1.0)
    assert finding.subject == subject


def test_diagnose_says_when_prometheus_cannot_be_reached() -> None:
    err = io.StringIO()
    code = diagnose.main(["--prometheus.url", f"http://127.0.0.1:{free_port()}"], stdout=io.StringIO(), stderr=err)
    assert code == diagnose.EXIT_UNREACHABLE
    assert "cannot reach" in err.getvalue()


def test_a_crash_exits_4_not_1_which_would_read_as_a_critical_verdict(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: prometheus.PrometheusClient, expr: str) -> list[dict[str, Any]]:
        raise KeyError("a bug")

    monkeypatch.setattr(prometheus.PrometheusClient, "query", broken)
    err = io.StringIO()
    code = diagnose.main(["--prometheus.url", "http://127.0.0.1:1"], stdout=io.StringIO(), stderr=err)
    assert code == diagnose.EXIT_INTERNAL
    assert "KeyError: 'a bug'" in err.getvalue() and "internal error" in err.getvalue()


def test_diagnose_refuses_a_bad_parameter_with_a_usage_error() -> None:
    err = io.StringIO()
    assert diagnose.main(["--set", "data_wait_ratio=lots"], stderr=err) == diagnose.EXIT_USAGE
    assert "data_wait_ratio" in err.getvalue()
    assert diagnose.main(["--window", "0"], stderr=io.StringIO()) == diagnose.EXIT_USAGE
    assert diagnose.main(["--severity", "loud"], stderr=io.StringIO()) == diagnose.EXIT_USAGE


# ---------------------------------------------------------------------------------------------- standalone

def run_diagnose(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bottleneck_exporter", "diagnose", *args], capture_output=True,
                          text=True, timeout=120, cwd=ROOT, env={**os.environ, **(env or {})})


@pytest.mark.live
def test_standalone_on_this_machine_prints_verdicts_and_exits_by_severity(tmp_path: Path) -> None:
    result = run_diagnose(["--window", "3", "--interval", "1", "--json", f"--push.socket={tmp_path}/push.sock"])
    assert result.returncode in (diagnose.EXIT_OK, diagnose.EXIT_CRITICAL), result.stderr
    report = json.loads(result.stdout)
    assert report["source"] == "in-process"
    # Every rule but the trends, which 3 s of samples cannot tell from a warm-up (their series absent here).
    assert report["rules_evaluated"] == len([r for r in CATALOGUE.alerts if not r.heuristic.sampled_over])
    assert report["errors"] == [] and report["too_short"] == []
    # Each verdict says how long its condition held within the window; only one that held throughout or for at
    # least half the window is critical enough to set the exit status.
    window = report["window_seconds"]
    for verdict in report["verdicts"]:
        held = verdict["sampled"]
        assert held["state"] in evaluation.HELD_STATES and held["window_seconds"] == window, verdict
        assert 0 <= held["held_seconds"] <= held["seen_seconds"] <= window, verdict
    assert report["critical"] == any(v["severity"] == "critical" and v["sampled"]["state"] != evaluation.BRIEFLY
                                     for v in report["verdicts"])
    # A 3 s window cannot hold a for: of minutes: on a Prometheus, each alert would still be pending.
    assert all(v["state"] == "pending" and v["needs_seconds"] > 0 and v["for_seconds"] >= 60
               for v in report["verdicts"])
    assert result.returncode == (diagnose.EXIT_CRITICAL if report["critical"] else diagnose.EXIT_OK)
    assert report["jobs"] == [], "no training run pushes to this diagnose's own socket"
    # The node was sampled: the verdicts about the monitoring itself (they read Prometheus' `up`) stay quiet.
    assert not [v for v in report["verdicts"] if v["alert"] in ("BottleneckExporterDown", "BottleneckExporterAbsent")]
    assert "sampling" in result.stderr and "3/3s" in result.stderr
    text = run_diagnose(["--window", "2", "--interval", "1", f"--push.socket={tmp_path}/push2.sock"])
    assert text.stdout.startswith("bottleneck-exporter diagnose: ")
    assert "rules evaluated" in text.stdout
    assert "needs" not in text.stdout and "[pending" not in text.stdout, "for: is the alerts', not the report's"


@pytest.mark.live
@pytest.mark.torch
def test_standalone_names_an_input_bound_training_run_as_held_after_a_short_window(tmp_path: Path) -> None:
    """A real CPU run with num_workers=0 and a slow dataset, pushing to diagnose's in-process receiver.

    Regression: after a window shorter than the rule's for: (5m), the report said "[pending: holds 5m before it
    fires, needs 4m 36s more]", nothing a person can act on; the verdict held at every sample and says so."""
    socket_path = tmp_path / "push.sock"
    diag = subprocess.Popen([sys.executable, "-m", "bottleneck_exporter", "diagnose", "--window", "15", "--interval",
                             "1", "--json", f"--push.socket={socket_path}"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    stop = tmp_path / "stop"
    trainer = None
    try:
        wait_until(socket_path.exists, 20, "diagnose to bind its push socket")
        # A datagram every 0.25 s: each 1 s sample sees steps the one before did not.
        trainer = subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "hook_trainer.py"), "--dataset", "slow", "--workers", "0",
             "--stop-file", str(stop)],
            env={**os.environ, "BOTTLENECK_PUSH_ADDRESS": f"unix://{socket_path}", "BOTTLENECK_JOB": "diag-slow",
                 "BOTTLENECK_PUSH_INTERVAL": "0.25"},
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        out, err = diag.communicate(timeout=90)
    finally:
        stop.touch()
        if trainer is not None:
            trainer.wait(timeout=60)
        if diag.poll() is None:
            diag.kill()
    assert diag.returncode in (diagnose.EXIT_OK, diagnose.EXIT_CRITICAL), err
    report = json.loads(out)
    verdicts = [v for v in report["verdicts"] if v["labels"].get("training_job") == "diag-slow"]
    assert [v["alert"] for v in verdicts if v["alert"] in ("BottleneckInputBound", "BottleneckIoBound")] == [
        "BottleneckInputBound"], report
    (bound,) = [v for v in verdicts if v["alert"] == "BottleneckInputBound"]
    assert bound["value"] > 0.5
    held = bound["sampled"]
    # Held at every sample since the job's series appeared, but the first (a rate needs two samples).
    assert held["state"] == evaluation.THROUGHOUT, held
    assert 0 < held["held_seconds"] < held["seen_seconds"] <= held["window_seconds"] == report["window_seconds"]
    # for: stays the alert's: on a Prometheus it would still be pending.
    assert (bound["for_seconds"], bound["state"]) == (300.0, "pending")
    assert bound["needs_seconds"] == pytest.approx(300.0 - held["held_seconds"])
    assert "training telemetry" not in " ".join(report["missing"])
    # The job's steps, measured over the window: most of each step waits for data.
    (job,) = [job for job in report["jobs"] if job["job"] == "diag-slow"]
    (rank,) = job["ranks"]
    assert (rank["rank"], rank["over"]) == ("0", "window")
    assert rank["phases"]["data_wait"]["share"] > 0.5 and rank["steps"] > 0 and rank["steps_per_second"] > 0
    assert sum(phase["share"] for phase in rank["phases"].values()) == pytest.approx(1.0)
    assert rank["step_seconds"] == pytest.approx(sum(p["seconds_per_step"] for p in rank["phases"].values()))
