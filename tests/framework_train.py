"""A plain PyTorch Lightning or Hugging Face Trainer run that knows nothing of bottleneck-exporter (no callback),
run by tests/test_run.py under ``bottleneck-exporter run``: only the automatic instrumentation measures it.

    python tests/framework_train.py lightning|huggingface --output DIR

The same tiny regression as tests/test_hook_frameworks.py (tests/workloads.py): 24 items that each sleep 10 ms in
``__getitem__`` (slow storage), batches of 4, gradient accumulation over 2 batches, 2 epochs: 6 optimizer steps.
Lightning also runs its sanity-check validation (under no_grad) before training. Prints ``trained`` at the end.
"""

from __future__ import annotations

import argparse

import torch
from workloads import fit_huggingface, fit_lightning  # tests/workloads.py: this script's folder is on sys.path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("framework", choices=["lightning", "huggingface"])
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    fit_lightning(args.output, validate=True) if args.framework == "lightning" else fit_huggingface(args.output)
    print("trained", flush=True)


if __name__ == "__main__":
    main()
