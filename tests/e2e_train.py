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
    python tests/e2e_train.py fsdp --stop-file PATH [--embedding ROWS]
        the same job sharded by FSDP2 (``fully_shard`` on the table, the layers and the root): each step
        all-gathers the parameters and reduce-scatters the gradients (the table's dominate).
    python tests/e2e_train.py fsdp1 --stop-file PATH [--embedding ROWS] [--sharding NO_SHARD|HYBRID_SHARD|...]
        the same job under FSDP1 (``FullyShardedDataParallel`` around the table, the layers and the root),
        FULL_SHARD unless --sharding names another of its strategies; --local-head puts the last layer on a
        process group of each rank alone (its gradients stay local); --no-root leaves the model itself
        unwrapped (each wrapped layer is then a root of its own).
    python tests/e2e_train.py ddp|fsdp1 --steps N --comm-hook fp16 --hook-order before|after
        DDP (or FSDP1) with the user's own communication hook (torch's fp16 compression), registered before
        or after ``instrument()``; trains N steps, then prints ``result {json}``: whether the gradients
        carry the hook's effect (fp16 rounding: every gradient is a float16 value) and the collective
        seconds the hook measured (null when it did not time them). ``fsdp --steps N`` prints the same line,
        with the all-gathers and reduce-scatters timed (``fsdp1 --steps N``: all-gathers and reductions).
        ``--instrument unwrapped`` hands ``instrument()`` the model inside DDP or FSDP1, not the wrapper.
    python tests/e2e_train.py input --stop-file PATH --cause-file PATH
        a single-rank job whose DataLoader takes --item-seconds per sample while --cause-file exists (an
        input-bound job); once the file is removed, samples come at once (the cause stopped).

Every rank is instrumented with ``bottleneck_exporter.hook.instrument`` and pushes to BOTTLENECK_PUSH_ADDRESS (its own
node's exporter) under BOTTLENECK_JOB.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import sys
import time
from collections.abc import Callable
from typing import NoReturn

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset


class Samples(Dataset):
    """Ready-made samples (each rank its own: ``seed``); ``item_seconds`` of waiting per sample while
    ``cause_file`` exists."""

    def __init__(self, size: int, item_seconds: float = 0.0, cause_file: str | None = None, seed: int = 0) -> None:
        generator = torch.Generator().manual_seed(seed)
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


def train(loader: DataLoader, model: torch.nn.Module, stop_file: str, between: float = 0.0,
          steps_wanted: int = 0, after_instrument: Callable[[], None] | None = None,
          instrumented: torch.nn.Module | None = None) -> int:
    """Train ``model``, instrumented (or ``instrumented``: the model inside it, as the Hugging Face Trainer
    hands its callbacks)."""
    from bottleneck_exporter.hook import instrument

    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = instrument(loader, model=model if instrumented is None else instrumented, optimizer=optimizer)
    if after_instrument is not None:
        after_instrument()
    steps = 0
    while True:
        for x, y in batches:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            if steps_wanted and steps + 1 == steps_wanted:
                return steps + 1  # the gradients of the last step are left for the caller to look at
            optimizer.step()
            steps += 1
            if not steps_wanted and stop_requested(stop_file):
                return steps
            if between:
                time.sleep(between)  # host work between steps: writing a log line, a checkpoint


def hook_result(model: torch.nn.Module, local: torch.nn.Module) -> dict[str, object]:
    """What the user's hook did to the gradients, the collective time the bottleneck hook measured, and the
    FSDP collectives it timed."""
    from bottleneck_exporter.hook.session import Session

    grads = [p.grad for p in model.parameters() if p.grad is not None]
    session = Session.of(model, local)
    clock = session.collectives if session is not None else None
    from bottleneck_exporter.hook.collective import fsdp1, fsdp2

    return {"fp16_gradients": bool(grads) and all(torch.equal(g, g.half().float()) for g in grads),
            "collective_seconds": clock.seconds() if clock is not None else None,
            "exposed_seconds": clock.exposed.seconds() if clock is not None and clock.exposed is not None else None,
            "fsdp_launches": fsdp2.launches(model), "fsdp1_launches": fsdp1.launches(model),
            "step_seconds": session.clock.totals().step_seconds if session is not None else None,
            # The parameters after the steps: the same with the hook as without it (its reductions are the
            # framework's own arithmetic).
            "parameters": [round(p.detach().double().sum().item(), 9) for p in model.parameters()]}


def fsdp1(local: Model, sharding: str, local_head: bool = False, root: bool = True) -> torch.nn.Module:
    """``local`` under FSDP1: the table and each layer with parameters wrapped, then the root (unless not
    ``root``: each wrapped layer is then a root of its own, as after Lightning's ``configure_model`` wrapping
    layers by hand). With ``local_head`` the last layer is an FSDP module on a process group of this rank
    alone: its gradients stay local (a module kept per rank)."""
    from torch.distributed.fsdp import FullyShardedDataParallel, ShardingStrategy

    options: dict[str, object] = {"device_id": torch.device("cpu"), "sharding_strategy": ShardingStrategy[sharding]}
    if sharding.startswith(("HYBRID", "_HYBRID")):  # one replica, sharded over every rank
        from torch.distributed.device_mesh import init_device_mesh

        options["device_mesh"] = init_device_mesh("cpu", (1, dist.get_world_size()),
                                                  mesh_dim_names=("replicate", "shard"))
    if local.table is not None:
        local.table = FullyShardedDataParallel(local.table, **options)
    if local_head:  # every rank creates every group, as new_group requires
        alone = [dist.new_group([rank]) for rank in range(dist.get_world_size())][dist.get_rank()]
        local.net[-1] = FullyShardedDataParallel(local.net[-1], **options, process_group=alone)
    for index, layer in enumerate(local.net):
        if any(True for _ in layer.parameters()) and not isinstance(layer, FullyShardedDataParallel):
            local.net[index] = FullyShardedDataParallel(layer, **options)
    return FullyShardedDataParallel(local, **options) if root else local


def fp16_compression(model: torch.nn.Module) -> Callable[[], None]:
    """What registers a user's fp16-compression communication hook on ``model``, as a user would: torch's
    own for DDP; for FSDP1 one of ours that does the same (torch's FSDP1 ``fp16_compress_hook`` records a CUDA
    stream, so it fails on CPU)."""
    if isinstance(model, torch.nn.parallel.DistributedDataParallel):
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import fp16_compress_hook

        return lambda: model.register_comm_hook(dist.group.WORLD, fp16_compress_hook)

    def compressed(group: dist.ProcessGroup, grad: torch.Tensor, output: torch.Tensor | None = None) -> None:
        grad.div_(dist.get_world_size(group)).copy_(grad.half())
        if output is None:
            dist.all_reduce(grad, group=group)
            grad.copy_(grad.half())
        else:
            dist.reduce_scatter_single(output, grad, group=group)
            output.copy_(output.half())

    return lambda: model.register_comm_hook(dist.group.WORLD, compressed)  # type: ignore[operator]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["ddp", "fsdp", "fsdp1", "input"])
    parser.add_argument("--stop-file", default="")
    parser.add_argument("--slow-rank", type=int, default=-1)
    parser.add_argument("--slow-seconds", type=float, default=0.2)
    parser.add_argument("--between-seconds", type=float, default=0.0)
    parser.add_argument("--cause-file")
    parser.add_argument("--item-seconds", type=float, default=0.01)
    parser.add_argument("--embedding", type=int, default=0)
    parser.add_argument("--steps", type=int, default=0)
    parser.add_argument("--comm-hook", choices=["fp16"])
    parser.add_argument("--hook-order", choices=["before", "after"], default="after")
    parser.add_argument("--sharding", default="FULL_SHARD", help="FSDP1's ShardingStrategy")
    parser.add_argument("--instrument", choices=["wrapper", "unwrapped"], default="wrapper")
    parser.add_argument("--local-head", action="store_true", help="fsdp1: the last layer on this rank's own group")
    parser.add_argument("--no-root", action="store_true", help="fsdp1: the layers wrapped, the model not")
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
        local = Model(args.slow_seconds if slow and not args.between_seconds else 0, args.embedding)
        loader = DataLoader(Samples(256, seed=rank), batch_size=8, num_workers=0)
        register = None
        if args.mode == "fsdp":
            from torch.distributed.fsdp import fully_shard

            for module in (local.table, *local.net):
                if module is not None and any(True for _ in module.parameters()):
                    fully_shard(module)
            model: torch.nn.Module = fully_shard(local)
        elif args.mode == "fsdp1":
            model = fsdp1(local, args.sharding, args.local_head, not args.no_root)
        else:
            model = torch.nn.parallel.DistributedDataParallel(local)
        if args.comm_hook:
            register = fp16_compression(model)
            if args.hook_order == "before":
                register()
                register = None
        steps = train(loader, model, args.stop_file, args.between_seconds if slow else 0.0, args.steps, register,
                      local if args.instrument == "unwrapped" else None)
        if args.steps:
            print("result", json.dumps(hook_result(model, local)), flush=True)
        dist.destroy_process_group()
    print(f"trained {steps} steps", flush=True)
    return 0


def exit_without_finalizing(code: int) -> NoReturn:
    """Run the exit handlers (the hook's last datagram among them) while the interpreter is whole, then
    leave without finalizing it. Why: gloo's worker threads may still hold a finished collective's work,
    whose tensors need the GIL to be released; a finalizing interpreter answers that by ending the thread
    inside a C++ destructor: "terminate called without an active exception" (pytorch/pytorch#190489)."""
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_without_finalizing(main())
