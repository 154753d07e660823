"""How collectives are timed, without a GPU: NCCL's CUDA events read back only once the GPU passed them (a
fake GPU timeline stands in for the device), the backend deciding the stopwatch, the union of overlapping
intervals. The real collectives (gloo DDP, FSDP2, a user's DDP hook) run in tests/test_hook_collectives.py."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest

from bottleneck_exporter.hook.collective.clock import (
    GPU,
    HOST,
    CollectiveClock,
    ExposedWait,
    GpuStopwatch,
    HostStopwatch,
    Stopwatches,
    backend_of,
    timed_launch,
)


class FakeGpu:
    """A GPU timeline: each event recorded is stamped with ``now`` (ms, as the test sets it: where the
    stream will be when it gets there), and the GPU has passed every event stamped at or before ``passed``.
    Anything that would wait for the device fails the test."""

    def __init__(self) -> None:
        self.now = 0.0
        self.passed = -1.0
        self.created = 0

    def event(self) -> FakeEvent:
        self.created += 1
        return FakeEvent(self)


class FakeEvent:
    def __init__(self, gpu: FakeGpu) -> None:
        self.gpu = gpu
        self.at: float | None = None

    def record(self) -> None:
        self.at = self.gpu.now

    def query(self) -> bool:
        return self.at is not None and self.at <= self.gpu.passed

    def elapsed_time(self, end: FakeEvent) -> float:
        if not (self.query() and end.query()):
            raise AssertionError("elapsed_time on an event the GPU has not reached: that would wait")
        assert self.at is not None and end.at is not None
        return end.at - self.at

    def synchronize(self) -> None:
        raise AssertionError("synchronize() called: the hook must never wait on the device")

    def wait(self, stream: Any = None) -> None:
        raise AssertionError("wait() called")


def gpu_stopwatch(max_pending: int = 4096) -> tuple[CollectiveClock, GpuStopwatch, FakeGpu]:
    clock, gpu = CollectiveClock(), FakeGpu()
    clock.gpu = GpuStopwatch(clock, gpu.event, max_pending)
    return clock, clock.gpu, gpu


def collective(watch: GpuStopwatch, gpu: FakeGpu, start_ms: float, end_ms: float) -> None:
    """One collective launched by the host: its input ready on the GPU at start_ms, done at end_ms."""
    gpu.now = start_ms
    token = watch.start()
    gpu.now = end_ms
    watch.stop(token)


def test_nccl_collective_time_is_read_only_once_the_gpu_passed_it() -> None:
    clock, watch, gpu = gpu_stopwatch()
    collective(watch, gpu, 10.0, 30.0)  # the first start is also the reference (at 10 ms)
    collective(watch, gpu, 40.0, 45.0)
    # The host is ahead: nothing is read, nothing waited for.
    assert clock.seconds() == 0.0 and watch.pending() == 2
    gpu.passed = 30.0
    assert clock.seconds() == pytest.approx(0.020) and watch.pending() == 1
    gpu.passed = 45.0
    assert clock.seconds() == pytest.approx(0.025) and watch.pending() == 0


def test_overlapping_collectives_on_two_streams_count_once() -> None:
    """FSDP's all-gather of the next layer runs while the reduce-scatter of the last one is in flight."""
    clock, watch, gpu = gpu_stopwatch()
    collective(watch, gpu, 0.0, 10.0)
    collective(watch, gpu, 5.0, 20.0)  # overlaps the first by 5 ms
    collective(watch, gpu, 30.0, 31.0)
    gpu.passed = 100.0
    assert clock.seconds() == pytest.approx(0.021)


def test_a_collective_finishing_before_an_earlier_one_is_read_back_first() -> None:
    """Streams do not complete in launch order: a finished pair behind an unfinished one is not held up."""
    _, watch, gpu = gpu_stopwatch()
    collective(watch, gpu, 0.0, 50.0)  # a long all-reduce on the NCCL stream
    collective(watch, gpu, 1.0, 2.0)  # a short one on another stream, done long before
    gpu.passed = 2.0
    assert watch.harvest() == 1 and watch.pending() == 1
    gpu.passed = 50.0
    assert watch.harvest() == 1 and watch.pending() == 0


def test_events_never_completing_are_given_up_not_waited_for() -> None:
    clock, watch, gpu = gpu_stopwatch(max_pending=8)
    for at in range(50):
        collective(watch, gpu, float(at), at + 0.5)
    assert clock.seconds() == 0.0
    assert watch.pending() == 8 and watch.abandoned == 42


def test_events_of_read_intervals_are_reused() -> None:
    """Each collective records two events; once read back they go back to a pool (bounded), so a long job
    does not create two CUDA events per collective forever."""
    clock, watch, gpu = gpu_stopwatch()
    for at in range(100):
        collective(watch, gpu, float(at), at + 0.5)
        gpu.passed = at + 0.5
        clock.seconds()
    assert clock.seconds() == pytest.approx(0.05)
    assert gpu.created < 10


class Group:
    """Stands in for a torch ProcessGroup: what Stopwatches needs of one is a weak reference."""

    def __init__(self, backend: str) -> None:
        self.backend = backend


def test_gloo_is_timed_on_the_host_nccl_on_the_gpu_others_not() -> None:
    g, n, m = Group("gloo"), Group("nccl"), Group("mpi")
    gpu = FakeGpu()
    host_clock = CollectiveClock()
    watches = Stopwatches(host_clock, lambda group: group.backend, gpu.event)
    assert isinstance(watches.for_group(g), HostStopwatch) and host_clock.kind == HOST
    assert watches.for_group(g) is watches.for_group(g)
    # One clock holds one timeline: an NCCL group beside the gloo one is not timed.
    assert watches.for_group(n) is None and watches.for_group(m) is None
    gpu_clock = CollectiveClock()
    watches = Stopwatches(gpu_clock, lambda group: group.backend, gpu.event)
    watch = watches.for_group(n)
    assert isinstance(watch, GpuStopwatch) and gpu_clock.kind == GPU and gpu_clock.gpu is watch
    assert watches.for_group(n) is watch and watches.for_group(g) is None


def test_a_destroyed_process_group_is_not_kept_alive_by_the_hook() -> None:
    """After destroy_process_group() the group must go when torch lets go of it: the hook's table of
    stopwatches holds it weakly (its gloo threads would otherwise live until interpreter exit)."""
    looked_up: list[str] = []

    def backend(group: Group) -> str:
        looked_up.append(group.backend)
        return group.backend

    watches = Stopwatches(CollectiveClock(), backend)
    group = Group("gloo")
    gone = weakref.ref(group)
    assert watches.for_group(group) is watches.for_group(group)
    assert looked_up == ["gloo"]  # remembered while it lives
    del group
    gc.collect()
    assert gone() is None
    # A group that cannot be weakly referenced is timed all the same, its backend looked up each time.
    names: list[str] = []

    def gloo(name: str) -> str:
        names.append(name)
        return "gloo"

    by_name = Stopwatches(CollectiveClock(), gloo)
    assert isinstance(by_name.for_group("world"), HostStopwatch)
    assert isinstance(by_name.for_group("world"), HostStopwatch)
    assert names == ["world", "world"]


def test_a_failing_stopwatch_never_reaches_training() -> None:
    class Broken:
        def start(self) -> Any:
            raise RuntimeError("CUDA error: out of events")

        def stop(self, token: Any) -> None:
            raise AssertionError("not started")

    assert timed_launch(Broken(), lambda: None) is None
    with pytest.raises(ValueError, match="the collective's own"):
        timed_launch(HostStopwatch(CollectiveClock()), lambda: (_ for _ in ()).throw(
            ValueError("the collective's own error")))


def test_a_completed_launch_is_timed_at_once() -> None:
    """FSDP's default collectives are synchronous (they return None once done, on gloo)."""
    clock = CollectiveClock()
    timed_launch(HostStopwatch(clock), lambda: None)
    assert len(clock.log) == 2 and clock.log[0] <= clock.log[1]


def test_collective_timings_given_up_are_sent_and_exported_not_only_counted() -> None:
    """NCCL events the GPU never reached in time: the intervals given up travel in the datagram and become
    bottleneck_train_collective_timings_dropped_total, so a missing share of the collective phase is visible."""
    from bottleneck_exporter.hook.session import Session
    from bottleneck_exporter.wire.schema import validate
    from tests.datagrams import exported

    clock, watch, gpu = gpu_stopwatch(max_pending=8)
    for at in range(20):
        collective(watch, gpu, float(at), at + 0.5)
    session = Session(address="off", job="nccl-behind")
    session.collectives = clock
    sent = validate(session._datagram())
    session.close()
    assert sent.collective_dropped_timings == 12 and sent.collective_seconds == 0.0

    assert exported(sent, "bottleneck_train_collective_timings_dropped_total") == 12


def test_host_timed_collectives_send_no_dropped_count() -> None:
    """gloo's host stopwatch never gives anything up: its datagram has no such field (and no series)."""
    from bottleneck_exporter.hook.session import Session
    from bottleneck_exporter.wire.schema import validate

    clock = CollectiveClock()
    HostStopwatch(clock).stop(HostStopwatch(clock).start())
    session = Session(address="off", job="gloo")
    session.collectives = clock
    sent = validate(session._datagram())
    session.close()
    assert sent.collective_dropped_timings is None and sent.collective_seconds is not None


def test_a_clock_nobody_reads_stays_bounded() -> None:
    """No datagram folds it (address off, or a closed session whose DDP hook stays registered): recording
    folds the log itself, and nothing is lost."""
    from bottleneck_exporter.hook.collective.clock import LOG_LIMIT

    clock = CollectiveClock()
    watch = HostStopwatch(clock)
    for _ in range(3 * LOG_LIMIT):
        watch.stop(watch.start())
    assert len(clock.log) < LOG_LIMIT
    assert clock.seconds() > 0


def test_a_backend_that_cannot_be_told_leaves_the_collective_untimed_not_failed() -> None:
    def broken(group: Any) -> str:
        raise RuntimeError("Default process group has not been initialized")

    watches = Stopwatches(CollectiveClock(), broken)
    assert watches.for_group(object()) is None  # inside FSDP's or DDP's launch: nothing raised
    assert timed_launch(watches.for_group(object()), lambda: None) is None


@pytest.mark.parametrize("wrapper", ["ddp", "fsdp1"])
def test_a_model_instrumented_again_times_into_the_new_sessions_clock(tmp_path: Any, wrapper: str) -> None:
    """A second session on the same DDP or FSDP1 model (after close(), a second Lightning fit): the model
    keeps the comm hook set for the first, which must now time into the new session's clock, not the closed
    one's. (FSDP1 on one rank runs NO_SHARD: all-reduces through the same communication hook.)"""
    import torch
    import torch.distributed as dist

    from bottleneck_exporter.hook import instrument
    from bottleneck_exporter.hook.session import Session

    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    try:
        if wrapper == "ddp":
            model: torch.nn.Module = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
        else:
            from torch.distributed.fsdp import FullyShardedDataParallel

            model = FullyShardedDataParallel(torch.nn.Linear(8, 1), device_id=torch.device("cpu"))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        batches = [(torch.randn(4, 8), torch.randn(4, 1))] * 3
        for job in ("first", "second"):
            session = Session(address="off", job=job)
            for x, y in instrument(batches, model=model, optimizer=optimizer, session=session):
                optimizer.zero_grad()
                torch.nn.functional.mse_loss(model(x), y).backward()
                optimizer.step()
            assert session.collectives is not None and session.collectives.seconds() > 0, job
            if wrapper == "fsdp1":  # one rank runs no all-gather: its timer, read directly, follows too
                gather = model._handle.__dict__["_all_gather_flat_param"]
                assert gather.watches.clock is session.collectives, job
            session.close()
    finally:
        dist.destroy_process_group()


@pytest.fixture
def one_rank(tmp_path: Any) -> Any:
    """A one-rank gloo process group for the test."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_a_users_fsdp1_low_precision_hook_is_still_one_to_fsdp(one_rank: None) -> None:
    """torch's fp16 compression hook registered after instrument() runs inside the hook's timed one; FSDP
    must still see it as a low-precision hook (it then leaves the casts to it), and a second one is refused
    as FSDP refuses it."""
    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms._comm_hooks import default_hooks
    from torch.distributed.fsdp import FullyShardedDataParallel
    from torch.distributed.fsdp._runtime_utils import _low_precision_hook_enabled

    from bottleneck_exporter.hook import instrument
    from bottleneck_exporter.hook.session import Session

    model = FullyShardedDataParallel(torch.nn.Sequential(
        FullyShardedDataParallel(torch.nn.Linear(8, 8), device_id=torch.device("cpu")), torch.nn.Linear(8, 1)),
        device_id=torch.device("cpu"))
    session = Session(address="off", job="low-precision")
    instrument([], model=model, session=session)
    units = FullyShardedDataParallel.fsdp_modules(model)
    assert len(units) == 2 and not any(_low_precision_hook_enabled(unit) for unit in units)
    model.register_comm_hook(default_hooks.LowPrecisionState(dist.group.WORLD), default_hooks.fp16_compress_hook)
    assert all(_low_precision_hook_enabled(unit) for unit in units)
    assert all(isinstance(unit._comm_hook_state, default_hooks.LowPrecisionState) for unit in units)
    with pytest.raises(AssertionError, match="already registered"):
        model.register_comm_hook(default_hooks.DefaultState(dist.group.WORLD), default_hooks.allreduce_hook)
    session.close()


def test_the_wrapper_running_a_model_is_found_from_inside_its_forward(one_rank: None) -> None:
    """enclosing_wrapper: the outermost DDP or FSDP1 module whose forward runs the model (an FSDP1 root
    around a nested unit), or None when the model runs on its own."""
    import torch
    from torch.distributed.fsdp import FullyShardedDataParallel

    from bottleneck_exporter.hook.collective import enclosing_wrapper

    class Probe(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)
            self.found: list[Any] = []

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.found.append(enclosing_wrapper(self))
            return self.layer(x)

    probe = Probe()
    x = torch.randn(2, 4)
    probe(x)
    ddp = torch.nn.parallel.DistributedDataParallel(probe)
    ddp(x)
    other = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 4))
    torch.nn.Sequential(other, probe)(torch.randn(2, 4))  # a wrapper ran before, not around it
    assert probe.found == [None, ddp, None]

    nested = Probe()
    unit = FullyShardedDataParallel(nested, device_id=torch.device("cpu"))
    root = FullyShardedDataParallel(torch.nn.Sequential(unit), device_id=torch.device("cpu"))
    root(x)
    assert nested.found == [root]


def test_a_collective_read_back_after_a_later_one_still_counts_its_time() -> None:
    """Folded in two datagrams, out of time order: a long all-reduce harvested after a short later one
    counts the time before it, and what overlaps is counted once."""
    clock = CollectiveClock()
    clock.record(8.0, 9.0)
    assert clock.seconds() == pytest.approx(1.0)
    clock.record(1.0, 7.0)  # ended before the one already folded
    assert clock.seconds() == pytest.approx(7.0)
    clock.record(6.5, 8.5)  # bridges both: adds only the gap 7.0-8.0
    assert clock.seconds() == pytest.approx(8.0)
    clock.record(0.0, 20.0)  # covers everything so far
    assert clock.seconds() == pytest.approx(20.0)
    clock.record(2.0, 3.0)  # inside it: nothing new
    assert clock.seconds() == pytest.approx(20.0)


def test_the_clocks_memory_of_past_intervals_is_bounded_and_never_double_counts() -> None:
    clock = CollectiveClock()
    for at in range(1000):  # disjoint intervals of 0.5 s, one a second
        clock.record(float(at), at + 0.5)
        clock.seconds()
    assert clock.seconds() == pytest.approx(500.0)
    assert len(clock._starts) <= CollectiveClock.KEPT_INTERVALS
    clock.record(0.0, 1000.0)  # reaches back past what is kept: only the gaps it still knows count
    # The gap before each kept interval (the first one's back to the end of the last interval forgotten),
    # and the one after the last.
    kept_gaps = CollectiveClock.KEPT_INTERVALS * 0.5 + 0.5
    assert clock.seconds() == pytest.approx(500.0 + kept_gaps)


def test_looking_for_a_wrapper_keeps_nothing_of_the_training_loop_alive(one_rank: None) -> None:
    """The look up the stack at the first forward reads only the wrappers' own frames: a training loop's
    locals (here: a method's) are not snapshotted onto its frame, where they would outlive the loop's del."""
    import torch

    from bottleneck_exporter.hook import instrument
    from bottleneck_exporter.hook.session import Session

    class Marker:  # what the loop moved past: a batch, its outputs
        pass

    class Loop:
        def run(self, session: Session) -> list[bool]:
            model = torch.nn.Linear(4, 1)
            refs = []
            for x in instrument([torch.randn(2, 4) for _ in range(3)], model=model, session=session):
                marker = Marker()
                refs.append(weakref.ref(marker))
                model(x).sum().backward()
                del marker
            gc.collect()
            return [ref() is not None for ref in refs]  # while the loop's frame is still there

    session = Session(address="off", job="loop")
    alive = Loop().run(session)
    session.close()
    assert alive == [False, False, False]


def test_a_closed_sessions_clock_is_fed_no_more_while_the_model_trains_on(one_rank: None) -> None:
    """DDP keeps the hook's communication hook after the session closed; the model's further collectives
    run (the gradients are still all-reduced) but are not timed into a clock nobody reads."""
    import torch

    from bottleneck_exporter.hook import instrument
    from bottleneck_exporter.hook.session import Session

    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
    batches = [(torch.randn(4, 8), torch.randn(4, 1))] * 2
    session = Session(address="off", job="closed")
    for x, y in instrument(batches, model=model, session=session):
        torch.nn.functional.mse_loss(model(x), y).backward()
    clock = session.collectives
    assert clock is not None and clock.seconds() > 0
    session.close()
    measured = clock.seconds()
    for x, y in batches:
        model.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        assert all(p.grad is not None for p in model.parameters())  # the all-reduce still ran
    assert clock.seconds() == measured and not clock.log



@pytest.mark.parametrize("wrapped", [False, True], ids=["layers-wrapped-by-hand", "the-strategys-root"])
def test_lightning_times_the_fsdp1_roots_its_trainer_runs_and_only_those(one_rank: None, wrapped: bool) -> None:
    """Lightning's FSDPStrategy (FSDP1) wraps the LightningModule in a root, unless configure_model wrapped
    layers by hand: then it wraps nothing, and each wrapped layer is a root of its own. The hook times the
    roots the trainer runs, never the layers under the strategy's root as roots. (The strategy refuses CPU,
    so its callback is called here as Lightning calls it, with what it reads of the trainer: its model.)"""
    from types import SimpleNamespace

    import torch
    from torch.distributed.fsdp import FullyShardedDataParallel

    from bottleneck_exporter.hook.collective import fsdp1
    from bottleneck_exporter.hook.lightning import BottleneckCallback

    cpu = torch.device("cpu")
    module = torch.nn.Sequential(FullyShardedDataParallel(torch.nn.Linear(8, 8), device_id=cpu), torch.nn.ReLU(),
                                 FullyShardedDataParallel(torch.nn.Linear(8, 1), device_id=cpu))
    trainer_model = FullyShardedDataParallel(module, device_id=cpu) if wrapped else module
    callback = BottleneckCallback(address="off", job="lightning-fsdp1")
    callback.on_train_start(SimpleNamespace(model=trainer_model), module)
    session = callback.session
    assert session is not None and session.collectives is not None
    roots = [trainer_model] if wrapped else [module[0], module[2]]
    assert [m for m in trainer_model.modules() if fsdp1._ATTACHED in m.__dict__] == roots

    trainer_model(torch.randn(4, 8)).sum().backward()
    assert fsdp1.launches(trainer_model)["reduce"] > 0
    assert session.collectives.seconds() > 0
    session.close()


def test_layers_under_a_root_that_ran_are_never_taken_for_roots(one_rank: None) -> None:
    """The hook takes a model's outermost FSDP1 modules for roots only when nothing wraps the model. Once a
    root has run, FSDP marks the modules under it as not roots, and the hook believes it over its caller."""
    import torch
    from torch.distributed.fsdp import FullyShardedDataParallel

    from bottleneck_exporter.hook.collective import fsdp1

    cpu = torch.device("cpu")
    module = torch.nn.Sequential(FullyShardedDataParallel(torch.nn.Linear(8, 8), device_id=cpu), torch.nn.ReLU(),
                                 FullyShardedDataParallel(torch.nn.Linear(8, 1), device_id=cpu))
    root = FullyShardedDataParallel(module, device_id=cpu)
    assert fsdp1._outermost(module, FullyShardedDataParallel) == [module[0], module[2]]
    root(torch.randn(4, 8)).sum().backward()
    assert not fsdp1.attach_roots(Stopwatches(CollectiveClock(), backend_of), module)
    assert not any(fsdp1._ATTACHED in m.__dict__ for m in root.modules())


def test_only_the_wait_after_backwards_last_launch_is_exposed() -> None:
    """Three buckets of one backward (DDP launches the first layers' last): what completes before the last
    launch overlapped compute; from the last launch to the latest completion the rank only waits."""
    wait = ExposedWait()
    wait.launched(1.0, last=False)
    wait.completed(1.5)  # hidden behind the rest of backward
    wait.launched(2.0, last=False)
    wait.launched(3.0, last=True)  # backward has nothing left to compute
    wait.completed(3.5)  # the second bucket, still in flight at the last launch
    wait.completed(4.0)  # the last one
    assert wait.seconds() == pytest.approx(1.0)
    # The next backward's first launch: its completions before its own last launch are hidden again.
    wait.launched(10.0, last=False)
    wait.completed(10.5)
    assert wait.seconds() == pytest.approx(1.0)
    wait.launched(11.0, last=True)
    wait.completed(11.25)
    assert wait.seconds() == pytest.approx(1.25)


def test_gloo_ddp_sends_its_exposed_wait_within_its_collective_time(one_rank: None) -> None:
    """A real DDP model in small buckets (several all-reduces per backward), on gloo: the exposed wait is
    measured, sent, and never more than the time with a collective in flight."""
    import torch

    from bottleneck_exporter.hook import instrument
    from bottleneck_exporter.hook.session import Session

    layers = torch.nn.Sequential(*(torch.nn.Linear(256, 256) for _ in range(4)))
    model = torch.nn.parallel.DistributedDataParallel(layers, bucket_cap_mb=0.3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = [(torch.randn(8, 256), torch.randn(8, 256))] * 5
    session = Session(address="off", job="exposed")
    for x, y in instrument(batches, model=model, optimizer=optimizer, session=session):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    payload = session.payload()
    session.close()
    exposed, collective = payload["collective_exposed_seconds"], payload["phase_seconds"]["collective"]
    assert 0 < exposed <= collective, payload
