"""scripts/device-check without a GPU: it stops at once saying so, and its steps run on CPU (--cpu-dry-run):
the exporter's scrape through promtool, the hook's loop and its paired cost, DDP's and FSDP's collectives
on two gloo ranks, the pinned-batch check (which counts nothing on a CPU rank), and the setup facts (autocast
sampled in the forwards, the dtype and matmul precision, a gloo group's backend)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT

SCRIPT = ROOT / "scripts" / "device-check"


def test_without_a_gpu_it_stops_before_setting_anything_up_with_exit_2(tmp_path):
    # A PATH without nvidia-smi: what a machine without the NVIDIA driver has.
    result = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                            env={**os.environ, "PATH": str(tmp_path)})
    assert result.returncode == 2, result.stdout + result.stderr
    assert "no NVIDIA GPU found" in result.stdout and "--cpu-dry-run" in result.stdout
    assert "2. Python environment" not in result.stdout  # nothing set up, nothing started


@pytest.mark.live
@pytest.mark.tools
@pytest.mark.torch
def test_cpu_dry_run_runs_every_step_and_reports_it():
    result = subprocess.run([sys.executable, str(SCRIPT), "--cpu-dry-run", "--steps", "40"], capture_output=True,
                            text=True, timeout=400, cwd=ROOT)
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    for line in ("ok   promtool check metrics: clean", 'ok   training loop on cpu under sync debug mode "error"',
                 "ok   hook internal errors: 0", "per step, host ms: data_wait",
                 "hook's cost on cpu: added per step (median of pairs):",
                 "ok   ddp: collective time on the host timeline", "ok   fsdp: collective time on the host timeline",
                 "ok   fsdp1: collective time on the host timeline",
                 "ok   exported collective phase:", "ok   benchmarks/hook_overhead.py ran",
                 "this machine's cold-code penalty:", "send it (",
                 "ok   pin-check-pinned: a CPU rank copies nothing, so nothing is counted or exported",
                 "ok   setup-float32: 0 of ", "ok   setup-autocast: ",
                 "ok   setup-gloo: exported process_group_backend",
                 "device-check: all checks passed"):
        assert line in out, out
