"""A plain PyTorch training script that knows nothing of bottleneck-exporter, run by tests/test_run.py under
``bottleneck-exporter run`` (the automatic instrumentation is all that measures it).

    python tests/plain_train.py --dataset slow|fast [--workers N [--start-method spawn]] [--seconds S]
    torchrun --nproc-per-node=2 tests/plain_train.py --dataset fast --ddp --steps 20

Trains a small MLP on CPU for ``--seconds`` (or ``--steps`` steps, or until ``--stop-file`` exists). ``slow``
burns CPU inside ``__getitem__`` with ``num_workers=0`` (the trainer's own thread decodes every sample: an
input-bound job); ``fast`` serves precomputed tensors. ``--ddp`` wraps the model in DistributedDataParallel on
gloo (torchrun sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT). Each epoch ends with an evaluation pass
under ``torch.no_grad()``. Prints ``trained N steps`` (and the rank, with ``--ddp``) at the end.
"""

from __future__ import annotations

import argparse
import atexit
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
    parser.add_argument("--start-method", choices=["fork", "spawn"], default=None,
                        help="how the DataLoader starts its workers (default: torch's)")
    parser.add_argument("--seconds", type=float, default=3600.0)
    parser.add_argument("--steps", type=int, default=10**9)
    parser.add_argument("--stop-file")
    parser.add_argument("--ddp", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)  # a shared test machine: one core for the model
    if args.ddp:
        torch.distributed.init_process_group("gloo")
    dataset = CpuBoundDataset(64, burn=0.005) if args.dataset == "slow" else ReadyDataset(512)
    model: torch.nn.Module = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    if args.ddp:
        model = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.001)
    train = DataLoader(dataset, batch_size=4 if args.dataset == "slow" else 32, shuffle=True,
                       num_workers=args.workers, multiprocessing_context=args.start_method if args.workers else None)
    # One small batch: the evaluation's loader waits too, but not inside a training step.
    evaluation = DataLoader(torch.utils.data.Subset(dataset, range(8)), batch_size=8)
    steps, started = 0, time.monotonic()

    def done() -> bool:
        return (steps >= args.steps or time.monotonic() - started >= args.seconds
                or bool(args.stop_file and os.path.exists(args.stop_file)))

    while not done():
        model.train()
        for x, y in train:
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            steps += 1
            if done():
                break
        model.eval()
        with torch.no_grad():
            for x, _ in evaluation:
                model(x)
    print(f"trained {steps} steps" + (f" on rank {torch.distributed.get_rank()}" if args.ddp else ""), flush=True)
    if args.ddp:
        torch.distributed.destroy_process_group()
        # gloo's threads may still release a finished collective's tensors while the interpreter finalizes,
        # which aborts it (pytorch/pytorch#190489): run the exit handlers while the interpreter is whole, leave.
        atexit._run_exitfuncs()
        sys.stdout.flush()
        os._exit(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
