"""Memory that grows and a CUDA allocator at its limit: the allocator's counts the hook reads from
``torch.cuda.memory_stats()`` (fed a dict of the shape torch returns, as CUDA is not on the test machines),
their way through the datagram to the exporter's counters, and a real CPU training job that keeps its losses
with their autograd graphs, named MemoryGrowing by ``diagnose`` while a healthy job beside it is not."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bottleneck_exporter.heuristics.parameters import PARAMETERS
from bottleneck_exporter.hook.allocator import allocator_readings
from bottleneck_exporter.push.receiver import PushReceiver
from bottleneck_exporter.push.store import JobStore
from bottleneck_exporter.wire.schema import Rejected, validate
from tests.conftest import ROOT, stop_all
from tests.datagrams import full_payload, stepped
from tests.diagnosis import diagnosed

STATS = ROOT / "tests" / "fixtures" / "cuda-memory-stats"
TRAINER = ROOT / "tests" / "hook_trainer.py"


def test_allocator_retries_and_ooms_are_read_from_a_memory_stats_dict() -> None:
    """A job at the edge of an 80 GB GPU: 17 GB reserved above what its tensors hold, 37 retries."""
    stats = json.loads((STATS / "fragmented.json").read_text())
    assert allocator_readings(stats) == {"allocator_retries": 37, "allocator_ooms": 0}


def test_an_allocator_that_counts_nothing_yet_sends_nothing() -> None:
    # torch.cuda.memory_stats() before CUDA is initialised, and counts of another shape, are left out.
    assert allocator_readings({}) == {}
    assert allocator_readings({"num_alloc_retries": 2.5, "num_ooms": True}) == {}


def test_allocator_counts_become_counters_of_the_rank() -> None:
    payload = full_payload("fragmented", 0)
    payload["gpu"].update(allocator_readings(json.loads((STATS / "fragmented.json").read_text())))
    receiver = PushReceiver(JobStore(max_jobs=4, max_ranks=4, expiry=600))
    assert receiver.handle(json.dumps(payload).encode())
    samples = {(s.name, s.labels.get("training_job")): s.value for family in receiver.collect()
               for s in family.samples}
    assert samples[("bottleneck_train_cuda_allocator_retries_total", "fragmented")] == 37
    assert samples[("bottleneck_train_cuda_allocator_ooms_total", "fragmented")] == 0


def test_the_devices_memory_becomes_a_gauge_of_the_rank_beside_what_it_allocated() -> None:
    """What GpuMemoryGrowing measures a growth against: the size of the rank's own device, as the hook reads it
    once from torch.cuda.get_device_properties() (not called here: no CUDA on the test machines)."""
    payload = full_payload("growing", 0)
    receiver = PushReceiver(JobStore(max_jobs=4, max_ranks=4, expiry=600))
    assert receiver.handle(json.dumps(payload).encode())
    samples = {s.name: s.value for family in receiver.collect() for s in family.samples
               if s.labels.get("training_job") == "growing"}
    assert samples["bottleneck_train_cuda_memory_total_bytes"] == payload["gpu"]["memory_total_bytes"]
    assert samples["bottleneck_train_cuda_memory_allocated_bytes"] == payload["gpu"]["memory_allocated_bytes"]


def test_a_rank_from_a_hook_that_sends_no_device_size_keeps_its_other_memory_gauges() -> None:
    # A hook older than the device's size: its datagrams stay valid, the growth verdict has nothing to run out.
    payload = full_payload("older-hook", 0)
    del payload["gpu"]["memory_total_bytes"]
    receiver = PushReceiver(JobStore(max_jobs=4, max_ranks=4, expiry=600))
    assert receiver.handle(json.dumps(payload).encode())
    names = {s.name for family in receiver.collect() for s in family.samples}
    assert "bottleneck_train_cuda_memory_allocated_bytes" in names
    assert "bottleneck_train_cuda_memory_total_bytes" not in names


@pytest.mark.parametrize("value", ["80e9", None, True])
def test_a_bad_device_size_is_refused_naming_the_key(value: object) -> None:
    payload = full_payload("growing", 0)
    payload["gpu"]["memory_total_bytes"] = value
    with pytest.raises(Rejected, match=r"gpu\.memory_total_bytes"):
        validate(json.dumps(payload).encode())


@pytest.mark.parametrize("count", [-1, 2.5, "3"])
def test_a_bad_allocator_count_is_refused_naming_the_key(count: object) -> None:
    payload = full_payload("fragmented", 0)
    payload["gpu"]["allocator_retries"] = count
    with pytest.raises(Rejected, match=r"gpu\.allocator_retries"):
        validate(json.dumps(payload).encode())




@pytest.mark.torch
@pytest.mark.live
def test_a_job_keeping_its_losses_with_their_graphs_is_memory_growing_and_a_healthy_one_is_not(
        tmp_path: Path) -> None:
    """Two CPU jobs side by side, the same model and data: one keeps every step's loss tensor with its graph
    (``losses.append(loss)``), the other not. Diagnosed over 245 s from /proc (the training collector finds both
    through the push receiver), after both have warmed up (20 steps)."""
    sock = tmp_path / "push.sock"
    jobs = {"leaking": ["--keep-losses"], "healthy": []}
    trainers = {job: subprocess.Popen(
        [sys.executable, str(TRAINER), "--dataset", "fast", "--stop-file", str(tmp_path / f"{job}.stop"), *extra],
        env={**os.environ, "BOTTLENECK_PUSH_ADDRESS": f"unix://{sock}", "BOTTLENECK_JOB": job,
             "BOTTLENECK_PUSH_INTERVAL": "0.5", "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for job, extra in jobs.items()}
    try:
        stepped(sock, trainers.values(), [(job, 0) for job in trainers], steps=20, timeout=240)
        # Over 4 minutes: diagnose judges a trend over no less (BottleneckMemoryGrowing's sampled_over).
        report = diagnosed(sock, 245, "--collector.training", "--collector.memory", interval=2)
    finally:
        for job in trainers:
            (tmp_path / f"{job}.stop").touch()
        stop_all(trainers.values())
    growing = {v["labels"].get("training_job"): v["value"] for v in report["verdicts"]
               if v["alert"] == "BottleneckMemoryGrowing"}
    assert set(growing) == {"leaking"}, (report["verdicts"], report["missing"])
    # The rate is the evidence: above the share of the node's memory an hour the verdict names.
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert growing["leaking"] > float(PARAMETERS["memory_growth_ratio_per_hour"].default) * total / 3600, growing
