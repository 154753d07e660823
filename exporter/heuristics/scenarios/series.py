"""The scenario table's series: one value per minute, written as promtool's input notation or loaded into the
Python evaluator's store.

Series carry the labels a Prometheus scrape with ``honor_labels: false`` gives them: ``job`` is the scrape
job (``EXPORTER_JOB``) on every series of the exporter, the training job's name is ``training_job``.

Series are written per minute (the promtool ``interval``); ``Timeline.start`` is the minute at which
the situation begins (a job starts, a disk saturates); before it, node and GPU series show ``before``
values and training series are absent::

    bottleneck_gpu_utilization_ratio{gpu="0", instance="gpu-node-1:9847", job="bottleneck-exporter", ...}  0.9x17
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from bottleneck_exporter.heuristics.parameters import format_value
from bottleneck_exporter.heuristics.promql import SeriesStore

INSTANCE = "gpu-node-1:9847"
INSTANCE_2 = "gpu-node-2:9847"
EXPORTER_JOB = "bottleneck-exporter"
TRAIN_JOB = "resnet50"

Track = list[float | None]


@dataclasses.dataclass(frozen=True)
class Timeline:
    length: int  # last minute with samples
    start: int = 0

    def before(self, minute: int) -> bool:
        return minute < self.start


@dataclasses.dataclass(frozen=True)
class Series:
    labels: tuple[tuple[str, str], ...]  # "__name__" included
    track: tuple[float | None, ...]  # one value per minute; None = no sample

    @property
    def selector(self) -> str:
        labels = dict(self.labels)
        name = labels.pop("__name__")
        inner = ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        return f"{name}{{{inner}}}"

    @property
    def notation(self) -> str:
        """promtool's expanding notation: ``_x3 0+48x10`` (``a+bxn`` is n+1 values)."""
        tokens: list[str] = []
        values = list(self.track)
        i = 0
        while i < len(values):
            if values[i] is None:
                j = i
                while j + 1 < len(values) and values[j + 1] is None:
                    j += 1
                tokens.append("_" if j == i else f"_x{j - i + 1}")
                i = j + 1
                continue
            first = values[i]
            assert first is not None
            j = i
            step: float | None = None
            while j + 1 < len(values) and values[j + 1] is not None:
                delta = round(values[j + 1] - values[j], 6)  # type: ignore[operator]
                if step is None:
                    step = delta
                elif delta != step:
                    break
                j += 1
            count = j - i
            if count == 0:
                tokens.append(format_value(first))
            elif not step:
                tokens.append(f"{format_value(first)}x{count}")
            else:
                sign = "+" if step > 0 else "-"
                tokens.append(f"{format_value(first)}{sign}{format_value(abs(step))}x{count}")
            i = j + 1
        return " ".join(tokens)

    def points(self, interval: float = 60.0) -> list[tuple[float, float]]:
        return [(m * interval, v) for m, v in enumerate(self.track) if v is not None]


def series(name: str, labels: Mapping[str, str], track: Track) -> Series:
    return Series(tuple(sorted({"__name__": name, **labels}.items())), tuple(track))


def gauge(tl: Timeline, value: float, before: float | None = None) -> Track:
    return [before if tl.before(m) else value for m in range(tl.length + 1)]


def counter(tl: Timeline, per_second: float, before: float | None = None, initial: float = 0.0,
            stop_at: int | None = None) -> Track:
    """A counter rising at ``per_second`` (``before`` until the start; None = absent), frozen from
    ``stop_at`` on."""
    track: Track = []
    total = initial
    present = False
    for m in range(tl.length + 1):
        rate = before if tl.before(m) else per_second
        if rate is None:
            track.append(None)
            continue
        if present and (stop_at is None or m <= stop_at):
            total = round(total + rate * 60, 6)
        present = True
        track.append(total)
    return track


def pattern_value(share: float, minute: int) -> float:
    """1 in ``share`` of the minutes (share 1/n: every n-th minute), else 0: a flickering 0/1 gauge."""
    if share <= 0:
        return 0.0
    if share >= 1:
        return 1.0
    period = round(1 / share)
    return 1.0 if minute % period == 0 else 0.0


def store_of(all_series: Sequence[Series]) -> SeriesStore:
    store = SeriesStore()
    for s in all_series:
        store.add(dict(s.labels), s.points())
    return store
