"""A tiny real training run under the hook, started as a subprocess by tests/test_hook.py.

    python tests/hook_trainer.py --dataset slow|fast --workers N --stop-file PATH [--threads N] [--keep-losses]
                                 [--start-after S] [--gc-collect-over N] [--checkpoint-every K --checkpoint-mb M]
                                 [--evaluate-every K] [--fork-workers-every-epoch]

Trains a small MLP on CPU with ``bottleneck_exporter.hook.instrument`` until ``--stop-file`` exists (checked between
steps) or ``--max-steps`` is reached; the exporter address and job come from BOTTLENECK_PUSH_ADDRESS and
BOTTLENECK_JOB, as in real use. ``slow`` burns CPU inside ``__getitem__`` (the loader is busy, not blocked);
``fast`` serves precomputed tensors. ``--threads`` sets torch's intra-op threads (default 1; the number of
CPUs makes a CPU-only job that uses every core for its own compute). ``--keep-losses`` keeps every step's
loss tensor in a list, as ``losses.append(loss)`` instead of ``loss.item()`` does: each keeps its step's autograd
graph, and with it that step's activations (the oldest leak of the PyTorch FAQ).

The other options build the jobs of what the trainer loses besides its phases: ``--start-after`` sleeps
before training (a dataset indexed at start, a slow import: SlowStart); ``--gc-collect-over`` keeps that many
live Python objects and calls ``gc.collect()`` every step (GcPauses); ``--checkpoint-every`` writes the
model, the optimizer and ``--checkpoint-mb`` MB of other state with ``torch.save`` on the training thread
every K steps (BlockingCheckpoints); ``--evaluate-every`` runs an evaluation pass between two steps every K
steps (LongSteps, whose cause the hook cannot see); ``--fork-workers-every-epoch`` leaves the loader's
``persistent_workers`` off, so its ``--workers`` are forked anew each epoch (LoaderWorkersRestarted).
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time

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
    parser.add_argument("--start-after", type=float, default=0.0)
    parser.add_argument("--gc-collect-over", type=int, default=0)
    parser.add_argument("--checkpoint-every", type=int, default=0)
    parser.add_argument("--checkpoint-mb", type=int, default=0)
    parser.add_argument("--evaluate-every", type=int, default=0)
    parser.add_argument("--keep-losses", action="store_true")
    parser.add_argument("--fork-workers-every-epoch", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)  # default 1: a shared test machine, one core for the model
    time.sleep(args.start_after)
    live = [[index] for index in range(args.gc_collect_over)]  # a dataset index kept as Python objects
    extra = torch.zeros(args.checkpoint_mb * 2**18)  # float32: 4 bytes each
    checkpoint = os.path.join(os.path.dirname(os.path.abspath(args.stop_file)), f"checkpoint-{os.getpid()}.pt")

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
                        persistent_workers=args.workers > 0 and not args.fork_workers_every_epoch)
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
            if live:
                gc.collect()
            if args.checkpoint_every and steps % args.checkpoint_every == 0:
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "extra": extra},
                           checkpoint)
            if args.evaluate_every and steps % args.evaluate_every == 0:
                with torch.no_grad():
                    for _ in range(args.evaluate_every):
                        model(x)
            if os.path.exists(args.stop_file) or steps >= args.max_steps:
                print(f"trained {steps} steps", flush=True)
                return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
