"""A tiny real training run under the hook, started as a subprocess by tests/test_hook.py.

    python tests/hook_trainer.py --dataset slow|fast --workers N --stop-file PATH [--threads N]

Trains a small MLP on CPU with ``bottleneck_exporter.hook.instrument`` until ``--stop-file`` exists (checked between
steps) or ``--max-steps`` is reached; the exporter address and job come from BOTTLENECK_PUSH_ADDRESS and
BOTTLENECK_JOB, as in real use. ``slow`` burns CPU inside ``__getitem__`` (the loader is busy, not blocked);
``fast`` serves precomputed tensors. ``--threads`` sets torch's intra-op threads (default 1; the number of
CPUs makes a CPU-only job that uses every core for its own compute).
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
from torch.utils.data import DataLoader
from workloads import CpuBoundDataset, ReadyDataset  # tests/workloads.py: this script's folder is on sys.path


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dataset", choices=["slow", "fast"], required=True)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--stop-file", required=True)
    parser.add_argument("--max-steps", type=int, default=100000)
    parser.add_argument("--threads", type=int, default=1)
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
    while steps < args.max_steps:
        for x, y in loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            steps += 1
            if os.path.exists(args.stop_file) or steps >= args.max_steps:
                print(f"trained {steps} steps", flush=True)
                return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
