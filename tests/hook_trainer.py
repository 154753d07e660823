"""A tiny real training run under the hook, started as a subprocess by tests/test_hook.py.

    python tests/hook_trainer.py --dataset slow|fast --workers N --stop-file PATH [--threads N] [--keep-losses]

Trains a small MLP on CPU with ``bottleneck_exporter.hook.instrument`` until ``--stop-file`` exists (checked between
steps) or ``--max-steps`` is reached; the exporter address and job come from BOTTLENECK_PUSH_ADDRESS and
BOTTLENECK_JOB, as in real use. ``slow`` burns CPU inside ``__getitem__`` (the loader is busy, not blocked);
``fast`` serves precomputed tensors. ``--threads`` sets torch's intra-op threads (default 1; the number of
CPUs makes a CPU-only job that uses every core for its own compute). ``--keep-losses`` keeps every step's
loss tensor in a list, as ``losses.append(loss)`` instead of ``loss.item()`` does: each keeps its step's autograd
graph, and with it that step's activations (the oldest leak of the PyTorch FAQ).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset


class CpuBoundDataset(Dataset):
    """Each item costs ``burn`` seconds of this thread's CPU time: decoding/augmentation stand-in."""

    def __init__(self, size: int, burn: float) -> None:
        self.size, self.burn = size, burn

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        end = time.thread_time() + self.burn
        acc = 0
        while time.thread_time() < end:
            acc += 1
        g = torch.Generator().manual_seed(index)
        return torch.randn(32, generator=g), torch.randn(1, generator=g)


class ReadyDataset(Dataset):
    def __init__(self, size: int, width: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(size, width, generator=g), torch.randn(size, 1, generator=g)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[index], self.y[index]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dataset", choices=["slow", "fast"], required=True)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--stop-file", required=True)
    parser.add_argument("--max-steps", type=int, default=100000)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--keep-losses", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)  # default 1: a shared test machine, one core for the model

    from bottleneck_exporter.hook import instrument

    if args.dataset == "slow":
        width, dataset, batch = 32, CpuBoundDataset(64, burn=0.005), 4
        model = torch.nn.Sequential(torch.nn.Linear(width, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    else:
        width, batch = 256, 64
        dataset = ReadyDataset(4096, width)
        model = torch.nn.Sequential(torch.nn.Linear(width, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
                                    torch.nn.ReLU(), torch.nn.Linear(1024, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.001)
    loader = DataLoader(dataset, batch_size=batch, shuffle=True, num_workers=args.workers,
                        persistent_workers=args.workers > 0)
    loader = instrument(loader, model=model, optimizer=optimizer)
    steps = 0
    losses = []
    while steps < args.max_steps:
        for x, y in loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            # retain_graph: backward would free the saved activations the list is meant to keep.
            loss.backward(retain_graph=args.keep_losses)
            optimizer.step()
            if args.keep_losses:
                losses.append(loss)
            steps += 1
            if os.path.exists(args.stop_file) or steps >= args.max_steps:
                print(f"trained {steps} steps", flush=True)
                return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
