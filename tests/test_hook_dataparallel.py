"""The forward wrapper of a module that a ``torch.nn.DataParallel`` replicates over several GPUs, on the CPU.

DataParallel's own ``forward`` runs, and each replica is made by torch's own ``_replicate_for_data_parallel``
(what ``torch.nn.parallel.replicate`` calls, a copy of the module's ``__dict__``) and run in a thread of its
own, as ``parallel_apply`` runs them. Only what needs GPUs is done by its CPU equivalent (``CpuDataParallel``):
splitting the batch, broadcasting the parameters, gathering the outputs.
"""

from __future__ import annotations

import socket
import threading
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from bottleneck_exporter.hook import instrument
from bottleneck_exporter.hook.forward import InPlaceOf
from tests.datagrams import received

pytestmark = pytest.mark.torch

DEVICES = 2


class Recorded(torch.nn.Linear):
    """A Linear that records which module object ran each forward: the original or one of its replicas."""

    def __init__(self) -> None:
        super().__init__(4, 1)
        self.ran: list[Any] = []  # shared with the replicas (a copy of __dict__ holds the same list)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.ran.append(self)
        return super().forward(x)


class CpuDataParallel(torch.nn.DataParallel):  # type: ignore[type-arg]
    """DataParallel over DEVICES "GPUs" that are the CPU: its own forward, with the parts that move tensors
    between GPUs done on the CPU."""

    def __init__(self, module: torch.nn.Module) -> None:
        super().__init__(module)  # no GPU: no device_ids, DataParallel would call the module as it is
        self.device_ids = list(range(DEVICES))
        self.src_device_obj = torch.device("cpu")
        self.output_device = 0

    def scatter(self, inputs: Any, kwargs: Any, device_ids: Any) -> Any:
        chunks = inputs[0].chunk(len(device_ids))
        return [(chunk,) for chunk in chunks], [dict(kwargs or {}) for _ in chunks]

    def replicate(self, module: Any, device_ids: Any) -> Any:
        # torch.nn.parallel.replicate for a module without children: torch's copy of the module per device, the
        # parameters set on it as differentiable copies (the broadcast's, here clones).
        replicas = []
        for _ in device_ids:
            replica = module._replicate_for_data_parallel()
            for name, parameter in module._parameters.items():
                setattr(replica, name, parameter.clone())
            replicas.append(replica)
        return replicas

    def parallel_apply(self, replicas: Any, inputs: Any, kwargs: Any) -> Any:
        outputs: list[Any] = [None] * len(replicas)
        grad = torch.is_grad_enabled()

        def run(index: int) -> None:
            torch.set_grad_enabled(grad)  # as parallel_apply's workers do: grad mode is per thread
            outputs[index] = replicas[index](*inputs[index], **kwargs[index])

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(replicas))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return outputs

    def gather(self, outputs: Any, output_device: Any) -> Any:
        return torch.cat(outputs)


def test_each_replica_of_an_instrumented_module_runs_its_own_forward(rx: tuple[socket.socket, str]) -> None:
    """Regression: the replicas copied the wrapper with the module's __dict__, and it ran the original module's
    forward for each of them (with the parameters on the first GPU and the replica's inputs on its own GPU:
    a device mismatch raised into training), from every replica's thread at once. The Hugging Face Trainer
    hands its callbacks the module that its DataParallel wraps."""
    sock, address = rx
    torch.manual_seed(0)
    model = Recorded()
    parallel = CpuDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = instrument(DataLoader(TensorDataset(torch.randn(24, 4)), batch_size=8), model=model,
                        optimizer=optimizer, address=address, interval=60)
    steps = 0
    for (x,) in loader:
        model.ran.clear()
        optimizer.zero_grad()
        parallel(x).sum().backward()
        optimizer.step()
        steps += 1
        assert len(model.ran) == DEVICES and model not in model.ran, "a replica ran the original's forward"
        assert all(not isinstance(r.__dict__.get(name), InPlaceOf) for r in model.ran
                   for name in ("forward", "_replicate_for_data_parallel")), "a replica kept the hook's wrappers"
        assert model.weight.grad is not None  # the replicas' gradients reach the trained parameters
    session = loader.bottleneck_session
    session.flush()
    sent = received(sock)[-1]
    session.close()
    assert steps == 3 and sent.steps == 3 and sent.samples == 24
    # From the first replication on, the DataParallel is timed on the training thread: the forwards of the
    # steps after the first, and the DataParallel's GPUs at its first timed forward.
    assert sent.phase_seconds["forward"] > 0
    assert sent.setup is not None and sent.setup.data_parallel_devices == DEVICES
    assert "forward" not in model.__dict__ and "_replicate_for_data_parallel" not in model.__dict__
