"""The verdict engine (``bottleneck_exporter.verdicts``) through its API, as ``run`` will call it: a sampler over a
source and a peer, the evaluation with ``for:`` judged over the sample times, the report of both.

A recorded source stands in for the collectors (its samples change scrape by scrape) and a fake clock for time, so
every time and ``for:`` figure below is worked out by hand.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence

import pytest

from bottleneck_exporter.heuristics import NODE_EXPORTER
from bottleneck_exporter.verdicts.evaluation import Samples, evaluate
from bottleneck_exporter.verdicts.peers import peer
from bottleneck_exporter.verdicts.report import render_json, render_text, sampled
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


def test_for_is_judged_over_the_sample_times_pending_with_the_time_it_still_needs() -> None:
    """BottleneckGpuLost (critical, for: 1m), sampled every 20 s for 80 s. GPU 0 is lost from 40 s on: held
    40 s at 80 s, 20 s more needed. GPU 1 is lost all along: held 80 s, firing. GPU 2 came back at 40 s and is
    lost again from 60 s: held 20 s, 40 s more needed."""
    clock = Clock()
    sampler = Sampler(Recorded(gpus_up((1, 0, 0), (1, 0, 0), (0, 0, 1), (0, 0, 0), (0, 0, 0))), "node-1", JOB,
                      clock=clock)
    sampler.run(80.0, 20.0, sleep=clock.sleep)
    judged = evaluate(sampler.samples())
    assert (judged.at, judged.window_seconds, judged.catalogue.parameters["rate_window"]) == (80.0, 80.0, "81s")
    lost = {f.labels["gpu"]: (f.state, f.needs_seconds) for f in judged.findings if f.rule.alert == "BottleneckGpuLost"}
    assert lost == {"0": ("pending", 20.0), "1": ("firing", None), "2": ("pending", 40.0)}
    assert {f.rule.alert for f in judged.findings if f.rule.severity == "critical"} == {"BottleneckGpuLost"}
    assert sampled(judged, sampler).critical

    # Without GPU 1, every critical verdict is still pending: nothing critical fires yet.
    clock = Clock()
    sampler = Sampler(Recorded(gpus_up((1, 1), (1, 1), (0, 1), (0, 0), (0, 0))), "node-1", JOB, clock=clock)
    sampler.run(80.0, 20.0, sleep=clock.sleep)
    assert not sampled(evaluate(sampler.samples()), sampler).critical

    unjudged = evaluate(sampler.samples(), hold_for=False)
    assert {(f.state, f.needs_seconds) for f in unjudged.findings} == {(None, None)}


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
