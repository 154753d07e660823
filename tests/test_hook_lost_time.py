"""What a training thread loses besides its phases: the hook's measures of collections, checkpoint saves, long steps
and start-up, each against a known truth; then judged on real CPU training runs (tests/hook_trainer.py) that
push to ``bottleneck-exporter diagnose``'s in-process receiver (the Python evaluator, as on a node without
Prometheus): a loop that calls ``gc.collect()`` every step over a million live objects, one that writes a
checkpoint with ``torch.save`` every 20 steps, one that evaluates every 25 steps, one that starts late, and a
healthy one beside them that must get none of their verdicts."""

from __future__ import annotations

import gc
import os
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from bottleneck_exporter.hook.gcpauses import GcClock
from bottleneck_exporter.hook.session import Session
from bottleneck_exporter.hook.timing import FORWARD, STEP_END, TUNE_STEPS, StepClock
from bottleneck_exporter.procfs import USER_HZ, read_stat
from bottleneck_exporter.wire.schema import validate
from tests.datagrams import stepped
from tests.diagnosis import diagnosed

pytestmark = [pytest.mark.torch, pytest.mark.live]

def test_a_step_far_above_the_median_is_long_and_its_time_above_the_median_is_lost():
    clock = StepClock()
    now = 100.0
    # Regular 0.1 s steps (a little jitter), then one of 1.0 s every 20 steps, as a save would make.
    for step in range(80):
        clock.log += [FORWARD, now]
        now += 1.0 if step in (40, 60) else 0.1 + 0.001 * (step % 3)
        clock.log += [STEP_END, now]
        clock.totals()  # a datagram every step: the bound follows the steps
    totals = clock.totals()
    assert totals.long_steps == 2
    assert totals.median_step_seconds == pytest.approx(0.101)
    assert totals.long_step_excess_seconds == pytest.approx(2 * (1.0 - 0.101))
    assert totals.first_step_end == pytest.approx(100.1)


def test_a_healthy_loop_whose_machine_gets_busy_has_no_long_steps():
    clock = StepClock()
    now = 100.0
    # Regular 10 ms steps, an evaluation pass that holds two steps in a row; then another process takes the
    # cores and most steps last five times as long, every third one as long as before (the scheduler left it
    # a whole slice): the bound lags behind them for seconds, yet none of them is long but one more evaluation.
    for step in range(600):
        clock.log += [FORWARD, now]
        if step in (100, 101, 220):
            now += 1.0
        else:
            now += (0.05 if step >= 200 and step % 3 else 0.01) * (1 + 0.01 * (step % 5))
        clock.log += [STEP_END, now]
        clock.totals()  # a datagram every step: the bound follows the steps as closely as it can
    totals = clock.totals()
    assert totals.long_steps == 3
    # The evaluations' time above the median of the steps around them: 10 ms, then the slowed steps' 50-52 ms.
    assert totals.long_step_excess_seconds == pytest.approx(2 * (1.0 - 0.0102) + (1.0 - 0.051), abs=0.001)
    assert totals.median_step_seconds is not None and 0.05 <= totals.median_step_seconds <= 0.052


def test_no_step_is_long_before_the_bound_has_steps_to_stand_on():
    clock = StepClock()
    clock.log += [FORWARD, 0.0]
    for step in range(TUNE_STEPS - 1):  # the first steps compile and warm up: start-up, not long steps
        clock.log += [STEP_END, 10.0 if step == 0 else 10.0 + 0.1 * step]
        clock.totals()
    totals = clock.totals()
    assert (totals.long_steps, totals.median_step_seconds) == (0, None)


def test_collections_are_timed_by_generation():
    clock = GcClock()
    clock.attach()
    try:
        live = [[index] for index in range(200_000)]
        gc.collect()
        gc.collect(1)
        del live
    finally:
        clock.detach()
    assert clock.collections[2] >= 1 and clock.collections[1] >= 1
    assert clock.seconds[2] > 0
    before = clock.collections
    clock.callback("start", {"generation": 7})
    clock.callback("stop", {"generation": 7})  # an info this interpreter never sends: ignored, never raised
    clock.callback("stop", {})
    assert clock.collections == before
    assert clock.callback not in gc.callbacks


def test_saves_on_the_training_thread_count_once_and_others_threads_saves_not(tmp_path: Path):
    session = Session(job="saves", address="off")
    try:
        torch.save({"w": torch.zeros(1000)}, tmp_path / "a.pt")
        torch.save({"nested": torch.zeros(10)}, tmp_path / "b.pt")
        other = threading.Thread(target=torch.save, args=({"w": torch.zeros(10)}, tmp_path / "c.pt"))
        other.start()
        other.join()
        assert (session.checkpoints.saves, session.checkpoints.seconds > 0) == (2, True)
        assert torch.load(tmp_path / "a.pt")["w"].shape == (1000,)  # the wrapper saves what torch.save does
    finally:
        session.close()
    torch.save({"w": torch.zeros(10)}, tmp_path / "d.pt")
    assert session.checkpoints.saves == 2  # a closed session counts nothing


def test_start_up_runs_from_the_process_start_to_the_first_step_end():
    session = Session(job="start", address="off")
    try:
        session.mark(FORWARD)
        session.end_step()
        snapshot = validate(session._datagram())
        # The kernel's own account: this process's age now (its start in /proc/self/stat against /proc/uptime),
        # a moment after its first step ended.
        stat = read_stat("/proc", os.getpid())
        assert stat is not None
        age = float(Path("/proc/uptime").read_text().split()[0]) - stat.starttime / USER_HZ
        assert snapshot.startup_seconds is not None
        assert age - 1.0 < snapshot.startup_seconds <= age + 0.02
        assert snapshot.long_steps is not None and snapshot.gc is not None and snapshot.checkpoint is not None
    finally:
        session.close()


# The verdicts of what the training thread loses besides its phases, and those such a job must not get.
LOST_TIME = {"BottleneckGcPauses", "BottleneckBlockingCheckpoints", "BottleneckLongSteps", "BottleneckSlowStart"}
WRONG_CALLS = {"BottleneckInputBound", "BottleneckIoBound", "BottleneckTrainingStalled"}
# The late starter sleeps START_AFTER seconds before training. The start-up threshold is set between the
# start-ups the trainers report (a healthy one's is its imports: a few seconds, two minutes on a shared
# machine at a load of 9 per core), once every job has stepped; the window then sees every job train.
START_AFTER = 40
WINDOW = 40

JOBS = {
    "lost-gc": (["--gc-collect-over", "1000000"], {"BottleneckGcPauses"}),
    "lost-checkpoint": (["--checkpoint-every", "20", "--checkpoint-mb", "64"], {"BottleneckBlockingCheckpoints"}),
    "lost-evaluation": (["--evaluate-every", "25"], {"BottleneckLongSteps"}),
    "lost-start": (["--start-after", str(START_AFTER)], {"BottleneckSlowStart"}),
    "lost-nothing": ([], set()),
}


def test_each_kind_of_lost_time_gets_its_verdict_and_a_healthy_run_none(
        tmp_path: Path, trainers: Callable[..., subprocess.Popen[str]], monkeypatch: pytest.MonkeyPatch) -> None:
    socket_path = tmp_path / "push.sock"
    # A datagram every 0.25 s: each 1 s sample sees steps the one before did not.
    monkeypatch.setenv("BOTTLENECK_PUSH_INTERVAL", "0.25")
    running = {job: trainers(job, "fast", socket_path, *flags) for job, (flags, _) in JOBS.items()}
    last = stepped(socket_path, running.values(), [(job, 0) for job in JOBS], steps=20, timeout=600)
    startups = {job: snapshot.startup_seconds or 0.0 for (job, _), snapshot in last.items()}
    late, others = startups.pop("lost-start"), max(startups.values())
    assert late > START_AFTER and late > others, (late, startups)
    threshold = (late + others) / 2
    report = diagnosed(socket_path, WINDOW, "--set", f"startup_max_seconds={threshold}")
    assert all(process.poll() is None for process in running.values()), "a trainer exited before the window ended"
    found: dict[str, dict[str, float]] = {job: {} for job in JOBS}
    for verdict in report["verdicts"]:
        job = verdict["labels"].get("training_job")
        if job in found:
            found[job][verdict["alert"]] = verdict["value"]
    lost = {job: set(alerts) & LOST_TIME for job, alerts in found.items()}
    assert lost == {job: expected for job, (_, expected) in JOBS.items()}, (found, report["missing"])
    assert not any(set(alerts) & WRONG_CALLS for alerts in found.values()), found
    # Most of each step goes to the collections; a save every 20 steps and an evaluation pass every 25 steps
    # cost more than a tenth of the time; the late starter's start-up holds its sleep.
    assert found["lost-gc"]["BottleneckGcPauses"] > 0.5, found
    assert found["lost-checkpoint"]["BottleneckBlockingCheckpoints"] > 0.1, found
    assert found["lost-evaluation"]["BottleneckLongSteps"] > 0.1, found
    assert found["lost-start"]["BottleneckSlowStart"] == pytest.approx(late), found
