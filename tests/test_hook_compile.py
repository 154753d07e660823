"""torch.compile's compilations, as the hook counts them from dynamo's compile callbacks, and the verdict on a
job that keeps recompiling: real torch.compile (the eager backend) on CPU, a real push receiver, real diagnose."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bottleneck_exporter.hook.compiles import CompileClock, recompiles
from bottleneck_exporter.verdicts import evaluation
from tests.conftest import stop_all
from tests.datagrams import stepped
from tests.diagnosis import diagnosed

pytestmark = pytest.mark.torch

ROOT = Path(__file__).resolve().parent.parent
TRAINER = ROOT / "tests" / "compile_train.py"


@pytest.mark.parametrize("compile_id, again", [
    ("0/0", False), ("0/1", True), ("[0/3]", True), ("1/0_1", False), ("2/5_1", True), ("", False), ("x", False),
])
def test_a_compile_id_says_whether_it_compiles_a_frame_again(compile_id: str, again: bool) -> None:
    assert recompiles(compile_id) is again


def test_the_clock_counts_compilations_and_recompilations_of_a_real_torch_compile() -> None:
    import torch
    import torch._dynamo

    clock = CompileClock()
    assert clock.attach()
    torch._dynamo.reset()  # drops every compile callback: the next attach registers them again
    assert clock.attach()
    try:
        compiled = torch.compile(torch.nn.Linear(4, 2), backend="eager", dynamic=False)
        for length in (3, 3, 5, 5, 7):  # two new lengths after the first: two recompilations
            compiled(torch.randn(length, 4))
        assert (clock.compiles, clock.recompiles) == (3, 2)
        assert clock.seconds > 0
    finally:
        clock.detach()
    compiled(torch.randn(9, 4))
    assert clock.compiles == 3, "detached, it counts no more"


def test_a_session_never_loads_dynamo_itself() -> None:
    code = ("import sys\nfrom bottleneck_exporter.hook.session import Session\n"
            "s = Session(job='j', address='off')\ns.payload()\ns.close()\n"
            "assert 'torch._dynamo' not in sys.modules, 'the hook loaded dynamo'\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr


def test_a_job_that_keeps_recompiling_gets_the_verdict_and_a_steady_one_does_not(tmp_path: Path) -> None:
    socket_path, stop = tmp_path / "push.sock", tmp_path / "stop"
    jobs: dict[str, subprocess.Popen[str]] = {}
    try:
        for shapes in ("steady", "changing"):
            jobs[shapes] = subprocess.Popen(
                [sys.executable, str(TRAINER), "--shapes", shapes, "--stop-file", str(stop)],
                env={**os.environ, "BOTTLENECK_PUSH_ADDRESS": f"unix://{socket_path}", "BOTTLENECK_JOB": shapes,
                     "BOTTLENECK_PUSH_INTERVAL": "0.5", "PYTHONPATH": str(ROOT)},
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        stepped(socket_path, jobs.values(), [(job, 0) for job in jobs], steps=8, timeout=240)
        report = diagnosed(socket_path, 20)
    finally:
        stop.touch()
        stop_all(jobs.values())
    fired = {v["labels"]["training_job"]: v for v in report["verdicts"] if v["alert"] == "BottleneckKeepsRecompiling"}
    assert set(fired) == {"changing"}, report["verdicts"]
    # A new batch length every four steps, each a recompilation: many a minute. Not at every sample: during a
    # recompilation the rank sends nothing (datagrams go at step ends), and a 1 s sample may see no new one.
    assert fired["changing"]["value"] > 5, fired
    assert fired["changing"]["sampled"]["state"] in (evaluation.THROUGHOUT, evaluation.PARTLY), fired
    # Its recompilations are its long steps: named by this verdict, not called long steps.
    assert not [v for v in report["verdicts"] if v["alert"] == "BottleneckLongSteps"
                and v["labels"]["training_job"] == "changing"], report["verdicts"]
