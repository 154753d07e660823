"""Training jobs for the multi-node end-to-end test (tests/test_e2e_multinode.py), one process per rank.

    python tests/e2e_train.py ddp --stop-file PATH [--slow-rank 2 --slow-seconds 0.2 | --between-seconds 0.2]
                                  [--embedding ROWS]
        one rank of a torch.distributed (gloo, CPU) data-parallel job; RANK, WORLD_SIZE, MASTER_ADDR and
        MASTER_PORT from the environment, as torchrun sets them. The slow rank's forward takes
        --slow-seconds longer: a slower node, which its peers then wait for in the all-reduce. With
        --between-seconds the slow rank instead spends that long between steps, outside every phase (rank-0
        logging or checkpointing); its peers wait for it in the next step's all-reduce, inside backward.
        --embedding adds an embedding table of ROWS x 16 (dense gradients): a big model whose every step
        computes little and all-reduces the whole table, so the all-reduce dominates the step.
    python tests/e2e_train.py input --stop-file PATH --cause-file PATH
        a single-rank job whose DataLoader takes --item-seconds per sample while --cause-file exists (an
        input-bound job); once the file is removed, samples come at once (the cause stopped).

Every rank is instrumented with ``exporter.hook.instrument`` and pushes to BOTTLENECK_PUSH_ADDRESS (its own
node's exporter) under BOTTLENECK_JOB.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset


class Samples(Dataset):
    """Ready-made samples; ``item_seconds`` of waiting per sample while ``cause_file`` exists."""

    def __init__(self, size: int, item_seconds: float = 0.0, cause_file: str | None = None) -> None:
        generator = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(size, 16, generator=generator), torch.randn(size, 1, generator=generator)
        self.item_seconds, self.cause_file = item_seconds, cause_file

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.cause_file and os.path.exists(self.cause_file):
            time.sleep(self.item_seconds)  # a slow read: the loader is blocked on input
        return self.x[index], self.y[index]


class Model(torch.nn.Module):
    def __init__(self, delay: float, embedding: int = 0) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
        self.table = torch.nn.Embedding(embedding, 16) if embedding else None
        self.delay = delay

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.delay:
            time.sleep(self.delay)  # this rank's node computes slower
        if self.table is not None:  # a few rows looked up, the whole table's gradient all-reduced
            x = x + self.table((x[:, 0].abs() * 1e4).long() % self.table.num_embeddings)
        return self.net(x)


def stop_requested(stop_file: str) -> bool:
    requested = os.path.exists(stop_file)
    if dist.is_initialized():
        # Every rank stops after the same step: one that left early would hang its peers in the all-reduce.
        flag = torch.tensor([1.0 if requested else 0.0])
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        requested = bool(flag.item())
    return requested


def train(loader: DataLoader, model: torch.nn.Module, stop_file: str, between: float = 0.0) -> int:
    from exporter.hook import instrument

    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = instrument(loader, model=model, optimizer=optimizer)
    steps = 0
    while True:
        for x, y in batches:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
            steps += 1
            if stop_requested(stop_file):
                return steps
            if between:
                time.sleep(between)  # host work between steps: writing a log line, a checkpoint


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["ddp", "input"])
    parser.add_argument("--stop-file", required=True)
    parser.add_argument("--slow-rank", type=int, default=-1)
    parser.add_argument("--slow-seconds", type=float, default=0.2)
    parser.add_argument("--between-seconds", type=float, default=0.0)
    parser.add_argument("--cause-file")
    parser.add_argument("--item-seconds", type=float, default=0.01)
    parser.add_argument("--embedding", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)  # several ranks share a small test machine
    if args.mode == "input":
        loader = DataLoader(Samples(256, args.item_seconds, args.cause_file), batch_size=8, num_workers=0)
        steps = train(loader, Model(0.0), args.stop_file)
    else:
        dist.init_process_group("gloo", init_method="env://")
        rank = dist.get_rank()
        slow = rank == args.slow_rank
        model = torch.nn.parallel.DistributedDataParallel(
            Model(args.slow_seconds if slow and not args.between_seconds else 0, args.embedding))
        loader = DataLoader(Samples(256), batch_size=8, num_workers=0)
        steps = train(loader, model, args.stop_file, args.between_seconds if slow else 0.0)
        dist.destroy_process_group()
    print(f"trained {steps} steps", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
