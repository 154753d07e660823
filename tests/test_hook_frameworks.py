"""The Lightning callback and the Hugging Face TrainerCallback report the same phases on the same tiny run.

Both frameworks are real (the ``frameworks`` dependency group); each run pushes to a real receiver on a Unix
socket. The dataset sleeps in ``__getitem__`` so data wait must dominate; gradient accumulation checks that one
step is one optimizer step in both.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from bottleneck_exporter.push.receiver import PushReceiver
from bottleneck_exporter.push.store import JobStore
from tests.conftest import wait_until
from tests.workloads import ACCUMULATE, BATCH, EPOCHS, FORWARD_SECONDS, ITEMS, fit_huggingface, fit_lightning

pytestmark = pytest.mark.torch

PHASES = ("data_wait", "forward", "backward", "optimizer", "step")


def run_lightning(address: str, output: Path) -> None:
    from bottleneck_exporter.hook.lightning import BottleneckCallback

    fit_lightning(str(output), [BottleneckCallback(job="lightning", address=address)])


def run_huggingface(address: str, output: Path) -> None:
    from bottleneck_exporter.hook.huggingface import BottleneckCallback

    fit_huggingface(str(output), [BottleneckCallback(job="huggingface", address=address)])


@pytest.fixture
def push_receiver(tmp_path: Path) -> Any:
    rx = PushReceiver(JobStore(max_jobs=4, max_ranks=4, expiry=600))
    rx.bind_unix(str(tmp_path / "push.sock"))
    rx.start()
    yield rx
    rx.stop()


def reported(rx: PushReceiver, job: str) -> dict[str, float]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(rx)
    # The last datagram may still be in the socket.
    wait_until(lambda: registry.get_sample_value("bottleneck_train_steps_total", {"training_job": job, "rank": "0"})
               == ITEMS // BATCH // ACCUMULATE * EPOCHS, 20, f"every step of {job}", interval=0.05)
    out = {phase: registry.get_sample_value("bottleneck_train_phase_seconds_total",
                                            {"training_job": job, "rank": "0", "phase": phase}) for phase in PHASES}
    for name in ("steps", "samples"):
        out[name] = registry.get_sample_value(f"bottleneck_train_{name}_total", {"training_job": job, "rank": "0"})
    out["batch_size"] = registry.get_sample_value("bottleneck_train_dataloader_batch_size",
                                                  {"training_job": job, "rank": "0"})
    return out  # type: ignore[return-value]


def batch_copies(rx: PushReceiver, job: str) -> tuple[float | None, float | None]:
    """(seconds, copies) the hook timed moving ``job``'s training batches to the device; None where not sent."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(rx)
    labels = {"training_job": job, "rank": "0"}
    return (registry.get_sample_value("bottleneck_train_host_to_device_seconds_total", labels),
            registry.get_sample_value("bottleneck_train_host_to_device_copies_total", labels))


def test_lightning_and_huggingface_callbacks_report_the_same_phases(push_receiver, tmp_path):
    address = f"unix://{push_receiver.unix_path}"
    run_lightning(address, tmp_path / "lightning")
    run_huggingface(address, tmp_path / "hf")
    lightning, huggingface = reported(push_receiver, "lightning"), reported(push_receiver, "huggingface")

    for result in (lightning, huggingface):
        # 24 items / batch 4 = 6 batches per epoch, 2 per optimizer step: 3 steps per epoch, 2 epochs.
        assert result["steps"] == 6
        assert result["samples"] == ITEMS * EPOCHS
        assert result["batch_size"] == BATCH
        assert all(result[phase] > 0 for phase in PHASES), result
        parts = sum(result[phase] for phase in ("data_wait", "forward", "backward", "optimizer"))
        assert parts <= result["step"] * 1.0001, result
        # 40 ms of sleeping per batch against a one-layer model: both see a data-bound run.
        assert result["data_wait"] / result["step"] > 0.6, result
        # Each run sleeps 2 epochs x 24 items x 10 ms = 0.48 s inside the loader: a lower bound of data wait.
        assert result["data_wait"] >= 0.48, result
        # Gradient accumulation: every micro-batch's forward counts, not only the one before the optimizer
        # step (2 epochs x 6 micro-batches x 5 ms).
        assert result["forward"] >= EPOCHS * ITEMS / BATCH * FORWARD_SECONDS, result
    assert 0.5 < lightning["data_wait"] / huggingface["data_wait"] < 2, (lightning, huggingface)
    # accelerate's DataLoaderShard moves Hugging Face's batches inside the iterator: no place to time them apart.
    assert batch_copies(push_receiver, "huggingface") == (None, None)


def test_lightning_batch_copies_are_timed_inside_the_data_wait_and_validations_are_not(push_receiver, tmp_path):
    """Lightning moves each batch with its strategy's batch_to_device, which the callback times. On CPU the copy
    is to the CPU (microseconds): what is checked is which copies count and where their time lies, not what a
    copy to a GPU costs. The validation passes' batches (6 at each epoch's end, while the callback's wrapper is
    in place) go through the same method and are no training step's."""
    address = f"unix://{push_receiver.unix_path}"
    from bottleneck_exporter.hook.lightning import BottleneckCallback

    fit_lightning(str(tmp_path / "lightning"), [BottleneckCallback(job="copies", address=address)], validate=True)
    result = reported(push_receiver, "copies")
    seconds, copies = batch_copies(push_receiver, "copies")
    assert copies == ITEMS // BATCH * EPOCHS, copies  # every micro-batch, accumulated or not
    assert seconds is not None and 0 < seconds < result["data_wait"], (seconds, result)
