"""A two-rank Hugging Face Trainer job on CPU (gloo) with the BottleneckCallback, started once per rank by
tests/test_hook_collectives.py (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR/PORT set, as torchrun sets them:
the Trainer then wraps the model in DDP). Prints one line per rank::

    result {"rank": 0, "collective_seconds": 0.089, "steps": 4, "ddp": true}

The Trainer hands its callbacks the model it was given, not its DDP wrapper: the hook finds the wrapper on the
stack at the first forward. A big embedding table looked up by small batches makes the all-reduce the larger
part of each step."""

from __future__ import annotations

import json
import tempfile

import torch
from torch.utils.data import Dataset
from transformers import Trainer, TrainingArguments

from bottleneck_exporter.hook.huggingface import BottleneckCallback
from tests.e2e_train import exit_without_finalizing

ROWS = 262144


class Lookups(Dataset):
    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(index)
        return {"rows": torch.randint(0, ROWS, (), generator=g), "labels": torch.randn((), generator=g)}


class Lookup(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.table = torch.nn.Embedding(ROWS, 16)
        self.head = torch.nn.Linear(16, 1)

    def forward(self, rows: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        out = self.head(self.table(rows)).squeeze(-1)
        return {"loss": torch.nn.functional.mse_loss(out, labels), "logits": out}


def main() -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)  # two ranks share a small test machine
    callback = BottleneckCallback(job="huggingface-ddp", address="off")
    with tempfile.TemporaryDirectory() as output:
        args = TrainingArguments(output_dir=output, max_steps=4, per_device_train_batch_size=8, use_cpu=True,
                                 ddp_backend="gloo", dataloader_num_workers=0, report_to=[], save_strategy="no",
                                 logging_strategy="no", disable_tqdm=True)
        trainer = Trainer(model=Lookup(), args=args, train_dataset=Lookups(), callbacks=[callback])
        trainer.train()
    session = callback.session
    clock = session.collectives if session is not None else None
    print("result " + json.dumps({
        "rank": trainer.args.process_index, "collective_seconds": clock.seconds() if clock is not None else None,
        "steps": session.clock.totals().steps if session is not None else None,
        "ddp": isinstance(trainer.model_wrapped, torch.nn.parallel.DistributedDataParallel)}), flush=True)


if __name__ == "__main__":
    main()
    exit_without_finalizing(0)  # a gloo job: see there
