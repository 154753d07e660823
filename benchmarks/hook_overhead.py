"""What the training hook costs per step: the same tiny CPU training step with and without it, side by side.

    python benchmarks/hook_overhead.py [--pairs 6000]

Two identical setups (model, optimizer, DataLoader over in-memory tensors, one torch thread) take turns step
by step, so whatever else the machine does hits both alike; the hooked one is instrumented with
``exporter.hook.instrument`` and sends its datagrams, once a second as by default, to a live Unix socket (as
with a running exporter). Printed: the median step time of each, the median of the per-pair differences (the
added cost), and the same figure for two *unhooked* setups, which shows this machine's noise floor. Also
the hook's bookkeeping alone (no torch, warm caches): the floor of what it can add.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import tempfile
import time
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

from exporter.hook import instrument
from exporter.hook.session import Session
from exporter.hook.timing import BACKWARD, DATA_WAIT, FORWARD, OPTIMIZER, OTHER


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


def bookkeeping_only(steps: int) -> float:
    session = Session(address="off")
    start = time.perf_counter()
    for _ in range(steps):
        session.mark(DATA_WAIT)
        session.fetched(None)
        session.mark(FORWARD)
        session.mark(BACKWARD)
        session.mark(OPTIMIZER)
        session.end_step()
    elapsed = time.perf_counter() - start
    session.mark(OTHER)
    session.close()
    return elapsed / steps


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
        base, with_hook, added = paired(plain, hooked, args.pairs, receiver)
        _, _, noise = paired(plain, control, args.pairs, receiver)
        sent = hooked.loader.bottleneck_session.transport.sent
        receiver.close()
    floor = bookkeeping_only(50000)

    print(f"torch {torch.__version__}, {args.pairs} step pairs, 1 torch thread, datagrams sent: {sent}")
    print(f"median step without hook:        {base * 1e6:8.1f} us")
    print(f"median step with hook:           {with_hook * 1e6:8.1f} us")
    print(f"added per step (median of pairs): {added * 1e6:7.1f} us = {added / base:.1%} of this step, "
          f"{added / 0.002:.2%} of a 2 ms step")
    print(f"noise floor (unhooked vs unhooked): {noise * 1e6:5.1f} us")
    print(f"hook bookkeeping alone (warm):   {floor * 1e6:8.2f} us per step")


if __name__ == "__main__":
    main()
