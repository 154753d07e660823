"""``bottleneck-exporter run``: real commands as real child processes (their exit status, the signals meant for
them, their terminal and pipes) and the report of what held them back, measured by the automatic instrumentation
alone: tests/plain_train.py and tests/framework_train.py never import bottleneck_exporter."""

from __future__ import annotations

import fcntl
import json
import os
import re
import signal
import struct
import subprocess
import sys
import termios
import threading
from pathlib import Path
from typing import Any

import pytest

from bottleneck_exporter.heuristics.catalogue import resolve
from bottleneck_exporter.run.child import job_of
from bottleneck_exporter.run.coverage import NO_TRAINING
from bottleneck_exporter.run.statusline import progress_of
from tests.conftest import ROOT, wait_until

PYTHON = sys.executable
PLAIN = str(ROOT / "tests" / "plain_train.py")
# The collectors that read this machine's own hardware (GPUs, disks) add nothing to what these tests check.
QUIET = ["--no-collector.gpu"]
# The report's first line, as run (not diagnose) says it.
REPORT_HEADING = re.compile(r"bottleneck-exporter run: \d+ verdict")


def run(args: list[str], timeout: float = 240, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PYTHON, "-m", "bottleneck_exporter", "run", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, **kwargs)


def report_of(path: Path) -> dict[str, Any]:
    report: dict[str, Any] = json.loads(path.read_text())
    return report


def one_line_error(stderr: str) -> str:
    """The line ``run`` wrote about the error (the command's own output may come before it)."""
    lines = [line for line in stderr.splitlines() if line.startswith("bottleneck-exporter run: error: ")]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr, stderr
    return lines[0]


# ------------------------------------------------------------------------------------------ the pieces


@pytest.mark.parametrize(("command", "job"), [
    (["python", "train.py", "--lr", "3"], "train"),
    (["torchrun", "--nproc-per-node=2", "recipes/pretrain.py"], "pretrain"),
    (["python", "-m", "torch.distributed.run", "--standalone", "finetune.py"], "finetune"),
    (["python", "-u", "-m", "mypkg.train"], "mypkg.train"),
    (["./train.sh"], "train"),
    (["python", "-c", "print(1)"], "python"),
])
def test_the_default_job_is_named_after_the_script_the_command_runs(command: list[str], job: str) -> None:
    assert job_of(command) == job


def scrape(steps: float, data_wait: float, step: float, rank: str = "0") -> list[Any]:
    labels = {"training_job": "train", "rank": rank}
    return [("bottleneck_train_steps_total", labels, steps),
            ("bottleneck_train_phase_seconds_total", {**labels, "phase": "data_wait"}, data_wait),
            ("bottleneck_train_phase_seconds_total", {**labels, "phase": "step"}, step)]


def test_the_status_line_reads_steps_per_second_and_data_wait_from_the_last_two_scrapes() -> None:
    before = (10.0, scrape(100, 5, 10) + scrape(100, 1, 10, rank="1"))
    last = (12.0, scrape(110, 6.5, 12) + scrape(108, 1.5, 12, rank="1"))
    # Ranks 0 and 1 stepped 10 and 8 times in 2 s; they waited 2 s for data of 4 s of steps.
    assert progress_of(before, last) == {"train": (4.5, 0.5)}
    assert progress_of(last, (14.0, last[1])) == {"train": (0.0, None)}  # a stalled job: no step time passed


# ------------------------------------------------------------------------------------------- bad input


def test_run_without_a_command_is_a_one_line_usage_error() -> None:
    result = run(["--interval", "1s"])
    assert result.returncode == 2
    assert "no command to run" in one_line_error(result.stderr)


@pytest.mark.live
def test_a_command_that_does_not_exist_exits_127_as_a_shell_does(tmp_path: Path) -> None:
    result = run(["--", "no-such-trainer-xyz", "--epochs", "3"])
    assert result.returncode == 127
    assert "no-such-trainer-xyz: command not found" in one_line_error(result.stderr)
    assert run(["--", str(tmp_path)]).returncode == 126  # a directory cannot be executed


@pytest.mark.live
def test_a_report_file_that_cannot_be_written_stops_run_before_the_command_starts(tmp_path: Path) -> None:
    started = tmp_path / "started"
    result = run(["--report", str(tmp_path / "no-such-directory" / "report.json"), "--", PYTHON, "-c",
                  f"open({str(started)!r}, 'w')"])
    assert result.returncode == 2
    assert "--report=" in one_line_error(result.stderr)
    assert not started.exists(), "the command ran although its report could not be written"


@pytest.mark.live
def test_a_command_that_dies_at_once_gets_one_line_and_its_exit_status(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    result = run([f"--report={report}", "--", PYTHON, str(tmp_path / "tarin.py")])
    assert result.returncode == 2, result.stderr  # Python's own status for a script it cannot open
    assert "can't open file" in result.stderr  # the command's own message, untouched
    assert "exited with status 2" in one_line_error(result.stderr)
    assert "verdict(s)" not in result.stderr
    assert not report.exists(), "an empty report file was left behind"


@pytest.mark.live
def test_run_refuses_push_flags_it_sets_itself() -> None:
    result = run(["--push.socket=/tmp/elsewhere.sock", "--", "true"])
    assert result.returncode == 2
    assert "--push.socket" in one_line_error(result.stderr)


# ------------------------------------------------------------------------------- the command's behaviour


@pytest.mark.live
@pytest.mark.parametrize("status", [0, 3])
def test_run_exits_with_the_commands_exit_status(status: int) -> None:
    result = run([*QUIET, "--", PYTHON, "-c", f"import sys, time; time.sleep(0.5); sys.exit({status})"])
    assert result.returncode == status, result.stderr


def test_stdin_and_stdout_pass_through_untouched() -> None:
    result = run([*QUIET, "--", PYTHON, "-c", "import sys; sys.stdout.write(sys.stdin.read().upper())"],
                 input="batch of lines\nsecond line\n")
    assert result.returncode == 0, result.stderr
    # run's own lines go to stderr: the command's stdout is the command's alone.
    assert result.stdout == "BATCH OF LINES\nSECOND LINE\n"


def start_in_own_session(tmp_path: Path, code: str) -> tuple[subprocess.Popen[str], Path]:
    """``run`` in a session of its own (as a shell's job is): a signal the test sends it is no terminal's."""
    ready = tmp_path / "ready"
    script = f"import pathlib, signal, sys, time\n{code}\npathlib.Path({str(ready)!r}).touch()\ntime.sleep(120)\n"
    proc = subprocess.Popen([PYTHON, "-m", "bottleneck_exporter", "run", *QUIET, "--", PYTHON, "-c", script],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    wait_until(lambda: ready.exists() or proc.poll() is not None, 60, "the command to be ready")
    assert proc.poll() is None, proc.communicate()
    return proc, ready


@pytest.mark.live
def test_sigint_sent_to_run_reaches_the_command_whose_handler_runs(tmp_path: Path) -> None:
    proc, _ = start_in_own_session(tmp_path, (
        "def handler(signo, frame):\n"
        "    print('the command handled SIGINT', flush=True)\n"
        "    sys.exit(7)\n"
        "signal.signal(signal.SIGINT, handler)"))
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert "the command handled SIGINT" in out
    assert proc.returncode == 7, err  # run did not die of the SIGINT: it waited and passed the status on


@pytest.mark.live
def test_a_command_killed_by_the_forwarded_sigterm_exits_128_plus_15(tmp_path: Path) -> None:
    proc, _ = start_in_own_session(tmp_path, "")
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "Traceback" not in err


class Terminal:
    """``run`` on a pseudo-terminal that is its controlling terminal, as in an interactive shell: what it writes
    is collected, and typing Ctrl-C makes the kernel signal its foreground process group."""

    def __init__(self, args: list[str]) -> None:
        self.master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 160, 0, 0))  # rows, columns

        def controlling_terminal() -> None:
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        self.proc = subprocess.Popen([PYTHON, "-m", "bottleneck_exporter", "run", *args], cwd=ROOT, stdin=slave,
                                     stdout=slave, stderr=slave, start_new_session=True,
                                     preexec_fn=controlling_terminal)
        os.close(slave)
        self.output = b""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:  # EIO: every process holding the terminal is gone
                return
            if not data:
                return
            self.output += data

    @property
    def text(self) -> str:
        return self.output.decode(errors="replace")

    def finish(self, timeout: float = 240) -> int:
        code = self.proc.wait(timeout=timeout)
        self._reader.join(timeout=10)
        os.close(self.master)
        return code


@pytest.mark.live
def test_ctrl_c_at_the_terminal_reaches_the_command_once(tmp_path: Path) -> None:
    """The terminal sends SIGINT to the whole foreground process group, the command included: run must not
    forward it too (a second KeyboardInterrupt would cut the command's own clean-up short)."""
    script = ("import signal, sys, time\ncaught = []\nsignal.signal(signal.SIGINT, lambda *_: caught.append(1))\n"
              "print('ready', flush=True)\nwhile not caught: time.sleep(0.05)\ntime.sleep(1)\n"
              "print(f'caught {len(caught)} SIGINT', flush=True)\nsys.exit(5)\n")
    terminal = Terminal([*QUIET, "--", PYTHON, "-c", script])
    try:
        wait_until(lambda: "ready" in terminal.text, 60, "the command to be ready")
        os.write(terminal.master, b"\x03")  # Ctrl-C
        code = terminal.finish()
    finally:
        if terminal.proc.poll() is None:
            terminal.proc.kill()
    assert "caught 1 SIGINT" in terminal.text, terminal.text
    assert code == 5, terminal.text


# ------------------------------------------------------------------------------------------ the report


@pytest.mark.live
def test_a_script_without_torch_gets_the_node_verdicts_and_is_told_its_training_was_not_seen(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    result = run([f"--report={report}", "--interval", "1s", "--", PYTHON, "-c", "import time; time.sleep(3)"])
    assert result.returncode == 0, result.stderr
    document = report_of(report)
    # Every rule but the trends, which a 3 s run cannot tell from a warm-up.
    assert document["rules_evaluated"] == len([r for r in resolve().alerts if not r.heuristic.sampled_over])
    assert document["errors"] == []
    assert document["run"]["unseen"] == [NO_TRAINING]
    assert document["run"]["measured"] == []
    assert any("training telemetry" in m for m in document["missing"])
    # The node's own series were sampled: its verdicts could be judged (the monitoring's own stay quiet).
    assert document["sources"][0]["scrapes"] >= 3 and not document["sources"][0]["failed"]
    assert REPORT_HEADING.search(result.stderr) and "What could not be seen" in result.stderr
    assert "exited with status 0" in result.stderr


@pytest.mark.live
@pytest.mark.torch
def test_an_unchanged_input_bound_pytorch_script_is_named_input_bound(tmp_path: Path) -> None:
    """The plain script with num_workers=0 and CPU-heavy samples, 20 s of training (the issue asks for 60 s at
    most)."""
    report = tmp_path / "report.json"
    result = run([f"--report={report}", "--interval", "1s", "--", PYTHON, PLAIN, "--dataset", "slow",
                  "--seconds", "20"])
    assert result.returncode == 0, result.stderr
    document = report_of(report)
    verdicts = [v for v in document["verdicts"] if v["labels"].get("training_job") == "plain_train"]
    # Pending or firing: how a verdict that held through the window is shown is the report's business.
    assert [v["alert"] for v in verdicts if v["alert"] in ("BottleneckInputBound", "BottleneckIoBound")] == [
        "BottleneckInputBound"], document
    assert verdicts[0]["value"] > 0.5
    assert "input-bound (data loading)" in result.stderr
    (rank,) = document["run"]["measured"]
    assert rank["training_job"] == "plain_train" and rank["steps"] > 10
    # Every phase was seen: the loader's iterator, the model found and timed, the optimizer's global hooks.
    assert document["run"]["unseen"] == []
    assert all(rank["phase_seconds"][phase] > 0 for phase in ("data_wait", "forward", "backward", "optimizer"))
    # The evaluation pass each epoch runs under no_grad: neither its batches nor its forwards are steps.
    assert rank["samples"] == rank["steps"] * 4
    assert "training telemetry" not in " ".join(document["missing"])
    assert f"trained {int(rank['steps'])} steps" in result.stdout


@pytest.mark.live
@pytest.mark.torch
def test_the_status_line_is_redrawn_in_place_on_a_terminal(tmp_path: Path) -> None:
    terminal = Terminal(["--interval", "1s", *QUIET, "--", PYTHON, PLAIN, "--dataset", "slow", "--seconds", "8"])
    try:
        code = terminal.finish()
    finally:
        if terminal.proc.poll() is None:
            terminal.proc.kill()
    assert code == 0, terminal.text
    lines = [chunk for chunk in terminal.text.split("\r") if chunk.startswith("bottleneck-exporter run ")]
    drawn = [line for line in lines if "plain_train: " in line and " steps/s" in line]
    assert drawn, terminal.text
    assert all(line.endswith("\x1b[K") for line in lines)
    assert any("data wait " in line for line in drawn)
    assert REPORT_HEADING.search(terminal.text)  # the report follows, the line cleared before it


@pytest.mark.live
def test_no_status_line_on_a_pipe(tmp_path: Path) -> None:
    result = run([*QUIET, "--interval", "1s", "--", PYTHON, "-c", "import time; time.sleep(3)"])
    assert result.returncode == 0, result.stderr
    assert "\r" not in result.stderr and "\x1b[" not in result.stderr


@pytest.mark.live
@pytest.mark.torch
def test_every_rank_of_a_torchrun_job_is_reported(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    result = run([f"--report={report}", "--interval", "1s", *QUIET, "--", PYTHON, "-m", "torch.distributed.run",
                  "--standalone", "--nproc-per-node=2", PLAIN, "--dataset", "fast", "--ddp", "--steps", "40"],
                 env={**os.environ, "GLOO_SOCKET_IFNAME": "lo"})
    assert result.returncode == 0, result.stderr
    document = report_of(report)
    ranks = document["run"]["measured"]
    assert [(r["training_job"], r["rank"], r["steps"]) for r in ranks] == [
        ("plain_train", "0", 40.0), ("plain_train", "1", 40.0)], ranks
    assert document["run"]["job"] == "plain_train"
    # DDP's wrapper was the module the loop called: the model found is it, and its all-reduce is timed.
    assert all(r["phase_seconds"]["forward"] > 0 and r["phase_seconds"].get("collective", 0) > 0 for r in ranks)


@pytest.mark.live
@pytest.mark.torch
@pytest.mark.parametrize("framework", ["lightning", "huggingface"])
def test_a_framework_trainer_is_measured_without_a_callback(tmp_path: Path, framework: str) -> None:
    report = tmp_path / "report.json"
    result = run([f"--report={report}", "--interval", "1s", *QUIET, "--", PYTHON,
                  str(ROOT / "tests" / "framework_train.py"), framework, "--output", str(tmp_path / "out")])
    assert result.returncode == 0, result.stderr
    document = report_of(report)
    (rank,) = document["run"]["measured"]
    # 24 items / batch 4 = 6 batches per epoch, 2 per optimizer step, 2 epochs: 6 steps. Frameworks fetch ahead
    # and accumulate: a fetch before the first optimizer step is no step.
    assert rank["steps"] == 6 and rank["samples"] == 48, rank
    assert document["run"]["unseen"] == []
    phases = rank["phase_seconds"]
    assert all(phases[p] > 0 for p in ("data_wait", "forward", "backward", "optimizer")), phases
    # 2 epochs x 24 items x 10 ms of sleep inside the loader: a lower bound of data wait.
    assert phases["data_wait"] >= 0.48, phases
    # Each micro-batch's forward (Lightning: its training_step) sleeps 5 ms; the first one runs before the model
    # is found and wrapped: 11 of 12.
    assert phases["forward"] >= 11 * 0.005, phases
    assert sum(phases[p] for p in ("data_wait", "forward", "backward", "optimizer")) <= phases["step"] * 1.0001


@pytest.mark.live
@pytest.mark.torch
def test_a_script_that_instruments_itself_runs_and_is_reported_once(tmp_path: Path) -> None:
    """Its own hook reports it; the automatic instrumentation steps aside (tests/test_hook_auto.py shows how)."""
    report = tmp_path / "report.json"
    result = run([f"--report={report}", "--interval", "1s", *QUIET, "--", PYTHON,
                  str(ROOT / "tests" / "hook_trainer.py"), "--dataset", "fast", "--stop-file", str(tmp_path / "x"),
                  "--max-steps", "300"], env={**os.environ, "BOTTLENECK_JOB": "self-instrumented"})
    assert result.returncode == 0, result.stderr
    document = report_of(report)
    (rank,) = document["run"]["measured"]
    assert rank["training_job"] == "self-instrumented"
    assert rank["steps"] == 300, rank
    # Two sessions in one process would each send for the same rank: the receiver refuses the older ones.
    assert document["run"]["refused"] == {}


@pytest.mark.live
@pytest.mark.torch
@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_dataloader_workers_under_run_never_send(tmp_path: Path, start_method: str) -> None:
    """Forked workers inherit the trainer's session (switched off in them); spawned ones load the automatic
    instrumentation afresh (the environment) and import torch: neither may send for the trainer's rank."""
    report = tmp_path / "report.json"
    result = run([f"--report={report}", "--interval", "1s", *QUIET, "--", PYTHON, PLAIN, "--dataset", "slow",
                  "--workers", "2", "--start-method", start_method, "--steps", "40"])
    assert result.returncode == 0, result.stderr
    document = report_of(report)
    (rank,) = document["run"]["measured"]
    assert rank["steps"] == 40, rank
    assert document["run"]["refused"] == {}


@pytest.mark.live
def test_a_sitecustomize_of_the_users_own_still_runs(tmp_path: Path) -> None:
    own = tmp_path / "own"
    own.mkdir()
    (own / "sitecustomize.py").write_text("import os\nos.environ['USERS_SITECUSTOMIZE'] = 'ran'\n")
    code = ("import os, sys; print(os.environ.get('USERS_SITECUSTOMIZE'), "
            "'bottleneck_exporter.hook.auto' in sys.modules)")
    result = run([*QUIET, "--", PYTHON, "-c", code], env={**os.environ, "PYTHONPATH": str(own)})
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["ran", "True"]
