"""A small MLP trained under torch.compile and the hook, started as a subprocess by tests/test_hook_compile.py.

    python tests/compile_train.py --shapes steady|changing --stop-file PATH

``steady``: every batch has the same shape, so dynamo compiles once and never again. ``changing``: every few
steps the batch has a length it has not seen, and the model is compiled with ``dynamic=False``, so each new
length fails a guard and recompiles (the recompile limit raised so that it goes on; a real job that hits the
limit runs the frame uncompiled instead). The ``eager`` backend keeps each compilation to dynamo's tracing: no
C++ compiler is needed. Exporter address and job from BOTTLENECK_PUSH_ADDRESS and BOTTLENECK_JOB.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import torch._dynamo

from bottleneck_exporter.hook import instrument

STEPS_PER_SHAPE = 4


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", choices=["steady", "changing"], required=True)
    parser.add_argument("--stop-file", required=True)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)  # a shared test machine: one core for the model
    torch._dynamo.config.recompile_limit = 10_000
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    compiled = torch.compile(model, backend="eager", dynamic=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.001)
    batches = [torch.randn(8, 16)] * 64  # the loader's batches; with changing shapes, the steps decide them
    loader = instrument(torch.utils.data.DataLoader(batches, batch_size=None), model=compiled, optimizer=optimizer)
    step = 0
    while not os.path.exists(args.stop_file):
        for x in loader:
            if args.shapes == "changing":
                x = torch.randn(8 + step // STEPS_PER_SHAPE, 16)  # a length not seen before every few steps
            optimizer.zero_grad()
            compiled(x).pow(2).mean().backward()
            optimizer.step()
            step += 1
    print(f"trained {step} steps", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
