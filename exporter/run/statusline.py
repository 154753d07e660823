"""The one line ``bottleneck-exporter run`` keeps on a terminal while the command runs, redrawn in place::

    bottleneck-exporter run 1m12s | train: 3.4 steps/s, data wait 82% | input-bound (data loading)

Steps per second (the mean of the job's ranks) and the share of the step spent waiting for data come from the
sampler's last two scrapes (``Watched`` keeps them: the line scrapes nothing itself); the leading verdict is the
most severe condition that holds over the samples, judged again at most every ``VERDICT_SECONDS``. Drawn only
where stderr is a terminal (``\\r``, the text, clear to the end of the line, and ``\\r`` again, so that a line the
command prints next starts at the left margin), never on a pipe or in a file.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Sequence
from typing import TextIO

from bottleneck_exporter.options import format_duration
from bottleneck_exporter.verdicts.sampling import Source
from bottleneck_exporter.verdicts.scrape import Sample
from bottleneck_exporter.wire.schema import JOB_LABEL

log = logging.getLogger(__name__)

VERDICT_SECONDS = 10.0  # judging every rule over the samples costs tens of milliseconds: not at every sample
_CLEAR = "\x1b[K"

Timed = tuple[float, list[Sample]]


class Watched:
    """``source``, passed through, keeping its last two answers and when they came."""

    def __init__(self, source: Source, clock: Callable[[], float] = time.monotonic) -> None:
        self.source = source
        self.kind, self.url, self.target = source.kind, source.url, source.target
        self.clock = clock
        self.before: Timed | None = None
        self.last: Timed | None = None

    def describe(self) -> str:
        return self.source.describe()

    def start(self) -> None:
        self.source.start()

    def stop(self) -> None:
        self.source.stop()

    def samples(self) -> list[Sample]:
        answer = self.source.samples()
        self.before, self.last = self.last, (self.clock(), answer)
        return answer


def _per_rank(samples: Sequence[Sample]) -> dict[tuple[str, str], dict[str, float]]:
    """(job, rank) → steps and the data_wait and step phase seconds, from one scrape."""
    ranks: dict[tuple[str, str], dict[str, float]] = {}
    for name, labels, value in samples:
        if name == "bottleneck_train_steps_total":
            key = "steps"
        elif name == "bottleneck_train_phase_seconds_total" and labels.get("phase") in ("data_wait", "step"):
            key = labels["phase"]
        else:
            continue
        ranks.setdefault((labels.get(JOB_LABEL, "?"), labels.get("rank", "?")), {})[key] = value
    return ranks


def progress_of(before: Timed, last: Timed) -> dict[str, tuple[float, float | None]]:
    """Each job's steps per second (the mean of its ranks) and data-wait share of the step time between two
    scrapes (None when no step time passed)."""
    seconds = last[0] - before[0]
    old, new = _per_rank(before[1]), _per_rank(last[1])
    jobs: dict[str, list[tuple[float, float, float]]] = {}
    for (job, rank), now in new.items():
        then = old.get((job, rank), {})
        jobs.setdefault(job, []).append(tuple(  # type: ignore[arg-type]
            max(0.0, now.get(key, 0.0) - then.get(key, 0.0)) for key in ("steps", "data_wait", "step")))
    result: dict[str, tuple[float, float | None]] = {}
    for job, deltas in sorted(jobs.items()):
        steps = sum(d[0] for d in deltas) / len(deltas) / seconds if seconds > 0 else 0.0
        step_time = sum(d[2] for d in deltas)
        result[job] = (steps, sum(d[1] for d in deltas) / step_time if step_time > 0 else None)
    return result


class StatusLine:
    def __init__(self, stream: TextIO, watched: Watched, verdict: Callable[[], str | None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``verdict()``: the leading verdict now (None: nothing holds)."""
        self.stream = stream
        self.watched = watched
        self.verdict = verdict
        self.clock = clock
        self._leading: str | None = None
        self._judged_at: float | None = None
        self._drawn = False
        self._broken = False

    def text(self, elapsed: float) -> str:
        parts = [f"bottleneck-exporter run {format_duration(round(elapsed))}"]
        watched = self.watched
        jobs = progress_of(watched.before, watched.last) if watched.before and watched.last else {}
        if not jobs:
            parts.append("no step timings yet")
        for job, (steps, data_wait) in jobs.items():
            share = f", data wait {data_wait:.0%}" if data_wait is not None else ""
            parts.append(f"{job}: {steps:.3g} steps/s{share}")
        now = self.clock()
        if self._judged_at is None or now - self._judged_at >= VERDICT_SECONDS:
            self._judged_at = now
            self._leading = self.verdict()
        parts.append(self._leading or "no bottleneck found yet")
        return " | ".join(parts)

    def show(self, elapsed: float, window: float) -> None:
        """Redraw (``Sampler.run``'s progress callback). Never raises: a line that cannot be drawn (a terminal
        gone, a bug) is given up, and the sampling goes on without it."""
        if self._broken:
            return
        try:
            try:
                columns = os.get_terminal_size(self.stream.fileno()).columns
            except (AttributeError, ValueError, OSError):
                columns = 0
            width = columns - 1 if columns > 0 else 99  # a terminal that does not say (0) gets a common width
            self.stream.write(f"\r{self.text(elapsed)[:width]}{_CLEAR}\r")
            self.stream.flush()
            self._drawn = True
        except Exception:
            self._broken = True
            log.debug("status line given up", exc_info=True)

    def clear(self) -> None:
        if self._drawn:
            with contextlib.suppress(OSError, ValueError):
                self.stream.write(f"\r{_CLEAR}")
                self.stream.flush()
            self._drawn = False
