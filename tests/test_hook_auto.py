"""The automatic instrumentation (``bottleneck_exporter.hook.auto``) in this process, on real PyTorch loops that
nobody instrumented: what it measures, and what it costs the loop (no global module hook once the model is
found, one optimizer hook each way, nothing left behind when it detaches or steps aside)."""

from __future__ import annotations

import importlib
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from prometheus_client import CollectorRegistry
from torch.utils.data import DataLoader, Dataset, TensorDataset

from bottleneck_exporter.hook import auto, instrument
from bottleneck_exporter.hook.forward import TimedForward
from bottleneck_exporter.push.receiver import PushReceiver
from bottleneck_exporter.push.store import JobStore
from tests.conftest import ROOT, wait_until

pytestmark = pytest.mark.torch

OPTIMIZER_HOOKS = importlib.import_module("torch.optim.optimizer")
MODULE_HOOKS = importlib.import_module("torch.nn.modules.module")
BATCH = 8


def hooks() -> tuple[int, int, int]:
    """Global module forward pre-hooks, optimizer step pre-hooks, optimizer step post-hooks."""
    return (len(MODULE_HOOKS._global_forward_pre_hooks), len(OPTIMIZER_HOOKS._global_optimizer_pre_hooks),
            len(OPTIMIZER_HOOKS._global_optimizer_post_hooks))


@pytest.fixture
def attached(monkeypatch: pytest.MonkeyPatch) -> Iterator[auto.Auto]:
    monkeypatch.setenv("BOTTLENECK_PUSH_ADDRESS", "off")
    before, iterate = hooks(), DataLoader.__iter__
    attached = auto.attach()
    assert attached is not None
    yield attached
    auto.detach()
    assert hooks() == before and DataLoader.__iter__ is iterate, "detach() left hooks behind"


def regression() -> tuple[torch.nn.Module, torch.optim.Optimizer, DataLoader]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    data = TensorDataset(torch.randn(64, 16), torch.randn(64, 1))
    return model, torch.optim.SGD(model.parameters(), lr=0.01), DataLoader(data, batch_size=BATCH)


def train(model: torch.nn.Module, optimizer: torch.optim.Optimizer, loader: Any, epochs: int = 1,
          before: Any = None) -> int:
    steps = 0
    for _ in range(epochs):
        for x, y in loader:
            optimizer.zero_grad()
            if before is not None:
                x = before(x)
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
            steps += 1
        with torch.no_grad():  # an evaluation pass: neither its batches nor its forwards are steps
            for x, _ in loader:
                model(x)
    return steps


def test_the_global_module_hook_is_gone_after_the_first_step_and_the_model_is_wrapped(attached: auto.Auto) -> None:
    model, optimizer, loader = regression()
    module_hooks, pre, post = hooks()
    iterator = iter(loader)
    assert hooks() == (module_hooks + 1, pre, post), "the model is looked for from the training loader's iter() on"
    x, y = next(iterator)
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
    assert hooks() == (module_hooks, pre, post), "the global module hook outlived the search"
    assert isinstance(model.__dict__.get("forward"), TimedForward)
    assert not any("forward" in m.__dict__ for m in model.children()), "an inner module was taken for the model"
    steps = 1 + train(model, optimizer, loader, epochs=2)
    totals = attached.session.clock.totals()
    assert totals.steps == steps
    assert totals.samples == steps * BATCH
    data_wait, forward, backward, optimizer_time, _ = totals.phase_seconds
    assert data_wait > 0 and forward > 0 and backward > 0 and optimizer_time > 0
    assert hooks() == (module_hooks, pre, post)


def test_modules_without_parameters_to_train_are_not_taken_for_the_model(attached: auto.Auto) -> None:
    model, optimizer, loader = regression()
    frozen = torch.nn.Linear(16, 16).requires_grad_(False)  # a frozen feature extractor, called first
    augment = torch.nn.Dropout(0.1)  # an augmentation module: no parameters at all
    train(model, optimizer, loader, before=lambda x: augment(frozen(x)))
    assert isinstance(model.__dict__.get("forward"), TimedForward)
    assert "forward" not in frozen.__dict__ and "forward" not in augment.__dict__


def test_a_model_called_from_a_modules_training_step_gets_that_training_step_timed(attached: auto.Auto) -> None:
    """A LightningModule on one device: Lightning calls its training_step, which calls the layers."""

    class Regression(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(16, 1)

        def training_step(self, batch: Any) -> torch.Tensor:
            x, y = batch
            time.sleep(0.01)  # the loss and whatever else the step computes
            return torch.nn.functional.mse_loss(self.layer(x), y)

    _, _, loader = regression()
    module = Regression()
    optimizer = torch.optim.SGD(module.parameters(), lr=0.01)
    for batch in loader:
        optimizer.zero_grad()
        module.training_step(batch).backward()
        optimizer.step()
    assert isinstance(module.__dict__.get("training_step"), TimedForward)
    assert "forward" not in module.layer.__dict__
    forward = attached.session.clock.totals().phase_seconds[1]
    assert forward >= 0.01 * (len(loader) - 1)  # all but the first step, which ran before it was found


def test_a_step_given_a_closure_times_the_optimizer_from_the_closures_end(attached: auto.Auto) -> None:
    """Lightning runs training_step and backward inside optimizer.step(closure). The optimizer here calls
    ``super().step()``: torch's step wrapper, which calls the hooks, runs twice (SGD's own is wrapped once an SGD
    exists, as regression()'s does), and one step is still one step."""

    class SlowSGD(torch.optim.SGD):
        def step(self, closure: Any = None) -> Any:  # type: ignore[override]
            loss = super().step(closure)
            time.sleep(0.03)  # the update
            return loss

    model, _, loader = regression()
    optimizer = SlowSGD(model.parameters(), lr=0.01)
    steps = 0
    for x, y in loader:
        def closure(x: torch.Tensor = x, y: torch.Tensor = y) -> torch.Tensor:
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            time.sleep(0.02)  # backward
            return loss

        optimizer.step(closure)
        steps += 1
    totals = attached.session.clock.totals()
    _, forward, backward, optimizer_time, _ = totals.phase_seconds
    assert totals.steps == steps
    assert optimizer_time >= 0.03 * steps, totals
    assert backward >= 0.02 * (steps - 1), totals  # the first step's forward runs before the model is wrapped
    assert forward > 0


def test_a_step_that_raised_leaves_the_next_steps_counted(attached: auto.Auto) -> None:
    """torch runs no post-hook after a step that raised: the next step must not be taken for one inside it."""

    class FlakySGD(torch.optim.SGD):
        calls = 0

        def step(self, closure: Any = None) -> Any:  # type: ignore[override]
            FlakySGD.calls += 1
            if FlakySGD.calls == 3:
                raise RuntimeError("inf in the gradients")
            return super().step(closure)

    model, _, loader = regression()
    optimizer = FlakySGD(model.parameters(), lr=0.01)
    steps = 0
    for x, y in loader:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        try:
            optimizer.step()
            steps += 1
        except RuntimeError:
            pass  # the loop skips the batch
    assert attached.session.clock.totals().steps == steps == len(loader) - 1


def test_it_steps_aside_when_the_script_instruments_itself(attached: auto.Auto) -> None:
    model, optimizer, loader = regression()
    module_hooks, pre, post = hooks()
    instrumented = instrument(loader, model=model, optimizer=optimizer, address="off")
    steps = train(model, optimizer, instrumented)
    assert attached.off and attached.session is None
    assert hooks() == (module_hooks, pre - 1, post - 1), "its own optimizer hooks are still in place"
    assert getattr(DataLoader.__iter__, "__wrapped__", None) is None, "DataLoader.__iter__ is still wrapped"
    own = instrumented.bottleneck_session
    assert own.clock.totals().steps == steps
    own.close()  # an active session would keep the next test's automatic instrumentation aside


class SlowDataset(Dataset):
    def __len__(self) -> int:
        return 32

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(0.002)
        return torch.randn(16), torch.randn(1)


def test_dataloader_workers_never_send(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    receiver = PushReceiver(JobStore(max_jobs=4, max_ranks=4, expiry=600))
    receiver.bind_unix(str(tmp_path / "push.sock"))
    receiver.start()
    monkeypatch.setenv("BOTTLENECK_PUSH_ADDRESS", f"unix://{tmp_path / 'push.sock'}")
    monkeypatch.setenv("BOTTLENECK_PUSH_INTERVAL", "0.05")
    monkeypatch.setenv("BOTTLENECK_JOB", "auto-workers")
    try:
        attached = auto.attach()
        assert attached is not None
        model, optimizer, _ = regression()
        loader = DataLoader(SlowDataset(), batch_size=BATCH, num_workers=2)
        steps = train(model, optimizer, loader, epochs=2)
        auto.detach()  # its last datagram
        registry = CollectorRegistry(auto_describe=False)
        registry.register(receiver)
        labels = {"training_job": "auto-workers", "rank": "0"}
        wait_until(lambda: registry.get_sample_value("bottleneck_train_steps_total", labels) == steps, 20,
                   "the last datagram")
        assert registry.get_sample_value("bottleneck_train_dataloader_num_workers", labels) == 2
        rejected = {s.labels["reason"]: s.value for family in registry.collect() for s in family.samples
                    if s.name == "bottleneck_push_rejected_total"}
        assert not any(rejected.values()), rejected  # a worker's datagram would be refused: not its rank's owner
    finally:
        auto.detach()
        receiver.stop()


def python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_starting_it_costs_an_interpreter_nothing_until_torch_is_imported() -> None:
    """Every Python process of a command run under ``run`` starts it, torch or not: it loads nothing beyond its
    own three modules (not logging, typing or weakref, which alone cost an interpreter's start-up as much again)."""
    result = python(
        "import sys\n"
        "before = set(sys.modules)\n"
        "from bottleneck_exporter.hook import auto\n"
        "auto.start()\n"
        "loaded = sorted(set(sys.modules) - before)\n"
        "ours = ['bottleneck_exporter', 'bottleneck_exporter.hook', 'bottleneck_exporter.hook.auto']\n"
        "assert loaded == ours, loaded\n"
        "import torch\n"
        "assert auto._attached is not None, 'not attached at the import of torch'\n"
        "assert torch.utils.data.DataLoader.__iter__.__wrapped__ is not None\n")
    assert result.returncode == 0, result.stderr


def test_bottleneck_hook_disable_keeps_it_out() -> None:
    result = python(
        "import os\nos.environ['BOTTLENECK_HOOK_DISABLE'] = '1'\n"
        "from bottleneck_exporter.hook import auto\nauto.start()\nimport torch\n"
        "assert auto._attached is None\n"
        "assert not hasattr(torch.utils.data.DataLoader.__iter__, '__wrapped__')\n")
    assert result.returncode == 0, result.stderr


def test_a_session_that_cannot_start_leaves_the_loop_running_with_one_warning() -> None:
    result = python(
        "import os\nos.environ['BOTTLENECK_PUSH_ADDRESS'] = 'carrier-pigeon://coop'\n"
        "from bottleneck_exporter.hook import auto\nauto.start()\nimport torch\n"
        "from torch.utils.data import DataLoader, TensorDataset\n"
        "model = torch.nn.Linear(4, 1)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for epoch in range(3):\n"
        "    for x, y in DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4):\n"
        "        optimizer.zero_grad()\n"
        "        torch.nn.functional.mse_loss(model(x), y).backward()\n"
        "        optimizer.step()\n"
        "print('trained')\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "trained\n"
    assert result.stderr.count("could not start") == 1, result.stderr
