"""The datasets and tiny framework runs the test trainers share: one copy, used both by tests (``tests.workloads``)
and by the scripts tests start as ``python tests/<script>.py`` (``workloads``: a script's own folder is first on
``sys.path``).

Imports torch and nothing of bottleneck_exporter: tests/plain_train.py and tests/framework_train.py must measure
a script that knows nothing of the exporter. The frameworks are imported only by the function that runs them.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset


class CpuBoundDataset(Dataset):
    """Each item costs ``burn`` seconds of this thread's CPU time: decoding and augmentation stand-in (the loader
    is busy, not blocked)."""

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
    """Precomputed tensors: a loader that is never the bottleneck."""

    def __init__(self, size: int, width: int = 32) -> None:
        g = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(size, width, generator=g), torch.randn(size, 1, generator=g)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[index], self.y[index]


# The framework runs: a tiny regression of ITEMS items, batches of BATCH, gradient accumulation over ACCUMULATE
# batches, EPOCHS epochs: ITEMS // BATCH // ACCUMULATE * EPOCHS optimizer steps.
ITEMS, BATCH, ACCUMULATE, EPOCHS = 24, 4, 2, 2
FORWARD_SECONDS = 0.005  # each micro-batch's forward sleeps this long: a known forward cost


class SleepyDataset(Dataset):
    """Each item sleeps 10 ms in ``__getitem__``: slow storage, so data wait dominates."""

    def __len__(self) -> int:
        return ITEMS

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        time.sleep(0.01)
        g = torch.Generator().manual_seed(index)
        return {"x": torch.randn(8, generator=g), "labels": torch.randn(1, generator=g)}


def fit_lightning(output: str, callbacks: Sequence[Any] = (), validate: bool = False) -> None:
    """The regression under a real ``pl.Trainer``; ``validate`` adds a validation loader (and with it Lightning's
    sanity-check pass under no_grad before training)."""
    import pytorch_lightning as pl

    class Regression(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(8, 1)

        def training_step(self, batch: dict[str, torch.Tensor], index: int) -> torch.Tensor:
            time.sleep(FORWARD_SECONDS)
            return torch.nn.functional.mse_loss(self.layer(batch["x"]), batch["labels"])

        def validation_step(self, batch: dict[str, torch.Tensor], index: int) -> None:
            self.layer(batch["x"])

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    trainer = pl.Trainer(max_epochs=EPOCHS, accumulate_grad_batches=ACCUMULATE, accelerator="cpu",
                         callbacks=list(callbacks), logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, default_root_dir=output)
    validation = DataLoader(SleepyDataset(), batch_size=BATCH) if validate else None
    trainer.fit(Regression(), DataLoader(SleepyDataset(), batch_size=BATCH), validation)


def fit_huggingface(output: str, callbacks: Sequence[Any] = ()) -> None:
    """The regression under a real Hugging Face ``Trainer`` on CPU, saving and logging nothing."""
    from transformers import Trainer, TrainingArguments

    class Regression(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(8, 1)

        def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
            time.sleep(FORWARD_SECONDS)
            out = self.layer(x)
            return {"loss": torch.nn.functional.mse_loss(out, labels), "logits": out}

    args = TrainingArguments(output_dir=output, num_train_epochs=EPOCHS, per_device_train_batch_size=BATCH,
                             gradient_accumulation_steps=ACCUMULATE, dataloader_num_workers=0, use_cpu=True,
                             report_to=[], save_strategy="no", logging_strategy="no", disable_tqdm=True)
    Trainer(model=Regression(), args=args, train_dataset=SleepyDataset(), callbacks=list(callbacks)).train()
