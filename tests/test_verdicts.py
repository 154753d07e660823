"""The verdict engine (``bottleneck_exporter.verdicts``) through its API, as ``run`` will call it: a sampler over a
source and a peer, the evaluation with how long each condition held judged over the sample times (and ``for:``
kept for the alerts), each rank's step breakdown and each GPU's utilization, the report of all.

A recorded source stands in for the collectors (its samples change scrape by scrape), or plain series written
sample by sample, and a fake clock for time, so every time, share and ``for:`` figure below is worked out by hand.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence

import pytest

from bottleneck_exporter.heuristics import NODE_EXPORTER, resolve
from bottleneck_exporter.heuristics.promql import SeriesStore, parse
from bottleneck_exporter.heuristics.promql import evaluate as evaluate_expression
from bottleneck_exporter.verdicts import bars, breakdown
from bottleneck_exporter.verdicts.breakdown import RUN, WINDOW
from bottleneck_exporter.verdicts.evaluation import (
    BRIEFLY,
    PARTLY,
    THROUGHOUT,
    Evaluation,
    Finding,
    Held,
    Samples,
    evaluate,
)
from bottleneck_exporter.verdicts.peers import peer
from bottleneck_exporter.verdicts.report import Report, render_json, render_text, sampled
from bottleneck_exporter.verdicts.sampling import HttpSource, Sampler
from bottleneck_exporter.verdicts.scrape import Sample
from tests.conftest import free_port

JOB = "bottleneck-exporter"


class Recorded:
    """A source whose n-th scrape answers the n-th list of samples (the last one again after the end)."""

    kind = "in-process"
    url = "in-process"
    target = "node-1"

    def __init__(self, scrapes: Sequence[list[Sample]]) -> None:
        self.scrapes = list(scrapes)
        self.taken = 0

    def describe(self) -> str:
        return "a recording"

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def samples(self) -> list[Sample]:
        self.taken += 1
        return self.scrapes[min(self.taken, len(self.scrapes)) - 1]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def gpus_up(*values: tuple[float, ...]) -> list[list[Sample]]:
    """One scrape per tuple: ``bottleneck_gpu_up`` of GPU 0, 1, 2."""
    return [[("bottleneck_gpu_up", {"gpu": str(gpu), "uuid": f"GPU-{gpu}"}, up) for gpu, up in enumerate(scrape)]
            for scrape in values]


def series(samples: Samples) -> Iterator[tuple[dict[str, str], list[float], list[float]]]:
    return iter(samples.store.series())


def test_the_sampler_takes_the_first_sample_at_once_the_last_at_the_end_and_labels_them_as_prometheus() -> None:
    clock = Clock()
    source = Recorded([[("bottleneck_info", {"job": "theirs", "instance": "x"}, 1.0)]])
    sampler = Sampler(source, "node-1", JOB, clock=clock)
    progress: list[tuple[float, float]] = []
    # Every 4 s for 10 s: 0, 4, 8, and the end, 10.
    sampler.run(10.0, 4.0, lambda elapsed, window: progress.append((elapsed, window)), sleep=clock.sleep)
    assert sampler.times == [0.0, 4.0, 8.0, 10.0] and source.taken == 4
    assert progress == [(0.0, 10.0), (4.0, 10.0), (8.0, 10.0), (10.0, 10.0)]
    got = {tuple(sorted(labels.items())): (times, values) for labels, times, values in series(sampler.samples())}
    assert got == {
        (("__name__", "bottleneck_info"), ("exported_instance", "x"), ("exported_job", "theirs"),
         ("instance", "node-1"), ("job", JOB)): ([0.0, 4.0, 8.0, 10.0], [1.0] * 4),
        (("__name__", "up"), ("instance", "node-1"), ("job", JOB)): ([0.0, 4.0, 8.0, 10.0], [1.0] * 4),
    }
    assert sampler.samples().span == 10.0


def test_the_sampler_stops_when_done_says_so() -> None:
    """``run`` samples while its child trains: it stops after the sample that finds the child gone."""
    clock = Clock()
    sampler = Sampler(Recorded(gpus_up((1.0,))), "node-1", JOB, clock=clock)
    sampler.run(float("inf"), 5.0, done=lambda: len(sampler.times) == 3, sleep=clock.sleep)
    assert sampler.times == [0.0, 5.0, 10.0]


def test_a_sampler_that_keeps_a_window_forgets_older_samples_and_series_gone_since() -> None:
    """``run`` samples for as long as its command trains: what it keeps stays bounded."""
    clock = Clock()
    sampler = Sampler(Recorded(gpus_up((1, 1), (1, 1), (1,), (1,), (1,), (1,))), "node-1", JOB, clock=clock, keep=10)
    sampler.run(25.0, 5.0, sleep=clock.sleep)
    assert sampler.times == [15.0, 20.0, 25.0]
    got = {labels.get("gpu", labels["__name__"]): times for labels, times, _ in series(sampler.samples())}
    assert got == {"0": [15.0, 20.0, 25.0], "up": [15.0, 20.0, 25.0]}  # GPU 1 vanished at 10 s: its series too
    assert sampler.samples().span == 10.0
    assert sampler.record[0].scrapes == 6  # every scrape still counted


def trainer_process(rank: str, job: str, rss_mib: float, found_by: str) -> list[Sample]:
    """The training collector's series of one trainer process, as it names it before and after its first push."""
    process = {"process": "train.py", "local_rank": rank}
    return [("bottleneck_training_resident_memory_bytes", process, rss_mib * 2**20),
            ("bottleneck_training_process_info", {**process, "training_job": job, "discovered_by": found_by}, 1.0),
            ("bottleneck_memory_total_bytes", {}, 24 * 2**30)]


def test_a_series_gone_from_its_job_s_next_scrape_is_stale_there_as_in_prometheus() -> None:
    """Regression: under ``run`` the training collector names the trainer's process without a rank or job until its
    first push, and with them after. The first series' last sample stayed within the lookback, and its start-up
    growth (torch's import, 8 to 325 MiB in 4 s) made "train.py (local rank , job )" leak in every report."""
    starting = [trainer_process("", "", mib, "cmdline") for mib in (8, 247, 325)]
    pushed = [trainer_process("0", "train", 325, "push")] * 10
    assert growing([*starting, *pushed], 20.0) == []
    # The same start-up, had the process kept its first name and grown on: the verdict it would get.
    still_growing = [trainer_process("", "", 325 + 80 * i, "cmdline") for i in range(1, 11)]
    assert [labels["local_rank"] for labels in growing([*starting, *still_growing], 20.0)] == [""]


def growing(scrapes: list[list[Sample]], interval: float) -> list[dict[str, str]]:
    """The processes BottleneckMemoryGrowing names over ``scrapes`` taken every ``interval`` seconds."""
    return [f.labels for f in sampled_every(scrapes, interval).findings if f.rule.heuristic.name == "MemoryGrowing"]


def sampled_every(scrapes: list[list[Sample]], interval: float) -> Evaluation:
    clock = Clock()
    sampler = Sampler(Recorded(scrapes), "node-1", JOB, clock=clock)
    sampler.run(interval * (len(scrapes) - 1), interval, sleep=clock.sleep)
    return evaluate(sampler.samples())


def test_a_leak_is_judged_over_4_minutes_of_samples_not_over_a_short_run_s_warm_up() -> None:
    """Regression: a 26 s run grew 9 MiB in its first epochs (448 KiB/s, over the limit of 5 % of 24 GiB an
    hour) and was told it leaked; Prometheus would wait 15 minutes for the growth to hold."""
    leaking = [trainer_process("0", "train", 325 + 10 * i, "push") for i in range(27)]  # 1 MiB/s
    assert growing(leaking[:4], 10.0) == []
    short = sampled_every(leaking[:4], 10.0)
    assert short.too_short == [("BottleneckMemoryGrowing", 240.0)] and "BottleneckMemoryGrowing" not in {
        r.alert for r in short.catalogue.alerts}
    text = render_text(Report("in-process", "node-1", 30.0, len(short.catalogue.alerts), short.findings,
                              short.errors, short.missing, short.window_seconds, too_short=short.too_short),
                       longer="sample longer with --window")
    assert "Not judged over 30 s of samples" in text
    assert "BottleneckMemoryGrowing: needs 4 min; sample longer with --window" in text
    assert [labels["local_rank"] for labels in growing(leaking, 10.0)] == ["0"]  # 260 s: judged, and a leak


def test_a_series_missing_from_one_scrape_is_absent_at_it_and_back_at_the_next_that_has_it() -> None:
    clock = Clock()
    sampler = Sampler(Recorded(gpus_up((1, 1), (1,), (1, 1))), "node-1", JOB, clock=clock)
    sampler.run(10.0, 5.0, sleep=clock.sleep)
    store = sampler.samples().store

    def gpus_at(at: float) -> list[str]:
        result = evaluate_expression(parse("bottleneck_gpu_up"), store, at)
        assert isinstance(result, list)
        return sorted(s.labels["gpu"] for s in result)

    assert [gpus_at(at) for at in (0.0, 5.0, 9.0, 10.0)] == [["0", "1"], ["0"], ["0"], ["0", "1"]]
    # A range still reads the points before the scrape that lacked it, as Prometheus' does.
    assert len(evaluate_expression(parse("max_over_time(bottleneck_gpu_up[30s])"), store, 9.0)) == 2


def test_a_peer_that_does_not_answer_costs_its_own_series_only_and_is_named_with_what_it_leaves_unjudged() -> None:
    clock = Clock()
    down = peer(NODE_EXPORTER, f"http://127.0.0.1:{free_port()}")
    sampler = Sampler(Recorded(gpus_up((1.0,))), "node-1", JOB, [down], clock=clock)
    sampler.run(10.0, 5.0, sleep=clock.sleep)
    ups = {labels["job"]: values for labels, _, values in series(sampler.samples()) if labels["__name__"] == "up"}
    assert ups == {JOB: [1.0, 1.0, 1.0], "node-exporter": [0.0, 0.0, 0.0]}
    assert [(r.name, r.scrapes, r.failed) for r in sampler.record] == [("bottleneck-exporter", 3, 0),
                                                                        ("node_exporter", 3, 3)]
    assert sampler.record[1].error is not None and sampler.record[1].error.startswith(f"node_exporter at {down.url}")

    report = sampled(evaluate(sampler.samples(), "node-exporter"), sampler)
    assert (report.source, report.target, report.bundle, report.window_seconds) == ("in-process", "node-1",
                                                                                   "node-exporter", 10.0)
    ours, theirs = report.sources
    assert ours["unjudged"] == [] and "BottleneckCpuSaturated" in theirs["unjudged"]
    assert "node_exporter did not answer 3 of 3 scrapes" in render_text(report)
    assert json.loads(render_json(report))["sources"][1]["failed"] == 3


def test_how_long_a_condition_held_is_judged_over_the_sample_times_and_for_is_kept_for_the_alert() -> None:
    """BottleneckGpuLost (critical, for: 1m), sampled every 20 s for 80 s. GPU 1 is lost all along: held at every
    sample, 80 s, throughout; its alert would fire. GPU 0 is lost from 40 s on: held 40 s, half of the 80 s,
    partly; 20 s short of its for:. GPU 2 came back at 40 s and is lost again from 60 s: held 20 s, under half,
    briefly; 40 s short of its for:."""
    clock = Clock()
    sampler = Sampler(Recorded(gpus_up((1, 0, 0), (1, 0, 0), (0, 0, 1), (0, 0, 0), (0, 0, 0))), "node-1", JOB,
                      clock=clock)
    sampler.run(80.0, 20.0, sleep=clock.sleep)
    judged = evaluate(sampler.samples())
    assert (judged.at, judged.window_seconds, judged.catalogue.parameters["rate_window"]) == (80.0, 80.0, "81s")
    lost = {f.labels["gpu"]: f for f in judged.findings if f.rule.alert == "BottleneckGpuLost"}
    assert {gpu: f.held for gpu, f in lost.items()} == {
        "1": Held(THROUGHOUT, 80.0, 80.0, 80.0), "0": Held(PARTLY, 40.0, 80.0, 80.0),
        "2": Held(BRIEFLY, 20.0, 80.0, 80.0)}
    assert {gpu: (f.state, f.needs_seconds) for gpu, f in lost.items()} == {
        "1": ("firing", None), "0": ("pending", 20.0), "2": ("pending", 40.0)}
    assert {f.rule.alert for f in judged.findings if f.rule.severity == "critical"} == {"BottleneckGpuLost"}
    report = sampled(judged, sampler)
    assert report.critical
    verdicts = {v["labels"]["gpu"]: v for v in json.loads(render_json(report))["verdicts"]}
    assert verdicts["0"]["sampled"] == {"state": "partly", "held_seconds": 40.0, "seen_seconds": 80.0,
                                        "window_seconds": 80.0}
    assert (verdicts["0"]["for"], verdicts["0"]["for_seconds"], verdicts["0"]["state"],
            verdicts["0"]["needs_seconds"]) == ("1m", 60.0, "pending", 20.0)
    text = render_text(report, longer="sample longer with --window")
    assert "held:     throughout, 80 s of 80 s sampled" in text
    assert "held:     the last 40 s of 80 s sampled" in text
    assert "held briefly (may be noise; sample longer with --window to confirm):" in text
    assert "held only the last 20 s of 80 s sampled: GPU 2 (GPU-2) on node-1" in text
    assert text.startswith("bottleneck-exporter diagnose: 2 verdict(s) (1 more held briefly) from in-process node-1")


def test_a_critical_condition_that_held_briefly_does_not_weigh_as_a_verdict() -> None:
    """Regression: a condition that held for a moment would weigh as much as one that held the whole window, a
    false alarm that costs the report its trust. GPU 0 is lost from 60 s of 80 s (20 s, under half), GPU 1 at the
    last sample only (0 s): neither is a verdict, neither sets the critical exit status."""
    clock = Clock()
    sampler = Sampler(Recorded(gpus_up((1, 1), (1, 1), (1, 1), (0, 1), (0, 0))), "node-1", JOB, clock=clock)
    sampler.run(80.0, 20.0, sleep=clock.sleep)
    report = sampled(evaluate(sampler.samples()), sampler)
    lost = {f.labels["gpu"]: f.held for f in report.findings if f.rule.alert == "BottleneckGpuLost"}
    assert lost == {"0": Held(BRIEFLY, 20.0, 80.0, 80.0), "1": Held(BRIEFLY, 0.0, 80.0, 80.0)}
    assert not report.critical
    text = render_text(report, heading="bottleneck-exporter run")
    assert text.startswith("bottleneck-exporter run: 0 verdict(s) (2 more held briefly) from in-process node-1")
    assert "  no bottleneck found\n  held briefly (may be noise):\n" in text
    assert "held at the last sample only, of 80 s sampled: GPU 1 (GPU-1) on node-1" in text
    assert "--window" not in text, "run's user has no --window to use"
    assert "CRITICAL" not in text and "advice:" not in text

    unjudged = evaluate(sampler.samples(), hold_for=False)
    assert {(f.state, f.needs_seconds, f.held) for f in unjudged.findings} == {(None, None, None)}


def trainer(store: SeriesStore, job: str, times: Sequence[float], per_step: dict[str, float], start: float = 0.0,
            steps_per_second: float = 1.0, rank: str = "0") -> None:
    """A rank's counters as the push receiver exposes them from ``start`` on: ``per_step`` seconds in each phase
    (``step`` the whole step), ``steps_per_second`` steps."""
    labels = {"instance": "node-1", "job": JOB, "training_job": job, "rank": rank}
    seen = [at for at in times if at >= start]
    store.add({**labels, "__name__": "bottleneck_train_steps_total"},
              [(at, (at - start) * steps_per_second) for at in seen])
    for phase, seconds in per_step.items():
        store.add({**labels, "__name__": "bottleneck_train_phase_seconds_total", "phase": phase},
                  [(at, (at - start) * steps_per_second * seconds) for at in seen])


INPUT_BOUND = {"data_wait": 0.8, "forward": 0.1, "backward": 0.05, "optimizer": 0.02, "step": 1.0}
HEALTHY = {"data_wait": 0.01, "forward": 0.1, "backward": 0.25, "optimizer": 0.04, "step": 0.5,
           "collective": 0.15}


def late_and_healthy() -> Samples:
    """Sampled every 10 s for 60 s: job "late" starts at 20 s, input-bound (1 step a second, 0.8 s of each in
    data wait); job "healthy" runs all along, 2 steps a second, its ranks in all-reduce 0.15 s a step."""
    times = [10.0 * i for i in range(7)]
    store = SeriesStore()
    trainer(store, "late", times, INPUT_BOUND, start=20.0)
    trainer(store, "healthy", times, HEALTHY, steps_per_second=2.0)
    for at in times:
        store.add({"__name__": "up", "instance": "node-1", "job": JOB}, [(at, 1.0)])
    return Samples(store, times)


def test_a_job_that_started_late_held_throughout_the_time_it_was_sampled() -> None:
    """Job "late" is sampled from 20 s: at 20 s one sample (no rate yet), from 30 s on its data wait is 80% of
    the step. It held 30 s (30 to 60 s) of the 40 s its series were sampled, at every sample but its first:
    throughout. Its alert (for: 5m) would still need 270 s on a Prometheus."""
    judged = evaluate(late_and_healthy())
    (bound,) = [f for f in judged.findings if f.rule.alert == "BottleneckInputBound"]
    assert bound.labels["training_job"] == "late" and bound.value == pytest.approx(0.8)
    assert bound.held == Held(THROUGHOUT, 30.0, 40.0, 60.0)
    assert (bound.state, bound.needs_seconds) == ("pending", 270.0)
    assert not [f for f in judged.findings if f.labels.get("training_job") == "healthy"]


def test_each_rank_s_step_breakdown_comes_from_the_counters_over_the_window() -> None:
    """Job "late": 40 steps in the 40 s it was sampled, 40 s of steps: 1 step a second, 1 s a step, of which
    data wait 0.8 s (80%), forward 0.1 s, backward 0.05 s, optimizer 0.02 s, other the 0.03 s left. Job
    "healthy": 120 steps in 60 s, 0.5 s each: data wait 2%, forward 20%, backward 50%, optimizer 8%, other
    20% (0.1 s); collectives 0.15 s a step, 30% of the step, outside the partition."""
    healthy, late = breakdown.ranks(late_and_healthy().store)  # by job name
    assert (late.training_job, late.rank, late.over, late.seconds, late.split.steps) == ("late", "0", WINDOW,
                                                                                       40.0, 40.0)
    assert late.steps_per_second == 1.0 and late.split.seconds_per_step == pytest.approx(1.0)
    assert late.split.per_step == pytest.approx({"data_wait": 0.8, "forward": 0.1, "backward": 0.05,
                                                 "optimizer": 0.02, "other": 0.03})
    assert late.split.collective_seconds is None
    assert (healthy.seconds, healthy.split.steps, healthy.steps_per_second) == (60.0, 120.0, 2.0)
    assert healthy.split.shares == pytest.approx({"data_wait": 0.02, "forward": 0.2, "backward": 0.5,
                                                  "optimizer": 0.08, "other": 0.2})
    assert healthy.split.collective_share == pytest.approx(0.3)
    assert healthy.as_dict()["collective"] == pytest.approx({"share": 0.3, "seconds_per_step": 0.15})
    assert healthy.as_dict()["phases"]["other"] == pytest.approx({"share": 0.2, "seconds_per_step": 0.1})


def test_a_healthy_job_gets_its_breakdown_and_no_bottleneck_found_before_the_verdicts() -> None:
    """Regression: a healthy job was reported as one line, "no bottleneck found", with nothing measured."""
    samples = late_and_healthy()
    judged = evaluate(samples)
    report = Report("in-process", "node-1", judged.at, len(judged.catalogue.alerts), judged.findings, judged.errors,
                    judged.missing, judged.window_seconds, ranks=breakdown.ranks(samples.store))
    lines = render_text(report, width=100).splitlines()
    healthy = lines.index("job healthy: 1 rank, step breakdown over 60 s")
    # 18 cells at 100 columns (the rest is the name and seven columns of numbers): data wait 0.36 cell, forward
    # 3.6, backward 9, optimizer 1.44, other 3.6; whole cells for 16 and the two left to the largest remainders,
    # forward's and other's .6.
    assert lines[healthy + 1:healthy + 7] == [
        "                               data wait   forward  backward optimizer     other      step   steps/s",
        "  rank 0  ▕▓▓▓▓▒▒▒▒▒▒▒▒▒░▁▁▁▁▏        2%       20%       50%        8%       20%",
        "                                   10 ms    100 ms    250 ms     40 ms    100 ms    500 ms         2",
        "          collectives in flight 30% of the step, 150 ms a step (they overlap forward and backward:",
        "          not in the bar)",
        "          █ data wait  ▓ forward  ▒ backward  ░ optimizer  ▁ other (the loop's own code)",
    ]
    assert lines[healthy + 7] == "  no bottleneck found"
    late = lines.index("job late: 1 rank, step breakdown over 40 s")
    assert lines[late + 2:late + 4] == [
        "  rank 0  ▕██████████████▓▓▒▁▏       80%       10%        5%        2%        3%",
        "                                  800 ms    100 ms     50 ms     20 ms     30 ms       1 s         1"]
    verdict = lines.index("  WARNING   input-bound (data loading)  (BottleneckInputBound)")
    assert late < verdict and lines[verdict + 1] == (
        "            held:     throughout, 30 s of the 40 s since its series appeared (60 s sampled)")
    assert all(len(line) <= 100 for line in lines if "runbook:" not in line)

    # Shown from critical up, the job keeps its breakdown and says what was left out.
    strict = render_text(report, "critical")
    assert "job late: 1 rank, step breakdown over 40 s\n" in strict
    assert "  no bottleneck found at critical or above (1 warning/info verdict(s) not shown)" in strict

    jobs = {job["job"]: job for job in json.loads(render_json(report))["jobs"]}
    (rank,) = jobs["late"]["ranks"]
    assert (rank["rank"], rank["over"], rank["steps"], rank["steps_per_second"]) == ("0", "window", 40.0, 1.0)
    assert rank["phases"]["data_wait"] == pytest.approx({"share": 0.8, "seconds_per_step": 0.8})


def test_a_narrow_terminal_gets_each_bar_on_a_line_of_its_own() -> None:
    """At 80 columns the seven columns of numbers leave the bar under 10 cells: it takes the width above them."""
    samples = late_and_healthy()
    report = Report("in-process", "node-1", 60.0, 0, [], [], [], 60.0, ranks=breakdown.ranks(samples.store))
    lines = render_text(report, width=80).splitlines()
    at = lines.index("job late: 1 rank, step breakdown over 40 s")
    # 68 cells: data wait 54.4, forward 6.8, backward 3.4, optimizer 1.36, other 2.04 → 54, 6, 3, 1, 2 and the two
    # left to forward's .8 and data wait's .4.
    assert lines[at + 1:at + 5] == [
        "           data wait   forward  backward optimizer     other      step   steps/s",
        "  rank 0  ▕" + "█" * 55 + "▓" * 7 + "▒▒▒░▁▁▏",
        "                 80%       10%        5%        2%        3%",
        "              800 ms    100 ms     50 ms     20 ms     30 ms       1 s         1"]
    assert all(len(line) <= 80 for line in lines)


def test_a_verdict_judged_by_prometheus_keeps_prometheus_state() -> None:
    """With --prometheus.url nothing was sampled: the alert's own state, no held line, no breakdown."""
    finding = Finding(resolve().alert("InputBound"), {"instance": "node-a", "training_job": "resnet", "rank": "0"},
                      0.8, state="firing")
    report = Report("prometheus", "http://prometheus:9090", 0.0, 1, [finding], [], [])
    text = render_text(report)
    assert "  WARNING   input-bound (data loading)  (BottleneckInputBound)  [firing]\n" in text
    assert "held" not in text and "step breakdown" not in text
    assert report.critical is False and json.loads(render_json(report))["verdicts"][0]["sampled"] is None


def test_a_rank_without_a_step_between_the_samples_is_split_over_its_run() -> None:
    """Steps stopped before the window: the increase says nothing, the totals since the rank started do."""
    store = SeriesStore()
    labels = {"instance": "node-1", "job": JOB, "training_job": "stuck", "rank": "3"}
    store.add({**labels, "__name__": "bottleneck_train_steps_total"}, [(0.0, 10.0), (5.0, 10.0)])
    for phase, total in (("data_wait", 2.0), ("forward", 3.0), ("backward", 3.5), ("optimizer", 1.0),
                         ("step", 10.0)):
        store.add({**labels, "__name__": "bottleneck_train_phase_seconds_total", "phase": phase},
                  [(0.0, total), (5.0, total)])
    (stuck,) = breakdown.ranks(store)
    assert (stuck.over, stuck.split.steps, stuck.steps_per_second) == (RUN, 10.0, None)
    assert stuck.split.per_step == pytest.approx({"data_wait": 0.2, "forward": 0.3, "backward": 0.35,
                                                  "optimizer": 0.1, "other": 0.05})


def test_a_counter_s_increase_counts_across_a_restart() -> None:
    """5 → 7 (+2), then the trainer restarts: 2 (+2, counted from 0), 4 (+2)."""
    assert breakdown.increase([5.0, 7.0, 2.0, 4.0]) == 6.0
    assert breakdown.increase([3.0]) == 0.0


def test_the_split_never_makes_the_phases_more_than_the_step() -> None:
    """The phases are timed apart from the step: a skew that makes them longer costs "other", never a share
    above the whole."""
    skewed = breakdown.split({"data_wait": 0.5, "forward": 0.3, "backward": 0.3, "optimizer": 0.0, "step": 1.0}, 1)
    assert skewed.seconds["other"] == 0.0 and skewed.seconds_per_step == 1.0
    assert breakdown.split({}, 0).shares == dict.fromkeys(breakdown.PARTITION, 0.0)


def test_each_gpu_s_utilization_is_the_mean_over_the_samples_ours_or_dcgm_exporter_s() -> None:
    """GPU 0 from dcgm-exporter: 50, 70, 90 (percent) → mean 70%; GPU 1 from ours: 0.25, 0.75 → 50%."""
    store = SeriesStore()
    store.add({"__name__": "DCGM_FI_DEV_GPU_UTIL", "instance": "node-1", "job": "dcgm-exporter", "gpu": "0",
               "UUID": "GPU-a", "modelName": "NVIDIA H100 80GB HBM3"}, [(0.0, 50.0), (5.0, 70.0), (10.0, 90.0)])
    ours = {"instance": "node-1", "job": JOB, "gpu": "1", "uuid": "GPU-b"}
    store.add({**ours, "__name__": "bottleneck_gpu_utilization_ratio"}, [(0.0, 0.25), (5.0, 0.75)])
    store.add({**ours, "__name__": "bottleneck_gpu_info", "name": "NVIDIA H200"}, [(0.0, 1.0)])
    dcgm, mine = breakdown.gpus(store)
    assert (dcgm.gpu, dcgm.uuid, dcgm.source, dcgm.samples) == ("0", "GPU-a", "dcgm-exporter", 3)
    assert (dcgm.mean, dcgm.low, dcgm.high) == pytest.approx((0.7, 0.5, 0.9))
    assert (mine.gpu, mine.name, mine.source, mine.mean) == ("1", "NVIDIA H200", "bottleneck-exporter", 0.5)
    report = Report("in-process", "node-1", 10.0, 0, [], [], [], 10.0, gpus=[dcgm, mine])
    lines = render_text(report).splitlines()
    at = lines.index("node node-1: GPU utilization, the mean over 10 s sampled")
    # 30 cells: 70% is 21 cells; 50%, 15.
    assert lines[at + 1:at + 4] == [
        "  GPU 0  ▕█████████████████████         ▏   70%  (min 50%, max 90%, 3 samples)  NVIDIA H100 80GB HBM3, "
        "dcgm-exporter",
        "  GPU 1  ▕███████████████               ▏   50%  (min 25%, max 75%, 2 samples)  NVIDIA H200, "
        "bottleneck-exporter",
        "  no bottleneck found"]
    assert json.loads(render_json(report))["gpus"][0]["utilization_ratio"] == pytest.approx(0.7)


def test_bars_share_their_cells_by_largest_remainder_and_levels_by_eighths() -> None:
    # 18 cells of 0.8/0.1/0.05/0.02/0.03: 14.4, 1.8, 0.9, 0.36, 0.54 → 14, 1, 0, 0, 0 and the 3 left to the
    # largest remainders (.9, .8, .54).
    assert bars.cells([0.8, 0.1, 0.05, 0.02, 0.03], 18) == [14, 2, 1, 0, 1]
    assert bars.split([("█", 0.8), ("▓", 0.1), ("▒", 0.05), ("░", 0.02), ("▁", 0.03)], 18) == (
        "▕" + "█" * 14 + "▓▓▒▁" + "▏")
    assert bars.split([("█", 0.25)], 8) == "▕██      ▏", "a split short of the whole leaves the rest empty"
    # 0.78 of 30 cells is 187.2 eighths: 23 full cells and 3 eighths.
    assert bars.level(0.78, 30) == "▕" + "█" * 23 + "▍" + " " * 6 + "▏"
    assert bars.level(1.7, 4) == "▕████▏" and bars.level(float("nan"), 4) == "▕    ▏"


def test_the_rate_window_is_the_sampled_span_unless_given() -> None:
    clock = Clock()
    sampler = Sampler(Recorded(gpus_up((1.0,))), "node-1", JOB, clock=clock)
    sampler.run(10.0, 5.0, sleep=clock.sleep)
    assert evaluate(sampler.samples()).catalogue.parameters["rate_window"] == "11s"
    assert evaluate(sampler.samples(), window=30.2).catalogue.parameters["rate_window"] == "31s"
    with pytest.raises(ValueError, match="no samples"):
        evaluate(Samples(sampler.samples().store, []))


@pytest.mark.parametrize(("given", "url"), [("http://h:9847", "http://h:9847/metrics"),
                                            ("http://h:9847/", "http://h:9847/metrics"),
                                            ("http://h:9847/custom", "http://h:9847/custom")])
def test_an_exporter_url_without_a_path_is_read_at_metrics(given: str, url: str) -> None:
    source = HttpSource(given)
    assert (source.url, source.target, source.kind) == (url, url, "exporter")
