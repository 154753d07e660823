"""What the training hook costs a torch.compile'd model: compilations, and time per step, with and without it.

    PYTHONPATH=. python benchmarks/hook_compile.py [--pairs 3000] [--order instrument-first|compiled-module|in-place]
                                                   [--backend eager]

Two identical setups (a 64-64-1 MLP of a module class of its own, batch 32, SGD, one torch thread, a DataLoader
over in-memory tensors), both compiled alike; the hooked one is instrumented in the order ``--order`` names
(``instrument-first``: ``instrument(model=model)`` then ``torch.compile(model)``, the order of issue 22;
``compiled-module``: ``instrument(model=torch.compile(model))``; ``in-place``: instrument, then
``model.compile()``) and sends its datagrams to a live Unix socket. Each setup first steps alone, with dynamo's
compile callbacks counting its compilations (after ``torch._dynamo.reset()``: the twins share the model's code,
whose compiled entries would otherwise serve both); then, warmed up again, they take turns step by step, the
order alternating, so whatever else the machine does hits both alike. Printed: each setup's compilations and
recompilations, the median step of each, and the median of the per-pair differences (what the hook adds to a
compiled step).
The ``eager`` backend (the default) keeps compilation to dynamo's tracing: no C++ compiler needed.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import tempfile
from pathlib import Path
from time import perf_counter
from typing import Any

import torch
import torch._dynamo

from bottleneck_exporter.hook import instrument
from bottleneck_exporter.hook.compiles import CompileClock

WARMUP = 64


class Mlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first = torch.nn.Linear(64, 64)
        self.last = torch.nn.Linear(64, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.last(torch.relu(self.first(x)))


def setup(order: str, hooked: bool, backend: str, address: str) -> tuple[Any, Any, Any]:
    """(the loader, the module the loop calls, the optimizer), compiled as ``order`` says; instrumented in that
    order when ``hooked``."""
    model = Mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.001)
    loader: Any = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(4096, 64)), batch_size=32)

    def hook(module: Any) -> Any:
        return instrument(loader, model=module, optimizer=optimizer, address=address) if hooked else loader

    if order == "compiled-module":
        called = torch.compile(model, backend=backend)
        return hook(called), called, optimizer
    loader = hook(model)
    if order == "in-place":
        model.compile(backend=backend)
        return loader, model, optimizer
    return loader, torch.compile(model, backend=backend), optimizer


def steps(loader: Any, called: Any, optimizer: Any) -> Any:
    """An endless training loop over ``loader``, one step per next(), each yielding its time."""
    while True:
        for (x,) in loader:
            started = perf_counter()
            optimizer.zero_grad()
            called(x).pow(2).mean().backward()
            optimizer.step()
            yield perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=3000)
    parser.add_argument("--order", choices=["instrument-first", "compiled-module", "in-place"],
                        default="instrument-first")
    parser.add_argument("--backend", default="eager")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        receiver.bind(str(Path(tmp) / "rx.sock"))
        receiver.setblocking(False)
        address = f"unix://{tmp}/rx.sock"
        loops = {}
        for name in ("plain", "hooked"):
            clock = CompileClock()
            loops[name] = steps(*setup(args.order, name == "hooked", args.backend, address))
            torch._dynamo.reset()  # the twin must compile its own frames, not find the first one's
            clock.attach()
            for _ in range(WARMUP):
                next(loops[name])
            clock.detach()
            print(f"{name}: {clock.compiles} compilations, {clock.recompiles} recompilations in {WARMUP} steps")
        for _ in range(WARMUP):  # the reset before the hooked setup's count dropped the plain one's code
            for loop in loops.values():
                next(loop)
        times: dict[str, list[float]] = {"plain": [], "hooked": []}
        differences = []
        for pair in range(args.pairs):
            for name in (("plain", "hooked") if pair % 2 else ("hooked", "plain")):
                times[name].append(next(loops[name]))
            differences.append(times["hooked"][-1] - times["plain"][-1])
            while True:  # drain the datagrams, as an exporter would
                try:
                    receiver.recv(65536)
                except BlockingIOError:
                    break
        receiver.close()
    print(f"median step: plain {statistics.median(times['plain']) * 1e6:.1f} us, hooked "
          f"{statistics.median(times['hooked']) * 1e6:.1f} us")
    print(f"added per step (median of {args.pairs} pairs): {statistics.median(differences) * 1e6:.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
