"""The in-process hook with real PyTorch CPU training loops, against the real exporter where it matters."""

from __future__ import annotations

import copy
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from prometheus_client.parser import text_string_to_metric_families
from torch.utils.data import DataLoader, TensorDataset

from bottleneck_exporter.heuristics.parameters import PARAMETERS
from bottleneck_exporter.hook import instrument
from bottleneck_exporter.hook.forward import InPlaceOf
from bottleneck_exporter.hook.session import Session
from bottleneck_exporter.hook.timing import BACKWARD, FORWARD, OPTIMIZER, STEP_END, GpuTimer
from bottleneck_exporter.hook.transport import Transport
from bottleneck_exporter.wire.encode import encode
from bottleneck_exporter.wire.schema import validate
from tests.conftest import wait_until
from tests.datagrams import exported, received

pytestmark = pytest.mark.torch

ROOT = Path(__file__).resolve().parent.parent
TRAINER = ROOT / "tests" / "hook_trainer.py"


# -- helpers ------------------------------------------------------------------------------------------------
def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return out


def value(scrape: dict[Any, float], name: str, **labels: str) -> float | None:
    """The one sample of ``name`` whose labels include ``labels``; None if absent."""
    found = [v for (n, lbls), v in scrape.items() if n == name and set(labels.items()) <= set(lbls)]
    assert len(found) <= 1, f"{name}{labels} matched {len(found)} series"
    return found[0] if found else None


class Trainer:
    def __init__(self, tmp: Path, sock: Path, job: str, dataset: str, workers: int) -> None:
        self.stop_file = tmp / f"{job}.stop"
        env = {**os.environ, "BOTTLENECK_PUSH_ADDRESS": f"unix://{sock}", "BOTTLENECK_JOB": job,
               "BOTTLENECK_PUSH_INTERVAL": "0.2", "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(
            [sys.executable, str(TRAINER), "--dataset", dataset, "--workers", str(workers),
             "--stop-file", str(self.stop_file)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def finish(self) -> tuple[int, str, str]:
        self.stop_file.touch()
        try:
            out, err = self.proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
        return self.proc.returncode, out, err


@pytest.fixture
def trainers(tmp_path: Path) -> Iterator[list[Trainer]]:
    started: list[Trainer] = []
    yield started
    for trainer in started:
        if trainer.proc.poll() is None:
            trainer.finish()


def steps_of(exporter: Any, job: str) -> Callable[[], dict[Any, float] | None]:
    def check() -> dict[Any, float] | None:
        scrape = samples(exporter.scrape())
        steps = value(scrape, "bottleneck_train_steps_total", training_job=job)
        return scrape if steps else None
    return check


def window(exporter: Any, job: str, more_steps: int) -> tuple[dict[Any, float], dict[Any, float]]:
    """Two scrapes ``more_steps`` optimizer steps apart, after the run has warmed up (like rate() in rules)."""
    first = wait_until(steps_of(exporter, job), 60, f"{job} to report steps")
    start = value(first, "bottleneck_train_steps_total", training_job=job) or 0

    def later() -> dict[Any, float] | None:
        scrape = samples(exporter.scrape())
        steps = value(scrape, "bottleneck_train_steps_total", training_job=job) or 0
        return scrape if steps >= start + more_steps else None

    return first, wait_until(later, 60, f"{job} to report {more_steps} more steps")


def share(first: dict[Any, float], second: dict[Any, float], job: str, phase: str) -> float:
    def delta(p: str) -> float:
        name = "bottleneck_train_phase_seconds_total"
        return ((value(second, name, training_job=job, phase=p) or 0)
                - (value(first, name, training_job=job, phase=p) or 0))
    return delta(phase) / delta("step")


# -- against the real exporter --------------------------------------------------------------------------------
@pytest.mark.live
def test_slow_dataset_without_workers_is_reported_input_bound(start_exporter, trainers, tmp_path):
    sock = tmp_path / "push.sock"
    exporter = start_exporter(["--collector.disable-defaults", "--collector.training", f"--push.socket={sock}"])
    trainers.append(Trainer(tmp_path, sock, "slowjob", "slow", workers=0))
    first, second = window(exporter, "slowjob", more_steps=15)

    assert share(first, second, "slowjob", "data_wait") > 0.8
    assert value(second, "bottleneck_train_dataloader_num_workers", training_job="slowjob") == 0
    # The trainer's main thread is the loader: the training collector (told about the trainer by the receiver)
    # sees the CPU go to the main thread, busy rather than blocked, and finds no workers. "Busy" is judged
    # loosely (10% of a core) because this machine is shared; a loader that sleeps would show ~0.
    info = [dict(lbls) for (n, lbls), _ in second.items()
            if n == "bottleneck_training_process_info" and ("training_job", "slowjob") in lbls]
    assert len(info) == 1 and info[0]["discovered_by"] == "push", info
    process = info[0]["process"]

    def cpu(scrape: dict[Any, float], role: str | None = None) -> float:
        return sum(v for (n, lbls), v in scrape.items() if n == "bottleneck_training_cpu_seconds_total"
                   and ("process", process) in lbls and (role is None or ("role", role) in lbls))

    main_cpu = cpu(second, "main") - cpu(first, "main")
    step_seconds = sum(value(s, "bottleneck_train_phase_seconds_total", training_job="slowjob", phase="step") or 0
                       for s in (second,)) - (value(first, "bottleneck_train_phase_seconds_total",
                                                    training_job="slowjob", phase="step") or 0)
    assert main_cpu > 0.9 * (cpu(second) - cpu(first))
    assert main_cpu > 0.1 * step_seconds
    assert not value(second, "bottleneck_training_dataloader_workers_found", process=process)
    rc, _, err = trainers[0].finish()
    assert rc == 0, err


@pytest.mark.live
def test_fast_dataset_with_two_workers_is_not_input_bound(start_exporter, trainers, tmp_path):
    sock = tmp_path / "push.sock"
    exporter = start_exporter(["--collector.disable-defaults", "--collector.training", f"--push.socket={sock}"])
    trainers.append(Trainer(tmp_path, sock, "fastjob", "fast", workers=2))
    first, second = window(exporter, "fastjob", more_steps=20)

    # Below the verdict's threshold: the share itself moves with the machine's load (two workers on two busy
    # cores fall behind now and then), the verdict must not.
    assert share(first, second, "fastjob", "data_wait") < float(PARAMETERS["data_wait_ratio"].default)
    assert value(second, "bottleneck_train_dataloader_num_workers", training_job="fastjob") == 2
    assert value(second, "bottleneck_train_dataloader_persistent_workers", training_job="fastjob") == 1
    info = [dict(lbls) for (n, lbls), _ in second.items()
            if n == "bottleneck_training_process_info" and ("training_job", "fastjob") in lbls]
    assert len(info) == 1, info
    assert value(second, "bottleneck_training_dataloader_workers_found", process=info[0]["process"]) == 2
    rc, _, err = trainers[0].finish()
    assert rc == 0, err


@pytest.mark.live
def test_exporter_restarted_mid_run_metrics_resume_without_touching_training(start_exporter, trainers, tmp_path):
    sock = tmp_path / "push.sock"
    args = ["--collector.disable-defaults", f"--push.socket={sock}"]
    first_exporter = start_exporter(args)
    trainers.append(Trainer(tmp_path, sock, "restartjob", "fast", workers=0))
    before = wait_until(steps_of(first_exporter, "restartjob"), 60, "steps before the restart")
    steps_before = value(before, "bottleneck_train_steps_total", training_job="restartjob")
    first_exporter.proc.terminate()  # SIGTERM, as systemd would on a restart (the fixture collects its output)
    first_exporter.proc.wait(timeout=10)
    assert not sock.exists()
    time.sleep(1.0)  # the trainer keeps stepping with nobody listening: its datagrams are dropped
    assert trainers[0].proc.poll() is None

    second_exporter = start_exporter(args)

    def resumed() -> dict[Any, float] | None:
        scrape = samples(second_exporter.scrape())
        steps = value(scrape, "bottleneck_train_steps_total", training_job="restartjob") or 0
        return scrape if steps > steps_before else None

    after = wait_until(resumed, 60, "metrics to resume after the restart")
    # Totals are cumulative in the trainer, so nothing measured during the outage is lost; the datagrams
    # that found no exporter are counted.
    assert (value(after, "bottleneck_train_hook_dropped_datagrams_total", training_job="restartjob") or 0) > 0
    rc, out, err = trainers[0].finish()
    assert rc == 0 and "trained" in out, err
    assert "Traceback" not in err


# -- in-process ---------------------------------------------------------------------------------------------
def seeded_run(wrap: Callable[[DataLoader, torch.nn.Module, torch.optim.Optimizer], Any]) -> list[torch.Tensor]:
    torch.manual_seed(1234)
    data = TensorDataset(torch.randn(96, 12), torch.randn(96, 1))
    model = torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.ReLU(), torch.nn.Dropout(0.2),
                                torch.nn.Linear(16, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    loader = DataLoader(data, batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(7))
    loader = wrap(loader, model, optimizer)
    for _ in range(3):
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
    return [p.detach().clone() for p in model.parameters()]


def test_no_exporter_running_gives_bit_identical_results(tmp_path):
    absent = f"unix://{tmp_path}/nobody-listens.sock"
    sessions: list[Session] = []

    def wrap(loader: DataLoader, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> Any:
        wrapped = instrument(loader, model=model, optimizer=optimizer, address=absent, interval=0.05)
        sessions.append(wrapped.bottleneck_session)
        return wrapped

    plain = seeded_run(lambda loader, model, optimizer: loader)
    hooked = seeded_run(wrap)
    assert all(torch.equal(a, b) for a, b in zip(plain, hooked, strict=True))
    session = sessions[0]
    assert session.active and session.errors == 0
    assert session.clock.steps == 36
    session.close()  # the last datagram, on this thread: nobody listens, so it is dropped and counted
    assert session.transport.dropped >= 1 and session.transport.sent == 0


def test_repeated_internal_errors_switch_the_hook_off_once_and_training_is_unaffected(tmp_path, caplog):
    def broken_sample_count(batch: Any) -> int:
        raise RuntimeError("bug in a user-supplied sample counter")

    sessions: list[Session] = []

    def wrap(loader: DataLoader, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> Any:
        wrapped = instrument(loader, model=model, optimizer=optimizer, samples=broken_sample_count,
                             address=f"unix://{tmp_path}/x.sock")
        sessions.append(wrapped.bottleneck_session)
        return wrapped

    plain = seeded_run(lambda loader, model, optimizer: loader)
    with caplog.at_level(logging.WARNING, logger="bottleneck_exporter.hook"):
        hooked = seeded_run(wrap)
    assert all(torch.equal(a, b) for a, b in zip(plain, hooked, strict=True))
    assert not sessions[0].active and sessions[0].errors == 10
    switched_off = [r for r in caplog.records if "switching the hook off" in r.getMessage()]
    assert len(switched_off) == 1


def test_datagrams_carry_phases_settings_and_samples(tmp_path):
    rx = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    rx.bind(str(tmp_path / "rx.sock"))
    rx.setblocking(False)
    sessions: list[Session] = []

    def wrap(loader: DataLoader, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> Any:
        wrapped = instrument(loader, model=model, optimizer=optimizer, address=f"unix://{tmp_path}/rx.sock",
                             job="unit/test", interval=0.05)
        sessions.append(wrapped.bottleneck_session)
        return wrapped

    seeded_run(wrap)
    sessions[0].close()  # sends the last datagram
    received = []
    while True:
        try:
            received.append(validate(rx.recv(65536)))
        except BlockingIOError:
            break
    rx.close()
    # The datagrams of the step ends 50 ms apart, and the last one; every one passes the receiver's schema.
    assert len(received) >= 1
    last = received[-1]
    assert (last.job, last.steps, last.samples) == ("unit/test", 36, 96 * 3)
    assert [s.seq for s in received] == sorted(s.seq for s in received)
    assert all(last.phase_seconds[p] > 0 for p in ("data_wait", "forward", "backward", "optimizer", "step"))
    assert sum(last.phase_seconds[p] for p in ("data_wait", "forward", "backward", "optimizer")) \
        <= last.phase_seconds["step"]
    assert last.loader is not None
    assert (last.loader.num_workers, last.loader.batch_size, last.loader.prefetch_factor) == (0, 8, None)


def test_gradient_accumulation_counts_one_step_per_optimizer_step(tmp_path):
    session = Session(address="off")
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = instrument(DataLoader(TensorDataset(torch.randn(40, 4), torch.randn(40, 1)), batch_size=5),
                        model=model, optimizer=optimizer, session=session)
    for index, (x, y) in enumerate(loader):
        torch.nn.functional.mse_loss(model(x), y).backward()
        if index % 4 == 3:
            optimizer.step()
            optimizer.zero_grad()
    assert session.clock.steps == 2
    assert session.clock.samples == 40
    session.close()


def test_a_model_that_is_no_torch_module_is_timed_all_the_same() -> None:
    """Regression: the wrapper's DataParallel part read the torch module's ``_replicate_for_data_parallel``, so
    instrumenting a model-like object of another kind (a wrapper with a forward, as benchmarks/hook_overhead.py's
    stand-in) failed, and the hook ran without its forward phase."""

    class Forwarder:
        def __init__(self) -> None:
            self.inner = torch.nn.Linear(4, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.inner(x)

        def __call__(self, x: torch.Tensor) -> torch.Tensor:
            return self.forward(x)

    session = Session(address="off")
    model = Forwarder()
    optimizer = torch.optim.SGD(model.inner.parameters(), lr=0.1)
    loader = instrument(DataLoader(TensorDataset(torch.randn(20, 4), torch.randn(20, 1)), batch_size=5),
                        model=model, optimizer=optimizer, session=session)
    for x, y in loader:
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
    totals = session.clock.totals()
    session.close()
    assert session.clock.steps == 4 and session.errors == 0
    assert totals.phase_seconds[FORWARD] > 0


def test_forked_child_never_sends(tmp_path):
    path = str(tmp_path / "rx.sock")
    rx = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    rx.bind(path)
    transport = Transport(f"unix://{path}")
    assert transport.send(b"parent")
    pid = os.fork()
    if pid == 0:  # the child: what a DataLoader worker would be
        os._exit(0 if transport.send(b"child") is False else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert transport.send(b"parent again")
    rx.setblocking(False)
    got = []
    while True:
        try:
            got.append(rx.recv(100))
        except BlockingIOError:
            break
    assert got == [b"parent", b"parent again"]


# -- GPU timing without a GPU: a fake CUDA event ---------------------------------------------------------------
class FakeCudaEvent:
    """Stands in for torch.cuda.Event on a GPU that runs ``lag`` marks behind the host (in order, like a
    stream): query() is True only once the host has recorded ``lag`` more events. Waiting on it is a bug."""

    recorded = 0  # events recorded so far, all instances: the host's position in the stream
    created: list[FakeCudaEvent] = []

    def __init__(self, lag: int) -> None:
        self.lag = lag
        self.position: int | None = None
        FakeCudaEvent.created.append(self)

    def record(self) -> None:
        FakeCudaEvent.recorded += 1
        self.position = FakeCudaEvent.recorded

    def query(self) -> bool:
        return self.position is not None and FakeCudaEvent.recorded - self.position >= self.lag

    def elapsed_time(self, end: FakeCudaEvent) -> float:
        if not (self.query() and end.query()):
            raise AssertionError("elapsed_time on an event the GPU has not reached: that would wait")
        assert self.position is not None and end.position is not None
        return 0.5 * (end.position - self.position)  # the stream advances 0.5 ms between marks

    def synchronize(self) -> None:
        raise AssertionError("synchronize() called: the hook must never wait on the device")

    def wait(self, stream: Any = None) -> None:
        raise AssertionError("wait() called")


def test_gpu_harvest_never_waits_on_an_unfinished_event():
    timer = GpuTimer(lambda: FakeCudaEvent(lag=10**9), max_pending=8)
    for _ in range(50):
        for phase in (FORWARD, BACKWARD, OPTIMIZER):
            timer.mark(phase)
        timer.end_step()
    # Nothing finished, so nothing was read; memory stays bounded by giving up the oldest steps.
    assert timer.harvested_steps == 0 and timer.busy_seconds == 0
    assert timer.pending_steps() <= 8 and timer.abandoned_steps == 42


def test_gpu_phases_are_harvested_steps_later_in_a_real_training_loop():
    FakeCudaEvent.created.clear()
    session = Session(address="off", gpu_event_factory=lambda: FakeCudaEvent(lag=10))
    seeded_run(lambda loader, model, optimizer: instrument(loader, model=model, optimizer=optimizer,
                                                             session=session))
    gpu = session.gpu
    assert gpu is not None
    # The GPU runs 10 marks (2-3 steps) behind: the last steps are still pending, earlier ones were
    # harvested once done, without ever waiting (FakeCudaEvent raises if waited on).
    assert 0 < gpu.harvested_steps < session.clock.steps
    assert gpu.pending_steps() > 0
    # Four marks per step, 0.5 ms apart: forward, backward, optimizer 0.5 ms each; busy 1.5 ms; idle 0.5 ms.
    per_step = {name: gpu.phase_totals[index] / gpu.harvested_steps for index, name in
                ((FORWARD, "forward"), (BACKWARD, "backward"), (OPTIMIZER, "optimizer"))}
    assert per_step == pytest.approx({"forward": 0.0005, "backward": 0.0005, "optimizer": 0.0005})
    assert gpu.busy_seconds / gpu.harvested_steps == pytest.approx(0.0015)
    assert gpu.idle_seconds / (gpu.harvested_steps - 1) == pytest.approx(0.0005)
    # Events are reused once read: far fewer objects than marks.
    assert len(FakeCudaEvent.created) < 4 * session.clock.steps / 2
    snapshot = validate(session._datagram())
    assert snapshot.gpu is not None and snapshot.gpu.busy_seconds == pytest.approx(gpu.busy_seconds)
    session.close()


class ScaledLinear(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 2)

    def forward(self, x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        return self.layer(x) * scale


def test_instrumented_model_still_deepcopies_pickles_and_shows_its_signature(tmp_path):
    import copy
    import inspect

    model = ScaledLinear()
    signature = inspect.signature(model.forward)
    session = Session(address="off")
    instrument([torch.randn(3, 4)], model=model, session=session)
    assert type(model.__dict__["forward"]).__name__ == "TimedForward"
    assert inspect.signature(model.forward) == signature  # libraries that inspect forward see the original

    twin = copy.deepcopy(model)  # an EMA model, say: a plain copy, not timed
    assert "TimedForward" not in type(twin.forward).__name__ and twin.forward.__self__ is twin
    torch.save(model, tmp_path / "model.pt")  # the whole module, sockets and all, must pickle
    loaded = torch.load(tmp_path / "model.pt", weights_only=False)
    x = torch.randn(3, 4)
    assert torch.equal(loaded(x), model(x)) and torch.equal(twin(x), model(x))
    for copied in (twin, loaded):  # none of the hook's objects, DataParallel's replica maker included
        assert not [name for name, value in copied.__dict__.items() if isinstance(value, InPlaceOf)]
        assert copied._replicate_for_data_parallel.__self__ is copied

    marks = len(session.clock.log)
    assert marks > 0  # the model(x) calls above, with grad enabled, were timed
    with torch.no_grad():
        model(x)  # evaluation is not a training forward
    assert len(session.clock.log) == marks
    session.close()  # closing puts the original forward back
    assert "forward" not in model.__dict__ and "_replicate_for_data_parallel" not in model.__dict__






def test_gpu_timings_abandoned_unfinished_are_sent_and_exported_not_only_counted():
    """A GPU far behind (events that never complete within the run): the steps given up are counted, carried
    in the datagram and exported as bottleneck_train_gpu_timings_dropped_total."""
    session = Session(address="off", job="gpu-behind", gpu_event_factory=lambda: FakeCudaEvent(lag=10**9))
    assert session.gpu is not None
    session.gpu.max_pending = 8
    seeded_run(lambda loader, model, optimizer: instrument(loader, model=model, optimizer=optimizer,
                                                             session=session))
    assert session.gpu.abandoned_steps == 36 - 8  # the 8 newest are still pending
    sent = validate(session._datagram())
    assert sent.gpu is not None and sent.gpu.dropped_timings == 28
    session.close()  # the pending ones are given up at the end: all 36 dropped
    assert session.gpu.abandoned_steps == 36

    assert exported(sent, "bottleneck_train_gpu_timings_dropped_total") == 28
    assert exported(sent, "bottleneck_train_gpu_busy_seconds_total") == 0


def test_new_datagram_fields_are_checked_like_the_rest():
    """collective, skipped_steps and gpu.dropped_timings are optional (an older hook does not send them) but
    bounded like every other number when present."""
    session = Session(address="off", job="fields")
    body = session.payload()
    session.close()
    assert validate(encode(body)).collective_seconds is None  # absent: not a DDP job

    def rejected(change: Callable[[dict[str, Any]], None]) -> str:
        datagram = copy.deepcopy(body)
        change(datagram)
        with pytest.raises(Exception) as err:
            validate(encode(datagram))
        return str(err.value)

    assert rejected(lambda d: d["phase_seconds"].update(collective=-1.0)).startswith("bad_number")
    assert rejected(lambda d: d.update(skipped_steps=1)).startswith("bad_number")  # more than the 0 steps
    assert rejected(lambda d: d["phase_seconds"].update(comms=1.0)).startswith("bad_schema")
    good = copy.deepcopy(body)
    good["phase_seconds"]["collective"] = 2.5
    assert validate(encode(good)).collective_seconds == 2.5


def test_errors_sending_from_the_optimizer_hook_switch_the_hook_off_without_raising_into_training(tmp_path):
    """A datagram that cannot be built, ten times: it is sent from the optimizer step's post-hook, so the
    tenth error comes while torch iterates its hook dict. The hook goes quiet and its hooks stay (inert)
    until close: removing one there would raise "dictionary changed size during iteration" into training."""
    session = Session(address=f"unix://{tmp_path}/nobody.sock", interval=0.05)

    def broken() -> bytes:
        raise RuntimeError("a datagram bug")

    session._datagram = broken  # type: ignore[method-assign]
    plain = seeded_run(lambda loader, model, optimizer: loader)
    optimizers: list[torch.optim.Optimizer] = []

    def wrap(loader: DataLoader, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> Any:
        optimizers.append(optimizer)
        return instrument(loader, model=model, optimizer=optimizer, session=session)

    runs: list[Any] = []
    wait_until(lambda: runs.append(seeded_run(wrap)) or not session.active, 60, "the hook to switch itself off",
               interval=0)
    hooked = runs[-1]
    assert all(torch.equal(a, b) for a, b in zip(plain, hooked, strict=True))
    assert not session.active and session.errors >= 10
    assert len(optimizers[-1]._optimizer_step_post_hooks) == 1  # still there, inert
    session.close()
    assert len(optimizers[-1]._optimizer_step_post_hooks) == 0


def pushing_loop(tmp_path: Any, batches: int, interval: float) -> tuple[socket.socket, Session, Callable[[], None]]:
    """A receiving socket, and the session and one-step function of a tiny loop over ``batches`` batches that
    pushes to it every ``interval`` seconds."""
    rx = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    rx.bind(str(tmp_path / "rx.sock"))
    rx.setblocking(False)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = instrument(DataLoader(TensorDataset(torch.randn(batches, 4)), batch_size=1), model=model,
                        optimizer=optimizer, address=f"unix://{tmp_path}/rx.sock", interval=interval)
    iterator = iter(loader)

    def step() -> None:
        (batch,) = next(iterator)
        optimizer.zero_grad()
        model(batch).sum().backward()
        optimizer.step()

    return rx, loader.bottleneck_session, step


def test_datagrams_leave_at_step_ends_once_the_interval_passed_and_a_rank_that_stops_stepping_falls_silent(
        tmp_path):
    rx, session, step = pushing_loop(tmp_path, 2, interval=0.05)
    step()
    received(rx)  # a first step slower than the interval (a loaded machine) has sent one already
    time.sleep(0.06)  # past the interval: the next step end sends, on this thread, before step() returns
    step()
    assert [d.steps for d in received(rx)] == [2]
    time.sleep(0.2)  # no step ends: nothing is sent, however many intervals pass (a hung rank falls silent)
    assert received(rx) == []
    session.close()
    assert [d.steps for d in received(rx)] == [2]
    rx.close()


def test_a_datagram_owed_after_many_marks_goes_one_step_later_after_a_short_fold(tmp_path):
    """Fast steps pile up marks between datagrams. The step end that owes one folds them, and the next step
    end sends it with a fold of its own step's marks only: no step pays for both the long fold and the
    datagram. (Steps slower than the interval log a few marks each, and send at once: above.)"""
    from bottleneck_exporter.hook.session import DATAGRAM_FOLD_ENTRIES

    rx, session, step = pushing_loop(tmp_path, 64, interval=3600)
    steps = 0
    while len(session.clock.log) <= DATAGRAM_FOLD_ENTRIES:
        step()
        steps += 1
    session.due = 0.0  # a datagram is owed from now on
    step()
    assert received(rx) == [] and session.clock.log == []  # folded, not sent
    sent_at = time.perf_counter()
    step()
    assert [d.steps for d in received(rx)] == [steps + 2]
    # The next one is owed a whole interval after this send. (Not an absolute figure: perf_counter's origin is
    # the boot, and a machine up for less than the interval would fail a fixed one.)
    assert len(session.clock.log) == 0 and session.due >= sent_at + session.interval
    session.close()
    rx.close()


def test_a_long_run_without_datagrams_keeps_its_step_log_short():
    """The log is folded every FOLD_ENTRIES entries at a step end, not only when a datagram is due: a
    datagram's fold stays short, and so does memory with the address off."""
    from bottleneck_exporter.hook.session import FOLD_ENTRIES

    session = Session(address="off")
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = instrument(DataLoader(TensorDataset(torch.randn(4, 4)), batch_size=1), model=model,
                        optimizer=optimizer, session=session)
    steps = 0
    while steps * 12 < 3 * FOLD_ENTRIES:  # 6 marks a step, 2 entries a mark: three folds' worth
        for (batch,) in loader:
            optimizer.zero_grad()
            model(batch).sum().backward()
            optimizer.step()
            steps += 1
    assert session.clock.log and len(session.clock.log) < FOLD_ENTRIES
    assert session.clock.steps == steps
    session.close()


def test_a_model_and_optimizer_the_user_drops_are_freed_not_kept_by_the_hook():
    """A sweep or a notebook trains one model after another in one process: once the user lets go of a
    model, its optimizer and loader, the hook must not keep them (and their GPU memory) alive until exit."""
    import gc
    import weakref

    def trial() -> tuple[weakref.ref[Any], weakref.ref[Any], weakref.ref[Session]]:
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        loader = instrument(DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=2), model=model,
                            optimizer=optimizer, address="off")
        for (batch,) in loader:
            optimizer.zero_grad()
            model(batch).sum().backward()
            optimizer.step()
        assert loader.bottleneck_session.clock.steps == 4
        return weakref.ref(model), weakref.ref(optimizer), weakref.ref(loader.bottleneck_session)

    refs = trial()
    gc.collect()  # the forward wrapper and the model refer to each other: freed by the collector
    assert [ref() for ref in refs] == [None, None, None]


def test_a_session_never_closed_sends_its_last_totals_when_the_process_exits(tmp_path):
    """No datagram is due in a 3-step run with a 60 s interval: the one at exit carries the steps."""
    path = tmp_path / "push.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.setblocking(False)
    script = (
        "import torch\n"
        "from torch.utils.data import DataLoader, TensorDataset\n"
        "from bottleneck_exporter.hook import instrument\n"
        "model = torch.nn.Linear(4, 1)\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.01)\n"
        f"loader = instrument(DataLoader(TensorDataset(torch.randn(6, 4)), batch_size=2), model=model,"
        f" optimizer=optimizer, job='left-open', address='unix://{path}', interval=60)\n"
        "for (batch,) in loader:\n"
        "    optimizer.zero_grad()\n"
        "    model(batch).sum().backward()\n"
        "    optimizer.step()\n"
    )
    try:
        subprocess.run([sys.executable, "-c", script], cwd=ROOT, check=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
        sent = received(sock)
    finally:
        sock.close()
    assert [(s.job, s.steps) for s in sent] == [("left-open", 3)]


def test_a_sample_counter_returning_infinity_or_nan_leaves_the_datagram_valid():
    counts = iter([8, float("inf"), float("nan"), 8])
    session = Session(address="off", samples=lambda batch: next(counts))
    for batch in range(4):
        session.add_batch(batch)
        session.end_step()
    sent = validate(session._datagram())
    assert sent.samples == 16.0 and sent.steps == 3  # the first step end only starts the clock
    session.close()


def test_a_total_that_is_not_finite_is_an_internal_error_not_a_datagram_the_exporter_rejects(tmp_path):
    path = tmp_path / "push.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.setblocking(False)
    session = Session(address=f"unix://{path}", job="inf-total")
    try:
        session.end_step()
        session.end_step()
        session.flush()
        assert [s.steps for s in received(sock)] == [1] and session.errors == 0
        session.clock.samples_at_step_end = float("inf")  # how it got there does not matter here
        session.flush()
        assert received(sock) == [] and session.errors == 1
    finally:
        session.close()  # its last datagram fails the same way, counted, never raised
        sock.close()


def test_rounded_totals_never_go_back_and_keep_a_microsecond_of_days_of_training():
    session = Session(address="off")
    clock = session.clock
    now = 1e6  # perf_counter() of a machine up for eleven days: its totals as long
    clock.log += [FORWARD, now]
    sent_before = 0.0
    for step in range(1, 200):
        now += 1e6 / 3 if step == 1 else 1e-6 * step / 7  # one long step, then steps of a few microseconds
        clock.log += [STEP_END, now, FORWARD, now]
        sent = validate(session._datagram()).phase_seconds["step"]
        assert sent >= sent_before
        assert sent == pytest.approx(clock.step_seconds, abs=1e-6, rel=0)
        sent_before = sent
    session.close()
