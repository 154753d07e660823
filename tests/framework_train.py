"""A plain PyTorch Lightning or Hugging Face Trainer run that knows nothing of bottleneck-exporter (no callback),
run by tests/test_run.py under ``bottleneck-exporter run``: only the automatic instrumentation measures it.

    python tests/framework_train.py lightning|huggingface --output DIR

The same tiny regression as tests/test_hook_frameworks.py: 24 items that each sleep 10 ms in ``__getitem__``
(slow storage), batches of 4, gradient accumulation over 2 batches, 2 epochs: 6 optimizer steps. Lightning also
runs its sanity-check validation (under no_grad) before training. Prints ``trained`` at the end.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.utils.data import DataLoader, Dataset

ITEMS, BATCH, ACCUMULATE, EPOCHS = 24, 4, 2, 2
FORWARD_SECONDS = 0.005


class SleepyDataset(Dataset):
    def __len__(self) -> int:
        return ITEMS

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        time.sleep(0.01)
        g = torch.Generator().manual_seed(index)
        return {"x": torch.randn(8, generator=g), "labels": torch.randn(1, generator=g)}


def lightning(output: str) -> None:
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

    trainer = pl.Trainer(max_epochs=EPOCHS, accumulate_grad_batches=ACCUMULATE, accelerator="cpu", logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         default_root_dir=output)
    trainer.fit(Regression(), DataLoader(SleepyDataset(), batch_size=BATCH),
                DataLoader(SleepyDataset(), batch_size=BATCH))


def huggingface(output: str) -> None:
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
    Trainer(model=Regression(), args=args, train_dataset=SleepyDataset()).train()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("framework", choices=["lightning", "huggingface"])
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    lightning(args.output) if args.framework == "lightning" else huggingface(args.output)
    print("trained", flush=True)


if __name__ == "__main__":
    main()
