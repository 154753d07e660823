"""Training setups the hook must measure right, each in a real PyTorch CPU loop with known costs.

Each setup's data loading, forward and optimizer steps sleep for known times, so the hook's totals have
lower bounds the test can hold them to (the machine is shared: no upper bounds on wall-clock time), and its
step and sample counts are exact: a GAN's two optimizers, AMP with a GradScaler that skips steps, an
IterableDataset, persistent DataLoader workers, a loader re-created every epoch, a torch.compile'd model.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, TensorDataset

from bottleneck_exporter.hook import instrument
from bottleneck_exporter.hook.session import Session
from bottleneck_exporter.hook.timing import DATA_WAIT, FORWARD, OPTIMIZER, Totals
from bottleneck_exporter.wire.schema import validate
from tests.datagrams import received

pytestmark = pytest.mark.torch

MS = 0.001


class Sleepy(torch.nn.Module):
    """A module whose forward takes at least ``seconds`` more: a known forward cost."""

    def __init__(self, inner: torch.nn.Module, seconds: float) -> None:
        super().__init__()
        self.inner, self.seconds = inner, seconds

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(self.seconds)
        return self.inner(x)


class SlowSGD(torch.optim.SGD):
    """SGD whose step takes at least ``seconds`` more: a known optimizer cost."""

    def __init__(self, params: Any, seconds: float) -> None:
        super().__init__(params, lr=0.01)
        self.seconds = seconds

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        time.sleep(self.seconds)
        return super().step(closure)


class SlowItems(Dataset):
    def __init__(self, size: int, seconds: float, width: int = 4) -> None:
        self.size, self.seconds = size, seconds
        self.x = torch.randn(size, width, generator=torch.Generator().manual_seed(0))

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(self.seconds)
        return self.x[index]


def consistent(totals: Totals) -> None:
    """The phases partition the step: they add up to at most the step time, none negative."""
    assert all(seconds >= 0 for seconds in totals.phase_seconds)
    assert sum(totals.phase_seconds[:4]) <= totals.step_seconds * 1.0001


def test_gan_two_optimizers_one_step_per_batch_both_forwards_and_both_optimizer_steps_counted():
    torch.manual_seed(0)
    generator, discriminator = Sleepy(torch.nn.Linear(4, 4), 3 * MS), Sleepy(torch.nn.Linear(4, 1), 2 * MS)
    opt_g, opt_d = SlowSGD(generator.parameters(), 2 * MS), SlowSGD(discriminator.parameters(), 2 * MS)
    session = Session(address="off")
    loader = instrument(DataLoader(TensorDataset(torch.randn(24, 4)), batch_size=4),
                        model=[generator, discriminator], optimizer=[opt_g, opt_d], session=session)
    for _ in range(2):
        for (real,) in loader:
            fake = generator(torch.randn(4, 4))
            opt_d.zero_grad()
            (discriminator(fake.detach()).mean() - discriminator(real).mean()).backward()
            opt_d.step()
            opt_g.zero_grad()
            (-discriminator(fake).mean()).backward()
            opt_g.step()
    totals = session.clock.totals()
    assert (totals.steps, totals.samples) == (12, 48)  # one step per batch, not one per optimizer step
    per_step = [seconds / totals.steps for seconds in totals.phase_seconds]
    assert per_step[FORWARD] >= 3 * MS + 3 * 2 * MS  # the generator once, the discriminator three times
    assert per_step[OPTIMIZER] >= 2 * 2 * MS  # both optimizers' steps
    consistent(totals)
    session.close()


def amp_steps(loader: Any, model: torch.nn.Module, optimizer: torch.optim.Optimizer, scaler: Any) -> None:
    """One pass of a bfloat16 autocast loop with a GradScaler over ``loader``."""
    for (batch,) in loader:
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(batch).float().pow(2).mean()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()


def test_amp_bfloat16_steps_the_gradscaler_skips_are_steps_and_counted_as_skipped():
    torch.manual_seed(0)
    x = torch.randn(40, 8)
    x[[9, 26]] = 3e38  # two batches (of 5) overflow: inf loss, inf gradients, the scaler skips their step
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    ran = []
    optimizer.register_step_post_hook(lambda *args: ran.append(1))
    scaler = torch.amp.GradScaler("cpu")
    session = Session(address="off")
    amp_steps(instrument(DataLoader(TensorDataset(x), batch_size=5), model=model, optimizer=optimizer,
                         scaler=scaler, session=session), model, optimizer, scaler)
    totals = session.clock.totals()
    assert len(ran) == 6  # the optimizer really stepped 6 times of 8
    assert (totals.steps, totals.skipped_steps, totals.samples) == (8, 2, 40)
    consistent(totals)
    snapshot = validate(session._datagram())
    assert (snapshot.steps, snapshot.skipped_steps) == (8, 2)
    session.close()
    assert "step" not in scaler.__dict__  # closing puts the scaler's own step back


def test_iterable_dataset_batches_are_counted_from_their_shapes_and_its_wait_measured():
    class Stream(IterableDataset):
        def __iter__(self) -> Iterator[torch.Tensor]:
            for index in range(50):
                time.sleep(MS)
                yield torch.full((3,), float(index))

    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    session = Session(address="off")
    loader = instrument(DataLoader(Stream(), batch_size=8), model=model, optimizer=optimizer, session=session)
    for _ in range(2):
        for batch in loader:
            optimizer.zero_grad()
            model(batch).sum().backward()
            optimizer.step()
    totals = session.clock.totals()
    assert (totals.steps, totals.samples) == (14, 100)  # 6 batches of 8 and one of 2, twice
    assert totals.phase_seconds[DATA_WAIT] >= 100 * MS
    consistent(totals)
    session.close()


def test_persistent_workers_keep_their_pids_across_epochs_and_forked_workers_never_send(tmp_path: Path):
    """Workers are forked while the session sends datagrams: they must neither send nor hang."""
    rx = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    rx.bind(str(tmp_path / "rx.sock"))
    rx.setblocking(False)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = instrument(DataLoader(SlowItems(32, 2 * MS), batch_size=4, num_workers=2, persistent_workers=True),
                        model=model, optimizer=optimizer, address=f"unix://{tmp_path}/rx.sock", interval=0.05)
    session = loader.bottleneck_session
    pids = []
    for _ in range(3):
        for batch in loader:
            optimizer.zero_grad()
            model(batch).sum().backward()
            optimizer.step()
        pids.append(list(session.worker_pids))
    session.close()
    assert len(pids[0]) == 2 and pids[0] == pids[1] == pids[2], pids
    datagrams = received(rx)
    assert datagrams and {d.pid for d in datagrams} == {os.getpid()}
    last = datagrams[-1]
    assert (last.steps, last.samples) == (24, 96)
    assert last.loader is not None and last.loader.persistent_workers and list(last.loader.worker_pids) == pids[0]


def test_loader_recreated_every_epoch_goes_on_with_one_session(tmp_path: Path):
    """instrument() called every epoch with a new DataLoader: one session, the optimizer hooked once."""
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = TensorDataset(torch.randn(20, 4))
    sessions = []
    for _ in range(3):
        loader = instrument(DataLoader(data, batch_size=4, shuffle=True), model=model, optimizer=optimizer,
                            address=f"unix://{tmp_path}/nobody.sock")
        sessions.append(loader.bottleneck_session)
        for (batch,) in loader:
            optimizer.zero_grad()
            model(batch).sum().backward()
            optimizer.step()
    session = sessions[0]
    assert all(s is session for s in sessions)
    assert len(optimizer._optimizer_step_pre_hooks) == 1 and len(optimizer._optimizer_step_post_hooks) == 1
    totals = session.clock.totals()
    assert (totals.steps, totals.samples) == (15, 60)  # not counted two or three times over
    consistent(totals)
    session.close()


@pytest.mark.filterwarnings("ignore:Dynamo does not know how to trace the builtin `time.sleep")
def test_compiled_model_is_timed_as_the_module_called():
    """``torch.compile`` returns a wrapper module (OptimizedModule); instrumenting it times every call of
    the compiled forward (here with a graph break at the sleep), and the first call's compilation shows as
    forward time of the first step."""
    import torch._dynamo

    torch._dynamo.reset()
    torch.manual_seed(0)
    compiled = torch.compile(Sleepy(torch.nn.Linear(4, 1), 2 * MS))
    optimizer = torch.optim.SGD(compiled.parameters(), lr=0.01)
    session = Session(address="off")
    loader = instrument(DataLoader(TensorDataset(torch.randn(24, 4)), batch_size=4), model=compiled,
                        optimizer=optimizer, session=session)
    for _ in range(2):
        for (batch,) in loader:
            optimizer.zero_grad()
            compiled(batch).sum().backward()
            optimizer.step()
    totals = session.clock.totals()
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] >= 1  # it was compiled, not run eagerly
    assert (totals.steps, totals.samples, session.errors) == (12, 48, 0)
    assert totals.phase_seconds[FORWARD] >= 12 * 2 * MS
    consistent(totals)
    session.close()


def test_a_gradscaler_reused_for_the_next_model_counts_for_the_new_session_and_frees_the_old():
    """A sweep keeps one GradScaler for every trial: each trial's session counts its own skipped steps, and
    a trial the user let go of (never closed) is freed, not kept alive by the scaler."""
    import gc
    import weakref

    scaler = torch.amp.GradScaler("cpu")

    def trial() -> Session:
        x = torch.randn(20, 8)
        x[7] = 3e38  # one batch (of 5) overflows: the scaler skips its step
        model = torch.nn.Linear(8, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        loader = instrument(DataLoader(TensorDataset(x), batch_size=5), model=model, optimizer=optimizer,
                            scaler=scaler, address="off")
        amp_steps(loader, model, optimizer, scaler)
        session: Session = loader.bottleneck_session
        return session

    first = trial()
    assert (first.clock.steps, first.clock.totals().skipped_steps) == (4, 1)
    gone = weakref.ref(first)
    del first
    gc.collect()
    assert gone() is None
    second = trial()
    assert (second.clock.steps, second.clock.totals().skipped_steps) == (4, 1)
    second.close()
    assert "step" not in scaler.__dict__
