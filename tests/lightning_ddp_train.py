"""A two-rank PyTorch Lightning DDP job on CPU (gloo) with the BottleneckCallback, started once per rank by
tests/test_hook_collectives.py (LOCAL_RANK, NODE_RANK, WORLD_SIZE, MASTER_ADDR/PORT set: Lightning then
launches no processes of its own). Prints one line per rank::

    result {"rank": 0, "collective_seconds": 0.089, "steps": 4}

A big embedding table looked up by small batches makes the all-reduce the larger part of each step."""

from __future__ import annotations

import json

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset

from bottleneck_exporter.hook.lightning import BottleneckCallback
from tests.e2e_train import exit_without_finalizing

ROWS = 262144


class Lookup(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.table = torch.nn.Embedding(ROWS, 16)
        self.head = torch.nn.Linear(16, 1)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.head(self.table(x)).squeeze(-1), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def main() -> None:
    torch.manual_seed(0)
    data = TensorDataset(torch.randint(0, ROWS, (64,)), torch.randn(64))
    callback = BottleneckCallback(job="lightning-ddp", address="off")
    trainer = pl.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_steps=4, callbacks=[callback],
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False)
    trainer.fit(Lookup(), DataLoader(data, batch_size=8))
    session = callback.session
    clock = session.collectives if session is not None else None
    print("result " + json.dumps({"rank": trainer.global_rank,
                                  "collective_seconds": clock.seconds() if clock is not None else None,
                                  "steps": session.clock.totals().steps if session is not None else None}))


if __name__ == "__main__":
    main()
    exit_without_finalizing(0)  # a gloo job: see there
