"""How a rank is set up, as the hook reads it (bottleneck_exporter.hook.setup), each in a real PyTorch CPU loop:
a DataParallel on the CPU (no device_ids: no GPUs to count), a gloo process group, forwards under CPU autocast
and without it, an autocast the model's own forward enters, DataLoader workers forked every epoch against
persistent ones. The facts go through a real socket and the exporter's receiver, as in production.

Three of the four verdicts that read these facts need CUDA (the model's device, the GPU's compute capability);
with no GPU here, their CUDA sides are exercised by the scenario rows (exporter/heuristics/scenarios/training.py),
which promtool and the Python evaluator both run. LoaderWorkersRestarted needs none: a real job whose loader
forks its workers every epoch gets it from ``diagnose``, the same job with persistent workers does not.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset

from bottleneck_exporter.heuristics.parameters import PARAMETERS
from bottleneck_exporter.hook import instrument
from bottleneck_exporter.hook.session import Session
from bottleneck_exporter.hook.setup import data_parallel_devices, process_group_backend
from bottleneck_exporter.wire import encode
from bottleneck_exporter.wire.schema import Rejected, Snapshot, validate
from tests.conftest import ROOT, stop_all
from tests.datagrams import exported, full_payload, received, stepped
from tests.diagnosis import diagnosed

pytestmark = pytest.mark.torch


def train(loader: object, model: torch.nn.Module, optimizer: torch.optim.Optimizer, flush_every: int = 0,
          autocast: bool = False) -> None:
    """One pass over ``loader``; ``flush_every``: send a datagram every that many steps (each makes the next
    forward one the hook looks at)."""
    session = loader.bottleneck_session  # type: ignore[attr-defined]
    for step, (x,) in enumerate(loader):  # type: ignore[attr-defined]
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            out = model(x)
        out.float().sum().backward()
        optimizer.step()
        if flush_every and step % flush_every == flush_every - 1:
            session.flush()


def last_sent(session: Session, sock: socket.socket) -> Snapshot:
    session.flush()
    datagrams = received(sock)
    assert datagrams, "the hook sent nothing"
    return datagrams[-1]


def data(size: int = 64) -> TensorDataset:
    return TensorDataset(torch.randn(size, 4, generator=torch.Generator().manual_seed(0)))


def test_dataparallel_on_the_cpu_has_no_device_ids_and_counts_no_gpus(rx: tuple[socket.socket, str]) -> None:
    sock, address = rx
    wrapped = torch.nn.DataParallel(torch.nn.Linear(4, 1))
    assert wrapped.device_ids == []  # no CUDA: DataParallel calls the module as it is
    optimizer = torch.optim.SGD(wrapped.parameters(), lr=0.01)
    loader = instrument(DataLoader(data(), batch_size=8), model=wrapped, optimizer=optimizer, address=address)
    train(loader, wrapped, optimizer)
    sent = last_sent(loader.bottleneck_session, sock)
    loader.bottleneck_session.close()
    assert sent.setup is not None and sent.setup.data_parallel_devices == 0
    assert exported(sent, "bottleneck_train_data_parallel_devices") == 0.0


def test_the_inner_model_of_a_dataparallel_finds_its_wrapper_on_the_stack(rx: tuple[socket.socket, str]) -> None:
    """The Hugging Face Trainer hands its callbacks the model a DataParallel wraps: the wrapper is found running
    it. On the CPU it has no device_ids and calls the module as it is; once it has, the inner module's hooks
    give it two, as on a node with two GPUs, so that a wrapper not found (0) tells from one found (2)."""
    sock, address = rx
    inner = torch.nn.Linear(4, 1)
    wrapped = torch.nn.DataParallel(inner)
    # After DataParallel.forward's own look at device_ids, before the hook's: the inner module's hooks.
    inner.register_forward_pre_hook(lambda module, args: setattr(wrapped, "device_ids", [0, 1]))
    inner.register_forward_hook(lambda module, args, out: setattr(wrapped, "device_ids", []))
    optimizer = torch.optim.SGD(inner.parameters(), lr=0.01)
    loader = instrument(DataLoader(data(), batch_size=8), model=inner, optimizer=optimizer, address=address)
    train(loader, wrapped, optimizer)
    sent = last_sent(loader.bottleneck_session, sock)
    loader.bottleneck_session.close()
    assert sent.setup is not None and sent.setup.data_parallel_devices == 2 and sent.steps == 8


def test_a_dataparallel_counts_the_gpus_its_device_ids_name() -> None:
    wrapped = torch.nn.DataParallel(torch.nn.Linear(4, 1))
    wrapped.device_ids = [0, 1, 2, 3]  # what DataParallel(model) sets on a node with four GPUs
    assert data_parallel_devices(wrapped) == 4
    assert data_parallel_devices(wrapped.module) == 0  # not running inside it: nothing on the stack


def test_a_gloo_process_group_is_pushed_and_exported_with_the_model_on_the_cpu(
        tmp_path: Path, rx: tuple[socket.socket, str]) -> None:
    sock, address = rx
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    try:
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        loader = instrument(DataLoader(data(), batch_size=8), model=model, optimizer=optimizer, address=address)
        train(loader, model, optimizer)
        sent = last_sent(loader.bottleneck_session, sock)
        loader.bottleneck_session.close()
    finally:
        dist.destroy_process_group()
    assert sent.setup is not None and sent.setup.process_group_backend == "gloo"
    assert sent.device == "cpu" and sent.setup.compute_capability is None  # no CUDA: SlowCollectiveBackend cannot hold
    assert exported(sent, "bottleneck_train_setup_info", process_group_backend="gloo",
                    parameters_dtype="float32", float32_matmul_precision="highest") == 1.0


def test_ddp_over_a_group_of_its_own_is_judged_by_that_group_s_backend_not_the_default_one(
        tmp_path: Path, rx: tuple[socket.socket, str]) -> None:
    """Regression: the hook sent the default group's backend, not that of the group DDP all-reduces over
    (``DistributedDataParallel(process_group=...)``): a job whose default group is NCCL and whose DDP runs on a
    gloo group escaped SlowCollectiveBackend. A backend registered here stands in for the default NCCL group
    (a CPU build of torch has no NCCL); DDP's group is a real gloo one."""
    sock, address = rx
    dist.Backend.register_backend(
        "standin_default", lambda store, rank, size, timeout: dist.ProcessGroupGloo(store, rank, size, timeout),
        devices=["cpu"])
    dist.init_process_group("standin_default", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    try:
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1),
                                                          process_group=dist.new_group(backend="gloo"))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        loader = instrument(DataLoader(data(), batch_size=8), model=model, optimizer=optimizer, address=address)
        train(loader, model, optimizer)
        train(loader, model, optimizer)  # a second iter(loader) reads the backend again
        sent = last_sent(loader.bottleneck_session, sock)
        loader.bottleneck_session.close()
        assert process_group_backend() == "standin_default"  # what the hook used to send
    finally:
        dist.destroy_process_group()
    assert sent.setup is not None and sent.setup.process_group_backend == "gloo"


@pytest.mark.parametrize("setting", ["legacy", "per_backend"])
def test_tf32_matmuls_are_sent_and_exported_however_they_were_turned_on(
        setting: str, rx: tuple[socket.socket, str]) -> None:
    """NoMixedPrecision names torch's float32 matmul precision: "high" is TF32 on the Tensor Cores. Turned on
    with torch.set_float32_matmul_precision (what allow_tf32=True sets too), or with the newer per-backend
    setting, mixed with which torch.get_float32_matmul_precision() raises: read from the CUDA matmul setting.
    The setting is read again at each iter(loader): a job may turn it on after its first forward."""
    sock, address = rx
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = instrument(DataLoader(data(), batch_size=8), model=model, optimizer=optimizer, address=address)
    try:
        train(loader, model, optimizer)
        before = last_sent(loader.bottleneck_session, sock)
        if setting == "legacy":
            torch.set_float32_matmul_precision("high")
        else:
            torch.backends.cuda.matmul.fp32_precision = "tf32"
            with pytest.raises(RuntimeError):  # what the hook must not let through
                torch.get_float32_matmul_precision()
        train(loader, model, optimizer)
        sent = last_sent(loader.bottleneck_session, sock)
    finally:
        loader.bottleneck_session.close()
        torch.backends.cuda.matmul.fp32_precision = "none"
        torch.set_float32_matmul_precision("highest")
    assert before.setup is not None and before.setup.float32_matmul_precision == "highest"  # torch's default
    assert sent.setup is not None and sent.setup.float32_matmul_precision == "high"
    assert exported(sent, "bottleneck_train_setup_info", process_group_backend="", parameters_dtype="float32",
                    float32_matmul_precision="high") == 1.0


def test_without_a_process_group_the_backend_is_left_out(rx: tuple[socket.socket, str]) -> None:
    sock, address = rx
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = instrument(DataLoader(data(), batch_size=8), model=model, optimizer=optimizer, address=address)
    train(loader, model, optimizer)
    sent = last_sent(loader.bottleneck_session, sock)
    loader.bottleneck_session.close()
    assert sent.setup is not None and sent.setup.process_group_backend is None
    assert "process_group_backend" not in json.loads(loader.bottleneck_session._datagram())["setup"]
    assert exported(sent, "bottleneck_train_setup_info", process_group_backend="", parameters_dtype="float32",
                    float32_matmul_precision="highest") == 1.0


def test_a_backend_name_the_datagram_cannot_carry_is_left_out_not_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    """A custom backend registered as "my-backend.v2": the receiver would refuse every datagram that named it,
    and with them every series of the rank."""
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_backend", lambda group=None: "my-backend.v2")
    assert process_group_backend() is None
    monkeypatch.setattr(dist, "get_backend", lambda group=None: "cpu:gloo,cuda:nccl")
    assert process_group_backend() == "cpu:gloo,cuda:nccl"


@pytest.mark.parametrize("autocast", [True, False], ids=["under_cpu_autocast", "without_autocast"])
def test_forwards_under_autocast_are_told_from_forwards_without(autocast: bool, rx: tuple[socket.socket, str]) -> None:
    sock, address = rx
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    # No datagram but those flushed (the longest interval): each makes the next forward one to look at.
    loader = instrument(DataLoader(data(), batch_size=4), model=model, optimizer=optimizer, address=address,
                        interval=60)
    train(loader, model, optimizer, flush_every=4, autocast=autocast)
    sent = last_sent(loader.bottleneck_session, sock)
    loader.bottleneck_session.close()
    assert sent.setup is not None
    # The first forward, then the first after each of the 3 datagrams sent within the pass (16 steps).
    assert sent.setup.sampled_forwards == 4
    assert sent.setup.autocast_forwards == (4 if autocast else 0)
    assert exported(sent, "bottleneck_train_autocast_forwards_total") == (4.0 if autocast else 0.0)
    assert exported(sent, "bottleneck_train_sampled_forwards_total") == 4.0


class AutocastInside(torch.nn.Module):
    """A model whose own forward enters autocast, as Accelerate's prepare() with mixed precision makes it."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return self.layer(x)


def test_an_autocast_the_model_s_own_forward_enters_counts_and_leaves_no_hook_behind(
        rx: tuple[socket.socket, str]) -> None:
    sock, address = rx
    model = AutocastInside()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    # No datagram but those flushed (the longest interval): each makes the next forward one to look at.
    loader = instrument(DataLoader(data(), batch_size=4), model=model, optimizer=optimizer, address=address,
                        interval=60)
    train(loader, model, optimizer, flush_every=4)
    sent = last_sent(loader.bottleneck_session, sock)
    loader.bottleneck_session.close()
    assert sent.setup is not None and sent.setup.sampled_forwards == sent.setup.autocast_forwards == 4
    assert not model.layer._forward_pre_hooks  # each look's hook is removed once the forward returned


@pytest.mark.parametrize("regional", [False, True], ids=["whole_model", "first_layer_compiled_in_place"])
def test_looking_at_a_compiled_model_s_forwards_costs_no_recompilation(
        regional: bool, rx: tuple[socket.socket, str]) -> None:
    """Regression: the look from inside (a pre-hook on the first layer) failed dynamo's guards on the module's
    hooks, and each look recompiled the model (seconds of inductor for a real one)."""
    sock, address = rx
    torch._dynamo.reset()  # the other case's compiled code must not be found cached
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    # backend="eager": dynamo's guards without inductor's compile time.
    if regional:
        model[0].compile(backend="eager")
        compiled: torch.nn.Module = model
    else:
        compiled = torch.compile(model, backend="eager")  # type: ignore[assignment]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = instrument(DataLoader(data(), batch_size=4), model=compiled, optimizer=optimizer, address=address,
                        interval=60)
    train(loader, compiled, optimizer, flush_every=4)
    sent = last_sent(loader.bottleneck_session, sock)
    loader.bottleneck_session.close()
    assert sent.setup is not None and sent.setup.sampled_forwards == 4
    # Dynamo's callbacks are attached at the session's first datagram at the latest: an in-place compile that
    # loaded dynamo after the session was made is counted from then on, its recompilations included.
    assert sent.compile is not None and sent.compile.recompiles == 0
    assert regional or sent.compile.compiles == 1


def test_a_forward_that_raises_passes_its_error_through_and_leaves_no_hook_behind() -> None:
    class Failing(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.layer(x)
            raise ValueError("the model's own error")

    model = Failing()
    session = Session(job="failing", address="off")
    session.attach_model(model)
    with pytest.raises(ValueError, match="the model's own error"):
        model(torch.randn(2, 4))
    assert not model.layer._forward_pre_hooks and session.errors == 0
    session.close()


def test_a_loader_rebuilt_every_epoch_forks_its_workers_every_epoch(rx: tuple[socket.socket, str]) -> None:
    """persistent_workers=False, num_workers=2: three epochs, three iterators, three sets of workers."""
    sock, address = rx
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(3):
        loader = instrument(DataLoader(data(16), batch_size=4, num_workers=2), model=model, optimizer=optimizer,
                            address=address)
        train(loader, model, optimizer)
    sent = last_sent(loader.bottleneck_session, sock)
    loader.bottleneck_session.close()
    assert sent.setup is not None and (sent.setup.loader_iterators, sent.setup.loader_worker_starts) == (3, 3)
    assert exported(sent, "bottleneck_train_dataloader_worker_starts_total") == 3.0
    assert sent.loader is not None and not sent.loader.persistent_workers and sent.loader.num_workers == 2


def test_persistent_workers_start_once_beside_an_evaluation_loader_forked_every_epoch(
        rx: tuple[socket.socket, str]) -> None:
    """The training loader's persistent workers keep their PIDs across epochs while a plain evaluation loader,
    iterated in between, forks its own every time: only the evaluation loader's count as new each epoch."""
    sock, address = rx
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = instrument(DataLoader(data(16), batch_size=4, num_workers=2, persistent_workers=True), model=model,
                        optimizer=optimizer, address=address)
    session = loader.bottleneck_session
    evaluation = instrument(DataLoader(data(8), batch_size=4, num_workers=2), model=model, session=session)
    for _ in range(3):
        train(loader, model, optimizer)
        with torch.no_grad():
            for (x,) in evaluation:
                model(x)
    sent = last_sent(session, sock)
    session.close()
    assert sent.setup is not None and (sent.setup.loader_iterators, sent.setup.loader_worker_starts) == (6, 4)


def test_setup_facts_in_a_datagram_are_checked_like_the_rest() -> None:
    good = full_payload("bert", 0)
    assert validate(encode.encode(good)).setup is not None
    bad = [
        ({"autocast_forwards": 41}, "bad_number", "setup.autocast_forwards: more than sampled_forwards"),
        ({"loader_worker_starts": 4}, "bad_number", "setup.loader_worker_starts: more than loader_iterators"),
        ({"process_group_backend": "gloo\"} 1"}, "bad_label", "setup.process_group_backend"),
        ({"parameters_dtype": 16}, "bad_schema", "setup.parameters_dtype: expected a string"),
        ({"compute_capability": 800.0}, "bad_number", "setup.compute_capability"),
        ({"float32_matmul_precision": "tf32"}, "bad_label",
         "setup.float32_matmul_precision: 'tf32' is none of highest, high, medium"),
        ({"float32_matmul_precision": 32}, "bad_schema", "setup.float32_matmul_precision: expected a string"),
        ({"data_parallel_devices": -1}, "bad_number", "setup.data_parallel_devices"),
        ({"threads": 4}, "bad_schema", "setup.threads: unknown key"),
    ]
    for change, reason, detail in bad:
        payload = {**good, "setup": {**good["setup"], **change}}
        with pytest.raises(Rejected, match=detail) as caught:
            validate(encode.encode(payload))
        assert caught.value.reason == reason, change
    missing = {**good, "setup": {k: v for k, v in good["setup"].items() if k != "sampled_forwards"}}
    with pytest.raises(Rejected, match=r"setup\.sampled_forwards: missing"):
        validate(encode.encode(missing))
    older = {k: v for k, v in good.items() if k != "setup"}  # a hook from before the setup facts
    assert validate(encode.encode(older)).setup is None


@pytest.mark.live
def test_a_job_forking_its_workers_every_epoch_is_told_so_and_one_with_persistent_workers_is_not(
        tmp_path: Path) -> None:
    """Two CPU jobs side by side, 2 DataLoader workers each over the same 64-step epochs (a few seconds each):
    one leaves persistent_workers off, so every epoch forks its workers again. Diagnosed over 40 s once both
    have warmed up (70 steps: past the first epoch)."""
    sock = tmp_path / "push.sock"
    jobs = {"reforking": ["--fork-workers-every-epoch"], "persistent": []}
    trainers = {job: subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "hook_trainer.py"), "--dataset", "fast", "--workers", "2",
         "--stop-file", str(tmp_path / f"{job}.stop"), *extra],
        env={**os.environ, "BOTTLENECK_PUSH_ADDRESS": f"unix://{sock}", "BOTTLENECK_JOB": job,
             "BOTTLENECK_PUSH_INTERVAL": "0.5", "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for job, extra in jobs.items()}
    try:
        stepped(sock, trainers.values(), [(job, 0) for job in trainers], steps=70, timeout=240)
        report = diagnosed(sock, 40, interval=2)
    finally:
        for job in trainers:
            (tmp_path / f"{job}.stop").touch()
        stop_all(trainers.values())
    restarted = {v["labels"].get("training_job"): v["value"] for v in report["verdicts"]
                 if v["alert"] == "BottleneckLoaderWorkersRestarted"}
    assert set(restarted) == {"reforking"}, (report["verdicts"], report["missing"])
    # Worker starts an hour, well above the threshold: an epoch every few seconds forks a new set.
    assert restarted["reforking"] > 10 * float(PARAMETERS["loader_worker_starts_per_hour"].default), restarted
