"""Time in collectives: a real three-rank torch.distributed (gloo, CPU) job, its gradient all-reduce timed by
the hook's communication hook, diagnosed by ``bottleneck-exporter diagnose`` (the Python evaluator over the
in-process receiver's samples, as on a node without Prometheus)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from exporter import diagnose
from exporter.push.schema import validate
from tests.conftest import ROOT, free_port

pytestmark = [pytest.mark.torch, pytest.mark.live]

RANKS = 3
JOB = "allreduce-bound"


def start_ranks(socket_path: Path, stop: Path) -> list[subprocess.Popen[str]]:
    """A big model that computes little: an embedding table of 4.2 M parameters (17 MB of dense gradients)
    looked up by batches of 8, so every step's all-reduce costs more than its compute, on every rank."""
    port = str(free_port())
    return [subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "e2e_train.py"), "ddp", "--embedding", "262144",
         "--stop-file", str(stop)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(RANKS),
             "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "GLOO_SOCKET_IFNAME": "lo",
             "BOTTLENECK_PUSH_ADDRESS": f"unix://{socket_path}", "BOTTLENECK_JOB": JOB,
             "BOTTLENECK_PUSH_INTERVAL": "0.5", "PYTHONPATH": str(ROOT)}) for rank in range(RANKS)]


def wait_for_steps(socket_path: Path, ranks: list[subprocess.Popen[str]], steps: int, timeout: float) -> None:
    """Listen on the push socket until every rank reported ``steps`` steps (the job's start-up, slow on a
    loaded machine, is then behind it), and hand the socket path back."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(socket_path))
    sock.settimeout(1.0)
    seen: dict[int, int] = {}
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and (len(seen) < RANKS or min(seen.values()) < steps):
            assert all(p.poll() is None for p in ranks), "a rank exited during start-up"
            try:
                snapshot = validate(sock.recv(65536))
            except TimeoutError:
                continue
            seen[snapshot.rank] = snapshot.steps
            # From the first step on (the comm hook is registered at the first forward).
            assert not snapshot.steps or snapshot.collective_seconds, "the hook did not time the DDP all-reduce"
    finally:
        sock.close()
        socket_path.unlink()
    assert len(seen) == RANKS and min(seen.values()) >= steps, f"ranks' steps after {timeout}s: {seen}"


def test_allreduce_dominated_ddp_job_is_communication_bound(tmp_path: Path) -> None:
    socket_path = tmp_path / "push.sock"
    stop = tmp_path / "stop"
    ranks = start_ranks(socket_path, stop)
    diag = None
    try:
        wait_for_steps(socket_path, ranks, steps=3, timeout=240)
        diag = subprocess.Popen([sys.executable, "-m", "exporter", "diagnose", "--window", "20", "--interval",
                                 "1", "--json", f"--push.socket={socket_path}", "--collector.disable-defaults"],
                                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, err = diag.communicate(timeout=180)
    finally:
        stop.touch()
        for process in ranks:
            try:
                process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                process.kill()
        if diag is not None and diag.poll() is None:
            diag.kill()
    logs = "\n".join((p.stdout.read() if p.stdout else "")[-2000:] for p in ranks)
    assert diag.returncode in (diagnose.EXIT_OK, diagnose.EXIT_CRITICAL), err
    report = json.loads(out)
    found = {v["labels"]["rank"]: v["value"] for v in report["verdicts"]
             if v["alert"] == "BottleneckCommunicationBound" and v["labels"].get("training_job") == JOB}
    # Every rank waits on the same all-reduce: all three are communication-bound.
    assert set(found) == {"0", "1", "2"}, (report["verdicts"], report["missing"], logs)
    assert all(0.5 < share <= 1.0 for share in found.values()), found
    assert all(p.returncode == 0 for p in ranks), logs
