"""The push receiver: validation, bounds, expiry, sockets and flags. No torch: the daemon never imports it.

Valid datagrams come from the hook's own Session (driven by hand, no model), so the two sides are tested
against each other rather than against a copy of the schema.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import logging
import math
import os
import socket
import stat
import subprocess
import sys
import time
import tracemalloc
import types
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest

from bottleneck_exporter.config import ConfigError
from bottleneck_exporter.hook.collective.clock import CollectiveClock, ExposedWait, GpuStopwatch
from bottleneck_exporter.hook.session import Session
from bottleneck_exporter.hook.timing import BACKWARD, DATA_WAIT, FORWARD, OPTIMIZER
from bottleneck_exporter.hook.transfer import CopyClock
from bottleneck_exporter.hook.transport import Transport
from bottleneck_exporter.push import settings as push_settings
from bottleneck_exporter.push.liveness import ProcessTable
from bottleneck_exporter.push.receiver import PushReceiver
from bottleneck_exporter.push.store import JobStore
from bottleneck_exporter.training.registry import TrainingRegistry
from bottleneck_exporter.wire import schema
from bottleneck_exporter.wire.encode import encode
from bottleneck_exporter.wire.schema import (
    GPU_ALLOCATOR,
    GPU_MEMORY,
    JOB_LABEL,
    MAX_DATAGRAM_BYTES,
    REASONS,
    STEP_BUCKETS,
    validate,
)
from tests.conftest import require_tool, wait_until
from tests.datagrams import full_payload, hook_payload


def receiver(max_jobs: int = 8, max_ranks: int = 4, expiry: float = 600.0, clock: Any = time.monotonic,
             training: TrainingRegistry | None = None) -> PushReceiver:
    return PushReceiver(JobStore(max_jobs, max_ranks, expiry, clock=clock), training)


def sample(rx: PushReceiver, name: str, **labels: str) -> float | None:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(rx)
    return registry.get_sample_value(name, labels)


# -- validation -----------------------------------------------------------------------------------------------
def test_hook_datagram_is_accepted_and_exposed():
    rx = receiver()
    payload = hook_payload(steps=3)
    assert rx.handle(encode(payload))
    assert sample(rx, "bottleneck_train_steps_total", training_job="job-a", rank="0") == 3
    assert sample(rx, "bottleneck_train_samples_total", training_job="job-a", rank="0") == 3
    assert sample(rx, "bottleneck_train_phase_seconds_total", training_job="job-a", rank="0", phase="step") \
        == payload["phase_seconds"]["step"]
    assert sample(rx, "bottleneck_train_step_duration_seconds_count", training_job="job-a", rank="0") == 3
    assert sample(rx, "bottleneck_train_step_duration_seconds_bucket", training_job="job-a", rank="0", le="+Inf") == 3
    assert sample(rx, "bottleneck_train_dataloader_prefetch_factor", training_job="job-a", rank="0") == 2
    assert sample(rx, "bottleneck_train_dataloader_pin_memory", training_job="job-a", rank="0") == 1
    assert sample(rx, "bottleneck_push_datagrams_total") == 1
    assert sample(rx, "bottleneck_push_jobs") == 1
    assert all(sample(rx, "bottleneck_push_rejected_total", reason=r) == 0 for r in REASONS)
    # No GPU in the datagram: no GPU series rather than zeros.
    assert sample(rx, "bottleneck_train_gpu_busy_seconds_total", training_job="job-a", rank="0") is None


class _DoneEvent:
    """A CUDA event the GPU has always passed, 1 ms after the one before."""

    def record(self) -> None:
        pass

    def query(self) -> bool:
        return True

    def elapsed_time(self, end: Any) -> float:
        return 1.0


def test_the_hook_writes_every_key_the_schema_declares_and_no_other(monkeypatch: pytest.MonkeyPatch):
    """The keys are declared once, in wire.schema: a key the receiver would accept that the hook never writes (or
    one the hook writes that the schema does not name) is the two sides drifting apart."""
    # torch.compile's counts go once the script has loaded dynamo: its callback registry, as torch has it (no
    # torch here; tests/test_hook_compile.py runs the real one).
    handler = types.SimpleNamespace(start_callbacks=[], end_callbacks=[])
    monkeypatch.setitem(sys.modules, "torch._dynamo.callback", types.SimpleNamespace(
        callback_handler=handler, on_compile_start=handler.start_callbacks.append,
        on_compile_end=handler.end_callbacks.append))
    session = Session(job="every-key", address="off", samples=1, gpu_event_factory=_DoneEvent)
    session.identity = dataclasses.replace(session.identity, kubernetes={"namespace": "ml", "pod": "p-0"})
    session.loader = {"num_workers": 2, "pin_memory": True, "batch_size": 8, "prefetch_factor": 2,
                      "persistent_workers": False}
    session.skips_counted = True
    session.collectives = CollectiveClock()
    session.collectives.gpu = GpuStopwatch(session.collectives, _DoneEvent)
    session._cuda_memory = lambda: {**dict.fromkeys(GPU_MEMORY, 1.0), **dict.fromkeys(GPU_ALLOCATOR, 0)}
    session.pin_check.pageable = 3  # as the loader's sampled check counts them on a CUDA rank
    session.copies = CopyClock()  # as the Lightning callback sets it
    session.collectives.exposed = ExposedWait()  # (a gloo rank's, in real use: not beside a GPU stopwatch)
    for _ in range(2):
        for phase in (DATA_WAIT, FORWARD, BACKWARD, OPTIMIZER):
            session.mark(phase)
        session.end_step()
    data = session._datagram()
    session.close()

    validate(data)
    payload = json.loads(data)
    assert set(payload) == {*schema.KEYS, *schema.OPTIONAL_KEYS}
    assert list(payload["phase_seconds"]) == [*schema.HOST_PHASES, schema.COLLECTIVE]
    assert set(payload["gpu"]) == {*schema.GPU_KEYS, *schema.GPU_OPTIONAL_KEYS}
    assert list(payload["gpu"]["phase_seconds"]) == list(schema.GPU_PHASES)
    assert list(payload["loader"]) == list(schema.LOADER_KEYS)
    assert list(payload["host_batches"]) == list(schema.HOST_MEMORY)
    # The hook numbers the phases of a step as the schema lists them.
    assert [schema.STEP_PHASES[i] for i in (DATA_WAIT, FORWARD, BACKWARD, OPTIMIZER)] == \
        ["data_wait", "forward", "backward", "optimizer"]


def _set(path: str, value: Any) -> Any:
    def mutate(payload: dict[str, Any]) -> None:
        *parents, key = path.split(".")
        target = payload
        for parent in parents:
            target = target[parent]
        if value is _DELETE:
            del target[key]
        else:
            target[key] = value
    return mutate


_DELETE = object()
_BAD = [
    ("too_large", lambda p: p.update(job="x" * (MAX_DATAGRAM_BYTES + 1))),
    ("bad_version", _set("v", 2)),
    ("bad_version", _set("v", "1")),
    ("bad_schema", _set("steps", _DELETE)),
    ("bad_schema", _set("surprise", 1)),
    ("bad_schema", _set("phase_seconds.forward", "0.1")),
    ("bad_schema", _set("loader.pin_memory", 1)),
    ("bad_schema", _set("step_buckets", [0, 3])),
    ("bad_schema", _set("rank", 1.0)),
    ("bad_number", _set("phase_seconds.data_wait", -0.5)),
    ("bad_number", _set("samples", 1e400)),
    ("bad_number", _set("rank", -1)),
    ("bad_number", _set("steps", 4)),  # buckets no longer add up to steps
    ("bad_label", _set("job", "")),
    ("bad_label", _set("job", "a" * 129)),
    ("bad_label", _set("job", 'bad"quote')),
    ("bad_label", _set("device", "cuda 0\n")),
]


@pytest.mark.parametrize(("reason", "mutate"), _BAD, ids=[f"{r}-{i}" for i, (r, _) in enumerate(_BAD)])
def test_malformed_datagram_is_counted_by_reason_and_dropped(reason, mutate):
    rx = receiver()
    payload = hook_payload()
    mutate(payload)
    assert not rx.handle(json.dumps(payload).encode())
    assert rx.rejected()[reason] == 1 and sum(rx.rejected().values()) == 1
    assert rx.store.ranks() == []


@pytest.mark.parametrize("raw", [b"", b"\xff\xfe", b"[1,2]", b'{"v": 1', b"NaN", b'{"v": NaN}', b"[" * 100000])
def test_garbage_is_rejected_not_json_or_bad_version(raw):
    rx = receiver()
    assert not rx.handle(raw)
    assert sum(rx.rejected().values()) == 1


def test_nan_inside_a_valid_datagram_is_a_bad_number():
    rx = receiver()
    payload = hook_payload()
    text = encode(payload).replace(f'"samples":{payload["samples"]}'.encode(), b'"samples":NaN')
    assert b'"samples":NaN' in text and not rx.handle(text)
    assert rx.rejected()["bad_number"] == 1


def test_older_datagram_of_the_same_process_is_stale():
    rx = receiver()
    newer, older = hook_payload(), hook_payload()
    newer["seq"], older["seq"] = 5, 4
    assert rx.handle(encode(newer))
    assert not rx.handle(encode(older))
    assert rx.rejected()["stale"] == 1
    # A new process for the same job and rank (a restart) starts its own sequence: accepted.
    older["pid"] = newer["pid"] + 1
    assert rx.handle(encode(older))


# -- fuzzing -------------------------------------------------------------------------------------------------
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=40),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=12,
)
_BASE = hook_payload()
_PATHS = [k for k in _BASE if not isinstance(_BASE[k], dict)] + \
    [f"{k}.{sub}" for k in _BASE if isinstance(_BASE[k], dict) for sub in _BASE[k]]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=2 * MAX_DATAGRAM_BYTES))
def test_fuzzed_bytes_never_crash_the_receiver_and_are_rejected(data):
    rx = receiver()
    assert rx.handle(data) is False
    assert sum(rx.rejected().values()) == 1


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from([*_PATHS, "extra", "gpu", "loader"]), json_values | st.just(_DELETE)),
                min_size=1, max_size=4))
def test_fuzzed_datagrams_never_crash_the_receiver_and_every_one_is_counted(mutations):
    rx = receiver()
    payload = json.loads(json.dumps(_BASE))
    for path, new in mutations:
        try:
            _set(path, new)(payload)
        except (KeyError, TypeError):
            continue
    accepted = rx.handle(json.dumps(payload, allow_nan=True).encode())
    rejected = sum(rx.rejected().values())
    assert accepted + rejected == 1
    # Whatever was accepted must still render as a valid scrape with finite, non-negative values.
    registry = CollectorRegistry(auto_describe=False)
    registry.register(rx)
    text = generate_latest(registry).decode()
    for line in text.splitlines():
        if line and not line.startswith("#"):
            number = float(line.rsplit(" ", 1)[1])
            assert math.isfinite(number) and number >= 0, line


# -- bounds and expiry -------------------------------------------------------------------------------------------
def test_a_flood_of_distinct_job_names_keeps_memory_bounded():
    rx = receiver(max_jobs=8)
    template = hook_payload()

    def flood(start: int, count: int) -> None:
        for index in range(start, start + count):
            template["job"] = f"job-{index}"
            rx.handle(encode(template))

    flood(0, 500)
    tracemalloc.start()
    gc.collect()  # measure what survives garbage collection, not garbage awaiting it
    before = tracemalloc.take_snapshot()
    flood(500, 5000)
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    growth = sum(stat.size_diff for stat in after.compare_to(before, "filename"))

    assert rx.store.job_count() == 8
    assert rx.rejected()["too_many_jobs"] == 5500 - 8
    assert sample(rx, "bottleneck_push_jobs") == 8
    assert sample(rx, "bottleneck_push_rejected_total", reason="too_many_jobs") == 5492
    # 5000 refused jobs leave (next to) nothing behind: far less than one stored snapshot per job would take.
    assert growth < 64 * 1024, growth




def test_no_series_of_the_receiver_carries_prometheus_own_job_or_instance_label():
    """Regression: the training job's name rode in ``job``; a scrape with honor_labels: false (the default, and
    prometheus-operator's overrideHonorLabels) renamed it exported_job and every training rule went silent.
    Every series the receiver exposes, with every optional part sent, leaves job and instance to Prometheus
    and names the training job in ``training_job``."""
    payload = full_payload("bert", 3)
    payload["kubernetes"] = {"namespace": "ml", "pod": "bert-worker-3", "container": "trainer"}
    rx = receiver()
    assert rx.handle(encode(payload))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(rx)
    samples = [s for family in registry.collect() for s in family.samples]
    names = {s.name for s in samples}
    assert {"bottleneck_train_kubernetes_info", "bottleneck_train_gpu_busy_seconds_total",
            "bottleneck_train_dataloader_num_workers", "bottleneck_train_step_duration_seconds_bucket"} <= names
    assert [s for s in samples if {"job", "instance"} & set(s.labels)] == []
    per_rank = [s for s in samples if s.name.startswith("bottleneck_train_")]
    assert per_rank and all(s.labels[JOB_LABEL] == "bert" and s.labels["rank"] == "3" for s in per_rank)


def test_default_bounds_keep_one_local_user_to_a_node_sized_scrape():
    """Regression: the defaults (32 jobs x 64 ranks) let one local user add 84k series and a 5.9 MB, 1.2 s
    scrape, while a node runs a handful of ranks. At the defaults now: 8 jobs x 16 ranks, about 71 series a
    rank with every optional part (start-up, long steps, checkpoints, collections by generation,
    torch.compile's counts, the device's memory size, Lightning's batch copies and the setup's seven among
    them)."""
    conf = push_settings.settings(parse([]), {})
    rx = PushReceiver(JobStore(conf["max-jobs"], conf["max-ranks-per-job"], conf["job-expiry"]))
    for job in range(40):
        for rank in range(80):
            rx.handle(encode(full_payload(f"job-{job}", rank)))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(rx)
    text = generate_latest(registry)
    series = [line for line in text.decode().splitlines() if line and not line.startswith("#")]
    assert len(rx.store.ranks()) == 8 * 16
    assert len(series) < 9500 and len(text) < 1_500_000, (len(series), len(text))


def test_ranks_per_job_are_bounded():
    rx = receiver(max_ranks=4)
    payload = hook_payload()
    for rank in range(100):
        payload["rank"] = rank
        rx.handle(encode(payload))
    assert len(rx.store.ranks()) == 4
    assert rx.rejected()["too_many_ranks"] == 96


def test_silent_job_expires_and_its_process_is_forgotten():
    now = [1000.0]
    training = TrainingRegistry()
    rx = receiver(expiry=60.0, clock=lambda: now[0], training=training)
    me = {"peer_pid": os.getpid(), "peer_uid": os.getuid()}
    assert rx.handle(encode(hook_payload(job="old")), **me)
    assert [p.job for p in training.processes()] == ["old"]
    now[0] += 30
    assert rx.handle(encode(hook_payload(job="fresh")), **me)
    now[0] += 31
    rx._expire()
    assert [s.snapshot.job for s in rx.store.ranks()] == ["fresh"]
    assert sample(rx, "bottleneck_train_steps_total", training_job="old", rank="0") is None
    # Both datagrams came from this PID; the registry keeps one entry per PID and it was the expired job's.
    assert training.processes() == []


# -- sockets ------------------------------------------------------------------------------------------------------
@pytest.mark.live
def test_settle_returns_once_every_queued_datagram_is_exposed(tmp_path):
    """``run`` takes its last sample once its command has exited: the command's last datagrams must be in it."""
    rx = receiver()
    path = str(tmp_path / "push.sock")
    rx.bind_unix(path)
    rx.start()
    payload = hook_payload(steps=1)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender:
            for seq in range(1, 201):
                sender.sendto(encode({**payload, "seq": seq, "dropped": seq}), path)
        assert rx.settle(timeout=30)
        assert sample(rx, "bottleneck_push_datagrams_total") == 200 and not any(rx.rejected().values())
        assert sample(rx, "bottleneck_train_hook_dropped_datagrams_total", training_job="job-a", rank="0") == 200
    finally:
        rx.stop()


# -- hung trainers: silent but alive -----------------------------------------------------------------------------
# A trainer that pushes one datagram through the real hook transport, says so, then stays alive and silent (as a
# rank hung in an all-reduce does) until its stdin closes.
_SILENT_TRAINER = """
import json, os, sys
from bottleneck_exporter.hook.transport import Transport
from bottleneck_exporter.wire import schema
from bottleneck_exporter.wire.encode import encode
payload = json.loads(sys.argv[2])
payload["pid"] = os.getpid()
print("sent" if Transport(sys.argv[1]).send(encode(payload)) else "not sent", flush=True)
sys.stdin.read()
"""


def silent_trainer(address: str, job: str, steps: int = 3) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", _SILENT_TRAINER, address,
                             json.dumps(hook_payload(job=job, steps=steps))],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            cwd=Path(__file__).resolve().parent.parent)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "sent"
    return proc


def ranks_of(rx: PushReceiver) -> set[str]:
    return {state.snapshot.job for state in rx.store.ranks()}


@pytest.mark.live
def test_hung_trainer_was_expired_while_alive_and_the_stall_alert_resolved(tmp_path):
    """Regression: the hook sends only at step ends, so a hung rank fell silent and was dropped after
    --push.job-expiry, taking BottleneckTrainingStalled with it. Now it stays until its process is gone."""
    training = TrainingRegistry()
    rx = PushReceiver(JobStore(8, 4, expiry=0.5, processes=ProcessTable("/proc")), training)
    path = str(tmp_path / "push.sock")
    rx.bind_unix(path)
    rx.start()
    hung = finished = None
    try:
        hung = silent_trainer(f"unix://{path}", "hung")
        wait_until(lambda: "hung" in ranks_of(rx), 20, "the hung trainer's datagram")
        finished = silent_trainer(f"unix://{path}", "finished")
        wait_until(lambda: "finished" in ranks_of(rx), 20, "the finished trainer's datagram")
        finished.communicate("")  # exits and is reaped
        # The finished rank goes once it has been silent past the expiry; the hung one has been silent longer
        # (it sent first), so the same expiry pass saw it too, and kept it because its process runs.
        wait_until(lambda: "finished" not in ranks_of(rx), 20, "the finished trainer to expire")
        assert ranks_of(rx) == {"hung"}
        assert sample(rx, "bottleneck_train_steps_total", training_job="hung", rank="0") == 3
        assert sample(rx, "bottleneck_train_last_step_timestamp_seconds", training_job="hung", rank="0") is not None
        assert [p.pid for p in training.processes()] == [hung.pid]
        # Killed and not yet reaped (a zombie, as under a parent that hangs too): gone, so the rank expires.
        hung.kill()
        wait_until(lambda: not rx.store.ranks(), 20, "the killed trainer to expire")
        assert sample(rx, "bottleneck_train_steps_total", training_job="hung", rank="0") is None
        assert training.processes() == []
    finally:
        rx.stop()
        for proc in (hung, finished):
            if proc is not None:
                proc.kill()
                proc.communicate()


@pytest.mark.live
def test_exporter_keeps_a_hung_trainer_past_job_expiry(start_exporter, tmp_path):
    sock = tmp_path / "push.sock"
    exporter = start_exporter(["--collector.disable-defaults", f"--push.socket={sock}", "--push.job-expiry=0.5s"])
    procs = []
    try:
        procs.append(silent_trainer(f"unix://{sock}", "hung"))
        wait_until(lambda: 'training_job="hung"' in exporter.scrape(), 20, "the hung trainer in a scrape")
        procs.append(silent_trainer(f"unix://{sock}", "finished"))
        wait_until(lambda: 'training_job="finished"' in exporter.scrape(), 20, "the finished trainer in a scrape")
        procs[1].communicate("")
        wait_until(lambda: 'training_job="finished"' not in exporter.scrape(), 20, "the finished trainer to expire")
        assert 'bottleneck_train_steps_total{rank="0",training_job="hung"} 3.0' in exporter.scrape()
        procs[0].communicate("")
        wait_until(lambda: 'training_job="hung"' not in exporter.scrape(), 20,
                   "the hung trainer to expire once it exited")
    finally:
        for proc in procs:
            proc.kill()
            proc.communicate()


# -- who may push what ------------------------------------------------------------------------------------------
def steps_of(rx: PushReceiver, job: str) -> float | None:
    return sample(rx, "bottleneck_train_steps_total", training_job=job, rank="0")


@pytest.mark.live
def test_another_sender_cannot_reset_a_rank_it_does_not_own(tmp_path):
    """Regression: a datagram from any other writer of the socket replaced the rank (steps_total 128 → 1, a
    counter reset Prometheus believed). A rank belongs to its sender until that process exits."""
    rx = PushReceiver(JobStore(8, 4, expiry=600.0, processes=ProcessTable("/proc")), TrainingRegistry())
    path = str(tmp_path / "push.sock")
    rx.bind_unix(path)
    rx.start()
    procs: list[subprocess.Popen[str]] = []
    try:
        procs.append(silent_trainer(f"unix://{path}", "resnet", steps=128))
        wait_until(lambda: steps_of(rx, "resnet") == 128, 20, "the owner's datagram")
        procs.append(silent_trainer(f"unix://{path}", "resnet", steps=1))
        wait_until(lambda: rx.rejected()["not_owner"] == 1, 20, "the other sender's datagram to be refused")
        assert steps_of(rx, "resnet") == 128
        assert sample(rx, "bottleneck_push_rejected_total", reason="not_owner") == 1
        procs[0].communicate("")  # the owner exits: a restarted trainer takes its rank over
        procs.append(silent_trainer(f"unix://{path}", "resnet", steps=2))
        wait_until(lambda: steps_of(rx, "resnet") == 2, 20, "the restarted trainer's datagram")
    finally:
        rx.stop()
        for proc in procs:
            proc.kill()
            proc.communicate()


def test_a_udp_datagram_cannot_touch_a_rank_owned_over_the_unix_socket():
    rx = PushReceiver(JobStore(8, 4, expiry=600.0, processes=ProcessTable("/proc")))
    payload = hook_payload(steps=5)
    assert rx.handle(encode(payload), peer_pid=os.getpid(), peer_uid=os.getuid())
    payload["seq"] += 1
    assert not rx.handle(encode(hook_payload(steps=1)))
    assert rx.rejected()["not_owner"] == 1 and steps_of(rx, "job-a") == 5


def test_without_liveness_only_the_owners_user_takes_a_rank_over():
    # Where /proc cannot tell whether the owner runs (another PID namespace), a restart by the same user is
    # let in; another user waits for the rank to expire.
    rx = receiver()
    assert rx.handle(encode(hook_payload(steps=5)), peer_pid=4242, peer_uid=1000)
    assert not rx.handle(encode(hook_payload(steps=1)), peer_pid=4343, peer_uid=1001)
    assert rx.rejected()["not_owner"] == 1 and steps_of(rx, "job-a") == 5
    assert rx.handle(encode(hook_payload(steps=2)), peer_pid=4343, peer_uid=1000)
    assert steps_of(rx, "job-a") == 2


def test_a_sender_the_kernel_cannot_name_is_held_to_its_uid_and_attributed_nothing():
    # PID 0 from SCM_CREDENTIALS: the trainer lives in a PID namespace the exporter cannot see into.
    training = TrainingRegistry()
    rx = receiver(training=training)
    assert rx.handle(encode(hook_payload(steps=5)), peer_pid=None, peer_uid=1000)
    assert not rx.handle(encode(hook_payload(steps=1)), peer_pid=None, peer_uid=1001)
    assert not rx.handle(encode(hook_payload(steps=1)))  # UDP
    assert rx.rejected()["not_owner"] == 2 and steps_of(rx, "job-a") == 5
    assert training.processes() == [], "the PID in the datagram is only a claim"


def test_pids_a_udp_datagram_claims_are_not_attributed_to_it():
    """Regression: any writer could claim PID 1 as its trainer or workers, and the exporter (root) published
    that process's /proc under the forger's job. Without kernel credentials nothing is attributed."""
    training = TrainingRegistry()
    rx = receiver(training=training)
    payload = hook_payload()
    payload["pid"], payload["loader"]["worker_pids"] = 1, [1]
    assert rx.handle(encode(payload))
    assert steps_of(rx, "job-a") == 3 and training.processes() == []


@pytest.mark.live
def test_worker_pids_that_do_not_descend_from_the_sender_are_ignored():
    """Regression: a datagram's worker PIDs were taken as they came, taking other trainers' workers (or PID 1)
    away from their owner. Only the sender's descendants count."""
    training = TrainingRegistry()
    rx = PushReceiver(JobStore(8, 4, expiry=600.0, processes=ProcessTable("/proc")), training)
    worker = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        payload = hook_payload()
        payload["pid"] = os.getpid()
        # PID 1, this process's parent, and a PID beyond pid_max (no such process).
        payload["loader"]["worker_pids"] = [worker.pid, 1, os.getppid(), (1 << 22) + 1]
        assert rx.handle(encode(payload), peer_pid=os.getpid(), peer_uid=os.getuid())
        assert training.processes()[0].worker_pids == (worker.pid,)
    finally:
        worker.kill()
        worker.communicate()


def fake_procfs(root: Path, self_pid: int, processes: dict[int, tuple[str, int]]) -> str:
    """A /proc tree with ``self`` and ``<pid>/stat`` (state, start time) per process."""
    root.mkdir(exist_ok=True)
    if not (root / "self").is_symlink():
        (root / "self").symlink_to(str(self_pid))
    for pid, (state, starttime) in processes.items():
        (root / str(pid)).mkdir(exist_ok=True)
        fields = ["1"] * 50
        fields[0], fields[19] = state, str(starttime)  # state, starttime (fields 3 and 22 of stat)
        (root / str(pid) / "stat").write_text(f"{pid} (python3 (train)) {' '.join(fields)}\n")
    return str(root)


@pytest.mark.parametrize(("successor", "after"), [
    ({4242: ("S", 900)}, "a recycled PID: a new process started on the trainer's PID"),
    ({4242: ("Z", 100)}, "a zombie"),
    ({}, "the PID gone"),
], ids=["recycled_pid", "zombie", "pid_gone"])
def test_silent_rank_is_kept_only_while_the_same_process_runs(tmp_path, successor, after):
    now = [1000.0]
    procfs = fake_procfs(tmp_path / "proc", os.getpid(), {4242: ("S", 100)})
    rx = PushReceiver(JobStore(8, 4, expiry=60.0, clock=lambda: now[0], processes=ProcessTable(procfs)))
    payload = hook_payload()
    payload["pid"] = 4242
    assert rx.handle(encode(payload), peer_pid=4242)
    assert rx.store.ranks()[0].process is not None
    now[0] += 3600
    rx._expire()
    assert len(rx.store.ranks()) == 1, "silent for an hour, but its process runs"
    if successor:
        fake_procfs(tmp_path / "proc", os.getpid(), successor)
    else:
        (tmp_path / "proc" / "4242" / "stat").unlink()
    rx._expire()
    assert rx.store.ranks() == [], after


@pytest.mark.parametrize("case", ["udp_claims_a_live_pid", "procfs_of_another_pid_namespace",
                                  "sender_started_after_the_datagram_arrived"])
def test_silent_rank_expires_when_liveness_cannot_be_told(tmp_path, case):
    """A PID only claimed by the datagram (UDP: maybe from another PID namespace), a procfs that does not show
    this exporter's PID namespace, or a PID already reused when its datagram is read: expiry by silence."""
    now = [1000.0]
    procfs = fake_procfs(tmp_path / "proc", 1 if case == "procfs_of_another_pid_namespace" else os.getpid(),
                         {4242: ("S", 10**12 if case.startswith("sender_started") else 100)})
    rx = PushReceiver(JobStore(8, 4, expiry=60.0, clock=lambda: now[0], processes=ProcessTable(procfs)))
    payload = hook_payload()
    payload["pid"] = 4242
    assert rx.handle(encode(payload), peer_pid=None if case.startswith("udp") else 4242)
    assert rx.store.ranks()[0].process is None
    now[0] += 59
    rx._expire()
    assert len(rx.store.ranks()) == 1
    now[0] += 2
    rx._expire()
    assert rx.store.ranks() == []


@pytest.mark.live
def test_live_silent_ranks_still_count_against_the_job_bound(tmp_path):
    rx = PushReceiver(JobStore(max_jobs=1, max_ranks=4, expiry=0.0, processes=ProcessTable("/proc")))
    path = str(tmp_path / "push.sock")
    rx.bind_unix(path)
    rx.start()
    try:
        assert Transport(f"unix://{path}").send(encode(hook_payload(job="silent")))
        wait_until(lambda: rx.store.ranks(), 20, "the datagram")
        rx._expire()  # silent past an expiry of 0 s, but this process runs: kept
        assert Transport(f"unix://{path}").send(encode(hook_payload(job="other")))
        wait_until(lambda: rx.rejected()["too_many_jobs"] == 1, 20, "the second job to be refused")
        assert ranks_of(rx) == {"silent"}
    finally:
        rx.stop()


def test_unix_socket_has_tight_permissions_and_kernel_reported_sender(tmp_path):
    training = TrainingRegistry()
    rx = receiver(training=training)
    path = str(tmp_path / "push.sock")
    rx.bind_unix(path)
    rx.start()
    try:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o660
        assert Transport(f"unix://{path}").send(encode(hook_payload(job="via-socket")))
        wait_until(lambda: rx.store.ranks(), 20, "the datagram")
        state = rx.store.ranks()[0]
        assert state.pid == os.getpid() and state.same_pid_namespace
        assert training.processes()[0].pid == os.getpid()
    finally:
        rx.stop()
    assert not os.path.exists(path)


def test_loopback_udp_receives(tmp_path):
    rx = receiver()
    rx.bind_udp("127.0.0.1", 0)
    rx.start()
    try:
        host, port = rx.udp_address  # type: ignore[misc]
        assert Transport(f"udp://{host}:{port}").send(encode(hook_payload(job="via-udp")))
        wait_until(lambda: rx.store.ranks(), 20, "the UDP datagram")
    finally:
        rx.stop()


def test_stale_socket_file_is_replaced_but_live_socket_and_other_files_are_not(tmp_path):
    path = str(tmp_path / "push.sock")
    leftover = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    leftover.bind(path)
    leftover.close()  # the file stays, like after a SIGKILLed exporter
    rx = receiver()
    rx.bind_unix(path)
    with pytest.raises(OSError, match="in use"):
        receiver().bind_unix(path)
    rx.stop()
    Path(path).write_text("not a socket")
    with pytest.raises(FileExistsError):
        receiver().bind_unix(path)
    assert Path(path).read_text() == "not a socket"


def test_oversized_datagram_on_the_socket_is_too_large(tmp_path):
    rx = receiver()
    path = str(tmp_path / "push.sock")
    rx.bind_unix(path)
    rx.start()
    try:
        sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sender.sendto(b"{" + b" " * (4 * MAX_DATAGRAM_BYTES) + b"}", path)
        sender.close()
        wait_until(lambda: rx.rejected()["too_large"] == 1, 20, "the rejection")
    finally:
        rx.stop()


# -- flags and config -----------------------------------------------------------------------------------------------
def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    push_settings.add_arguments(parser)
    return parser.parse_args(argv)


def test_settings_precedence_default_file_flag():
    conf = push_settings.settings(parse([]), {})
    assert (conf["socket"], conf["socket-mode"], conf["max-jobs"], conf["job-expiry"]) == \
        ("/run/bottleneck-exporter/push.sock", 0o660, 8, 600.0)
    assert conf["listen-udp"] is None and not conf["disable"] and not conf["socket_given"]
    from_file = {"push": {"max-jobs": 5, "job-expiry": "90s", "socket-mode": 0o600, "listen-udp": "[::1]:9999"}}
    conf = push_settings.settings(parse(["--push.max-jobs=7"]), from_file)
    assert (conf["max-jobs"], conf["job-expiry"], conf["socket-mode"], conf["listen-udp"]) == \
        (7, 90.0, 0o600, ("::1", 9999))


@pytest.mark.parametrize(("argv", "file_config", "message"), [
    (["--push.max-jobs=0"], {}, "--push.max-jobs: expected a positive whole number"),
    (["--push.job-expiry=10x"], {}, "--push.job-expiry: expected a duration"),
    (["--push.socket-mode=999"], {}, "--push.socket-mode: expected octal permission bits"),
    (["--push.socket=relative.sock"], {}, "--push.socket: expected an absolute path"),
    (["--push.listen-udp=nohost"], {}, "--push.listen-udp: expected HOST:PORT"),
    (["--push.listen-udp=0.0.0.0:9999"], {}, "--push.listen-udp: 0.0.0.0 is not a loopback address"),
    ([], {"push": {"bogus": 1}}, "push.bogus: unknown setting"),
    ([], {"push": {"max-ranks-per-job": "many"}}, "push.max-ranks-per-job: expected a whole number"),
    ([], {"push": ["socket"]}, "push: must be a mapping"),
])
def test_bad_push_settings_name_the_key(argv, file_config, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[")):
        push_settings.settings(parse(argv), file_config)


def test_non_loopback_udp_is_allowed_only_when_forced():
    conf = push_settings.settings(parse(["--push.listen-udp=0.0.0.0:9999", "--push.allow-non-loopback"]), {})
    assert conf["listen-udp"] == ("0.0.0.0", 9999)


def test_default_socket_directory_unusable_falls_back_with_one_log_line(tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    fallback = tmp_path / "fallback" / "push.sock"
    monkeypatch.setattr(push_settings, "socket_candidates", lambda: [str(blocker / "push.sock"), str(fallback)])
    with caplog.at_level(logging.INFO, logger="bottleneck_exporter.push"):
        rx = push_settings.build_receiver(parse([]), {}, TrainingRegistry())
    assert rx is not None and rx.unix_path == str(fallback)
    assert stat.S_IMODE(os.stat(fallback.parent).st_mode) == 0o700
    rx.stop()
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(lines) == 1 and str(fallback) in lines[0], lines


def test_no_usable_socket_means_no_receiver_and_one_error(tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    monkeypatch.setattr(push_settings, "socket_candidates", lambda: [str(blocker / "a.sock"), str(blocker / "b.sock")])
    with caplog.at_level(logging.INFO, logger="bottleneck_exporter.push"):
        assert push_settings.build_receiver(parse([]), {}, TrainingRegistry()) is None
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "running without the Unix push receiver" in errors[0].getMessage()


def test_fallback_directory_open_to_others_is_refused(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)  # what another user could have pre-created in /tmp
    monkeypatch.setattr(push_settings, "socket_candidates",
                        lambda: [str(blocker / "push.sock"), str(shared / "push.sock")])
    assert push_settings.build_receiver(parse([]), {}, TrainingRegistry()) is None
    assert not (shared / "push.sock").exists()


def test_disable_flag_means_no_receiver():
    assert push_settings.build_receiver(parse(["--push.disable"]), {}, TrainingRegistry()) is None


# -- the real exporter process ---------------------------------------------------------------------------------------
@pytest.mark.live
def test_exporter_serves_pushed_steps_and_refuses_bad_flags(start_exporter, tmp_path):
    sock = tmp_path / "push.sock"
    exporter = start_exporter(["--collector.disable-defaults", f"--push.socket={sock}"])
    payload = hook_payload(job="e2e", steps=4)
    payload["gpu"] = {"phase_seconds": {"forward": 0.1, "backward": 0.2, "optimizer": 0.05}, "busy_seconds": 0.35,
                      "idle_seconds": 0.5, "memory_allocated_bytes": 1e9, "memory_reserved_bytes": 2e9,
                      "memory_peak_bytes": 1.5e9}
    assert Transport(f"unix://{sock}").send(encode(payload))
    assert Transport(f"unix://{sock}").send(b"garbage")

    def scraped() -> str:
        text = exporter.scrape()
        return text if 'bottleneck_train_steps_total{rank="0",training_job="e2e"} 4.0' in text else ""

    wait_until(scraped, 20, "the pushed steps in a scrape")
    text = exporter.scrape()
    assert 'bottleneck_push_rejected_total{reason="not_json"} 1.0' in text
    assert 'bottleneck_train_cuda_memory_peak_bytes{rank="0",training_job="e2e"} 1.5e+09' in text
    checked = subprocess.run([require_tool("promtool"), "check", "metrics"], input=text, capture_output=True,
                             text=True)
    assert checked.returncode == 0 and not checked.stdout.strip() and not checked.stderr.strip(), \
        checked.stdout + checked.stderr

    refused = subprocess.run([sys.executable, "-m", "bottleneck_exporter", "--web.listen-address=127.0.0.1:0",
                              "--push.listen-udp=192.0.2.1:9999"], capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2
    assert "--push.listen-udp: 192.0.2.1 is not a loopback address" in refused.stderr


def test_step_buckets_match_between_hook_and_receiver():
    payload = hook_payload(steps=5)
    assert len(payload["step_buckets"]) == len(STEP_BUCKETS) + 1
    assert validate(encode(payload)).steps == 5


def test_hook_package_imports_and_runs_without_torch_lightning_or_transformers(tmp_path):
    code = (
        "import sys\n"
        "for name in ('torch', 'pytorch_lightning', 'lightning', 'transformers'):\n"
        "    sys.modules[name] = None  # any import of them now raises ImportError\n"
        "import bottleneck_exporter.hook, bottleneck_exporter.push\n"
        "from bottleneck_exporter.hook import instrument\n"
        f"loader = instrument([[1, 2], [3, 4]], address='unix://{tmp_path}/absent.sock')\n"
        "assert [b for b in loader] == [[1, 2], [3, 4]]\n"
        "assert loader.bottleneck_session.clock.steps == 2\n"
        "assert not any(m in sys.modules and sys.modules[m] for m in ('torch', 'prometheus_client', 'yaml'))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parent.parent)
    assert done.returncode == 0, done.stderr
