"""The hook's check of whether a CUDA rank's batches are pinned, on CPU torch: real DataLoaders and tensors,
``Tensor.is_pinned()`` as CPU torch answers it (pageable: without an accelerator nothing can be pinned), the
datagram's ``host_batches`` through the receiver's schema and exposition. The pinned side needs a GPU:
scripts/device-check runs it."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from bottleneck_exporter.hook import instrument
from bottleneck_exporter.hook.pinning import CHECK_EVERY, PinCheck, host_tensors
from bottleneck_exporter.hook.session import Session
from bottleneck_exporter.wire.encode import encode
from bottleneck_exporter.wire.schema import validate
from tests.datagrams import exported

pytestmark = pytest.mark.torch


def train(batches: int, cuda_rank: bool, collate: Any = None) -> Session:
    """A real CPU training loop over ``batches`` batches of 4; ``cuda_rank`` marks the session as a CUDA
    rank's, which its first forward does on a GPU (check_device) and nothing can on CPU torch."""
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(4 * batches, 8), torch.randn(4 * batches, 1))
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = instrument(DataLoader(data, batch_size=4, collate_fn=collate), model=model, optimizer=optimizer,
                        job="pinning", address="off")
    session: Session = loader.bottleneck_session
    if cuda_rank:
        session.device = "cuda:0"
    for batch in loader:
        x, y = (batch["x"], batch["y"]) if isinstance(batch, dict) else batch
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    return session


def test_pageable_batches_of_a_cuda_rank_are_counted_one_in_64_and_exported() -> None:
    session = train(200, cuda_rank=True)
    # Batches 2, 66, 130 and 194: the second is the first checked (the first forward has run by then).
    assert (session.pin_check.pinned, session.pin_check.pageable) == (0, len(range(2, 201, CHECK_EVERY)))
    assert session.errors == 0
    sent = validate(session._datagram())
    session.close()
    assert sent.host_batches == {"pinned": 0, "pageable": 4}
    assert exported(sent, "bottleneck_train_host_batches_total", memory="pageable") == 4
    assert exported(sent, "bottleneck_train_host_batches_total", memory="pinned") == 0


def test_a_cpu_rank_copies_nothing_so_counts_nothing_and_sends_no_host_batches() -> None:
    session = train(200, cuda_rank=False)
    assert session.pin_check.checked == 0
    assert "host_batches" not in session.payload()
    session.close()


def test_dict_batches_are_checked_like_tuples() -> None:
    def as_dict(samples: list[tuple[torch.Tensor, torch.Tensor]]) -> dict[str, torch.Tensor]:
        return {"x": torch.stack([s[0] for s in samples]), "y": torch.stack([s[1] for s in samples])}

    session = train(70, cuda_rank=True, collate=as_dict)
    assert (session.pin_check.pinned, session.pin_check.pageable) == (0, 2)
    session.close()


def test_only_host_tensors_count_and_a_batch_without_any_counts_neither() -> None:
    x, y = torch.zeros(4, 3), torch.ones(4)
    nested = {"inputs": [x, {"mask": y}], "ids": ["a", "b"], "step": 3}
    assert [t.data_ptr() for t in host_tensors(nested)] == [x.data_ptr(), y.data_ptr()]
    check = PinCheck()
    for batch in (nested, (x, y), x, ["text", 3], {"meta": None}):
        check.check(batch)
    assert (check.pinned, check.pageable) == (0, 3)


def test_host_batches_in_a_datagram_are_checked_like_the_rest() -> None:
    session = train(70, cuda_rank=True)
    body = session.payload()
    session.close()
    assert body["host_batches"] == {"pinned": 0, "pageable": 2}

    def rejected(change: dict[str, Any]) -> str:
        datagram = copy.deepcopy(body)
        datagram["host_batches"] = change
        with pytest.raises(Exception) as err:
            validate(encode(datagram))
        return str(err.value)

    assert rejected({"pinned": -1, "pageable": 2}).startswith("bad_number")
    assert rejected({"pinned": 1.5, "pageable": 2}).startswith("bad_schema")
    assert rejected({"pinned": 1}).startswith("bad_schema")
    assert rejected({"pinned": 1, "pageable": 2, "staged": 3}).startswith("bad_schema")
