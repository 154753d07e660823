"""The hook's cheap per-step paths: the mark log folded into totals later, and samples counted without
looking at batches. Real PyTorch CPU loops; the totals are checked against marks placed at known times."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from bottleneck_exporter.hook import instrument
from bottleneck_exporter.hook.loader import known_batch_sizes
from bottleneck_exporter.hook.session import Session
from bottleneck_exporter.hook.timing import (
    BACKWARD,
    DATA_WAIT,
    FORWARD,
    LOG_LIMIT,
    OPTIMIZER,
    OTHER,
    STEP_END,
    StepClock,
)
from bottleneck_exporter.wire.schema import STEP_BUCKETS

pytestmark = pytest.mark.torch


def test_totals_folded_from_the_log_partition_each_step_between_its_marks():
    clock = StepClock()
    # Two steps at known times (seconds); the second has gradient accumulation (two micro-batches).
    marks = [(DATA_WAIT, 10.0), (OTHER, 10.5), (FORWARD, 10.6), (BACKWARD, 10.9), (OPTIMIZER, 11.3),
             (STEP_END, 11.5),
             (DATA_WAIT, 11.5), (OTHER, 11.7), (FORWARD, 11.7), (BACKWARD, 11.8), (DATA_WAIT, 12.0),
             (OTHER, 12.1), (FORWARD, 12.1), (BACKWARD, 12.2), (OPTIMIZER, 12.4), (STEP_END, 14.5)]
    for phase, time in marks[:8]:
        clock.log += [phase, time]
    # Read mid-step: the log is folded, but only the completed step counts, so that the phases stay a
    # partition of the step time (a datagram may be cut anywhere in a step).
    assert clock.phase_totals[DATA_WAIT] == pytest.approx(0.5)
    assert clock.steps == 1 and not clock.log
    for phase, time in marks[8:]:
        clock.log += [phase, time]

    totals = clock.phase_totals
    assert totals[DATA_WAIT] == pytest.approx(0.5 + 0.2 + 0.1)
    assert totals[FORWARD] == pytest.approx(0.3 + 0.1 + 0.1)
    assert totals[BACKWARD] == pytest.approx(0.4 + 0.2 + 0.2)
    assert totals[OPTIMIZER] == pytest.approx(0.2 + 2.1)
    assert totals[OTHER] == pytest.approx(0.1)  # fetch end to forward, first step only
    assert clock.steps == 2
    assert clock.step_seconds == pytest.approx(1.5 + 3.0)
    assert sum(totals) == pytest.approx(clock.step_seconds)
    assert clock.last_step_end == 14.5
    expected = [0] * (len(STEP_BUCKETS) + 1)
    for duration in (1.5, 3.0):
        expected[next((i for i, bound in enumerate(STEP_BUCKETS) if duration <= bound), len(STEP_BUCKETS))] += 1
    assert clock.buckets == expected


def test_step_end_before_any_mark_starts_the_clock_without_counting_a_step():
    clock = StepClock()
    clock.log += [STEP_END, 5.0, DATA_WAIT, 5.0, OTHER, 6.0, STEP_END, 7.0]
    assert clock.steps == 1
    assert clock.step_seconds == pytest.approx(2.0)
    assert clock.phase_totals[DATA_WAIT] == pytest.approx(1.0)


def test_mark_log_stays_bounded_when_the_optimizer_never_steps():
    """Iterating the instrumented loader with an optimizer that is never stepped: no step ends, so no flush
    folds the log; the loader must fold it itself or it grows for the whole run."""
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    session = Session(address="off", samples=1)
    loader = instrument(range(LOG_LIMIT), model=model, optimizer=optimizer, session=session)
    longest = 0
    for _ in loader:
        longest = max(longest, len(session.clock.log))
    assert longest <= LOG_LIMIT + 4
    assert session.clock.steps == 0 and sum(session.clock.phase_totals) == 0  # no step ended: nothing to report
    session.close()


def test_mark_log_stays_bounded_when_a_model_runs_without_its_loader_or_optimizer():
    """A second training stage with a new loader and optimizer but the same (still instrumented) model."""
    model = torch.nn.Identity()
    session = Session(address="off")
    instrument([], model=model, optimizer=torch.optim.SGD(torch.nn.Linear(1, 1).parameters(), lr=0.1),
               session=session)
    x = torch.zeros(1)
    longest = 0
    for _ in range(LOG_LIMIT // 4 + 10):
        model(x)
        longest = max(longest, len(session.clock.log))
    assert longest <= LOG_LIMIT + 4
    session.end_step()
    assert session.clock.phase_totals[FORWARD] > 0
    session.close()


def _drop_last_sample(batch: list[tuple[torch.Tensor, torch.Tensor]]) -> list[torch.Tensor]:
    """A collate function that changes the batch size: the hook must read the batch, not assume it."""
    kept = batch[:-1] or batch
    return [torch.stack([x for x, _ in kept]), torch.stack([y for _, y in kept])]


@pytest.mark.parametrize(("options", "per_pass"), [
    ({"batch_size": 32}, 100),  # 32+32+32+4: the short last batch counts 4
    ({"batch_size": 32, "drop_last": True}, 96),
    ({"batch_size": 32, "shuffle": True}, 100),
    ({"batch_size": 32, "collate_fn": _drop_last_sample}, 96),  # 31+31+31+3, read from the batches
    ({"batch_size": None}, 100),  # no batching: each item's first dimension (1) is read
], ids=["short-last-batch", "drop-last", "shuffled", "custom-collate", "unbatched"])
def test_samples_of_every_batch_counted_exactly(options: dict[str, Any], per_pass: int):
    data = TensorDataset(torch.randn(100, 3), torch.randn(100, 1)) if options["batch_size"] else \
        TensorDataset(torch.randn(100, 1, 3), torch.randn(100, 1, 1))
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    session = Session(address="off")
    loader = instrument(DataLoader(data, **options), model=model, optimizer=optimizer, session=session)
    for _ in range(2):
        seen = 0
        for x, y in loader:
            seen += x.shape[0]
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
        assert seen == per_pass
    assert session.clock.samples == 2 * per_pass
    session.close()


def test_samples_of_a_pass_left_early_count_only_the_batches_fetched():
    session = Session(address="off")
    loader = instrument(DataLoader(TensorDataset(torch.randn(100, 3)), batch_size=32), session=session)
    for index, _ in enumerate(loader):
        if index == 1:
            break
    for _ in loader:  # one full pass: 100
        pass
    session.end_step()  # without an optimizer each batch is a step, ended when the next is asked for
    assert session.clock.samples == 64 + 100
    session.close()


def test_batch_sizes_are_read_from_the_batches_when_the_loader_is_not_a_plain_dataloader():
    class SubclassedLoader(DataLoader):
        pass

    data = TensorDataset(torch.randn(10, 2))
    assert known_batch_sizes(DataLoader(data, batch_size=4), None) == (4, 3, 2)
    assert known_batch_sizes(SubclassedLoader(data, batch_size=4), None) is None
    assert known_batch_sizes([torch.randn(4, 2)], None) is None
    assert known_batch_sizes(DataLoader(data, batch_size=4), lambda batch: 1) is None
    assert known_batch_sizes([1, 2], 8) == (8, 0, 8)
