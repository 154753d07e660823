"""What the training hook costs per step: the same tiny CPU training step with and without it, side by side.

    PYTHONPATH=. python benchmarks/hook_overhead.py [--pairs 6000]

Two identical setups (model, optimizer, DataLoader over in-memory tensors, one torch thread) take turns step
by step, so whatever else the machine does hits both alike; the hooked one is instrumented with
``exporter.hook.instrument`` and sends its datagrams (once a second as by default, and at the end of each
pass over its 128 batches) to a live Unix socket, as with a running exporter. Printed: the median step time
of each, the median of the per-pair differences (the added cost), the datagrams' own cost spread over the
steps (the median leaves those steps out), and the same median for two *unhooked* setups, which shows this
machine's noise floor. Also the hook's bookkeeping alone (its entry points in a loop with nothing else, warm
caches): the floor of what it can add.
"""

from __future__ import annotations

import argparse
import itertools
import os
import socket
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

from exporter.hook import instrument
from exporter.hook.session import Session


class Setup:
    def __init__(self, address: str | None) -> None:
        torch.manual_seed(0)
        self.model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.001)
        loader: Any = DataLoader(TensorDataset(torch.randn(4096, 64), torch.randn(4096, 1)), batch_size=32)
        if address is not None:
            loader = instrument(loader, model=self.model, optimizer=self.optimizer, address=address)
        self.loader = loader
        self.iterator = iter(loader)

    def step(self) -> float:
        start = time.perf_counter()
        try:
            x, y = next(self.iterator)
        except StopIteration:
            self.iterator = iter(self.loader)
            x, y = next(self.iterator)
        self.optimizer.zero_grad()
        torch.nn.functional.mse_loss(self.model(x), y).backward()
        self.optimizer.step()
        return time.perf_counter() - start


def paired(first: Setup, second: Setup, pairs: int, drain: socket.socket) -> tuple[float, float, float]:
    """Median step time of each setup and the median per-pair difference (second minus first)."""
    a_times, b_times, differences = [], [], []
    for index in range(pairs):
        if index % 2:  # alternate which goes first: neither always runs right after the other
            a, b = first.step(), second.step()
        else:
            b, a = second.step(), first.step()
        a_times.append(a)
        b_times.append(b)
        differences.append(b - a)
        if index % 256 == 0:
            _drain(drain)
    return statistics.median(a_times), statistics.median(b_times), statistics.median(differences)


def _drain(sock: socket.socket) -> None:
    while True:
        try:
            sock.recv(65536)
        except BlockingIOError:
            return


class _Batch:
    """Stands in for a batch tensor in the bookkeeping loop: only its shape is read."""

    shape = (32, 64)


class _Module:
    def forward(self, x: Any) -> Any:
        return x

    def parameters(self) -> Iterator[Any]:
        return iter(())


class _Hook:
    def remove(self) -> None:
        pass


class _Optimizer:
    """Stands in for an optimizer: keeps the step hooks the session registers, to call them by hand."""

    def __init__(self) -> None:
        self.hooks: list[Callable[[Any, Any, Any], None]] = []

    def register_step_pre_hook(self, hook: Callable[[Any, Any, Any], None]) -> _Hook:
        self.hooks.append(hook)
        return _Hook()

    register_step_post_hook = register_step_pre_hook


def _empty_hook(optimizer: Any, args: Any, kwargs: Any) -> None:
    pass


def bookkeeping_only(steps: int) -> float:
    """The hook's own per-step work, warm: a loop of fetch, forward and optimizer step with nothing in them,
    instrumented through the same entry points, minus the same loop without the hook."""

    def loop(batches: Iterator[Any], module: Any, pre: Callable[..., None], post: Callable[..., None]) -> float:
        start = time.perf_counter()
        for _ in range(steps):
            batch = next(batches)
            module.forward(batch)
            pre(None, (), {})
            post(None, (), {})
        return (time.perf_counter() - start) / steps

    bare = loop(itertools.repeat(_Batch()), _Module(), _empty_hook, _empty_hook)
    session = Session(address="off")
    module, optimizer = _Module(), _Optimizer()
    loader = instrument(itertools.repeat(_Batch()), model=module, optimizer=optimizer, session=session)
    pre, post = optimizer.hooks
    hooked = loop(iter(loader), module, pre, post)
    assert session.clock.steps == steps and session.errors == 0
    session.close()
    return hooked - bare


class FlushTimer:
    """Stands in for the session's ``flush`` and times it: a datagram (folding the mark log into totals,
    encoding, sending) is an outlier step that the median leaves out, so its cost is reported apart."""

    def __init__(self, session: Session) -> None:
        self._flush = session.flush
        self.seconds = 0.0
        self.calls = 0
        setattr(session, "flush", self)  # noqa: B010 -- shadows the method on this one instance

    def __call__(self, now: float | None = None) -> None:
        start = time.perf_counter()
        self._flush(now)
        self.seconds += time.perf_counter() - start
        self.calls += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--pairs", type=int, default=6000, help="step pairs per comparison (default: %(default)s)")
    args = parser.parse_args()
    torch.set_num_threads(1)

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "push.sock")
        receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        receiver.bind(path)
        receiver.setblocking(False)
        plain, hooked, control = Setup(None), Setup(f"unix://{path}"), Setup(None)
        for setup in (plain, hooked, control):  # warm-up
            for _ in range(200):
                setup.step()
        flushes = FlushTimer(hooked.loader.bottleneck_session)
        base, with_hook, added = paired(plain, hooked, args.pairs, receiver)
        _, _, noise = paired(plain, control, args.pairs, receiver)
        receiver.close()
    floor = bookkeeping_only(50000)

    print(f"torch {torch.__version__}, {args.pairs} step pairs, 1 torch thread")
    print(f"median step without hook:        {base * 1e6:8.1f} us")
    print(f"median step with hook:           {with_hook * 1e6:8.1f} us")
    print(f"added per step (median of pairs): {added * 1e6:7.1f} us = {added / base:.1%} of this step, "
          f"{added / 0.002:.2%} of a 2 ms step")
    amortized = flushes.seconds / args.pairs
    print(f"datagrams (fold + encode + send): {flushes.calls}, {flushes.seconds / max(flushes.calls, 1) * 1e6:.0f} us "
          f"each = {amortized * 1e6:.1f} us per step amortized (one per pass of {len(hooked.loader)} batches)")
    print(f"added per step, median + datagrams: {(added + amortized) * 1e6:5.1f} us")
    print(f"noise floor (unhooked vs unhooked): {noise * 1e6:5.1f} us")
    print(f"hook bookkeeping alone (warm):   {floor * 1e6:8.2f} us per step")


if __name__ == "__main__":
    main()
