"""The latest snapshot of every training job and rank that pushed to this exporter, with hard bounds.

Reads validated ``schema.Snapshot``s from the receiver thread; the exposition reads ``ranks()`` on scrapes.
Bounded by construction: at most ``max_jobs`` jobs and ``max_ranks`` ranks per job, one fixed-size snapshot
each; anything beyond is refused with a reason the receiver counts::

    bottleneck_push_rejected_total{reason="too_many_jobs"} 17.0
    bottleneck_push_jobs 32.0

A job/rank that sent nothing for ``expiry`` seconds is forgotten, so finished jobs do not accumulate.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable

from exporter.push.schema import Rejected, Snapshot


@dataclasses.dataclass(frozen=True)
class RankState:
    snapshot: Snapshot
    # The trainer's PID as this exporter sees it: the kernel-reported sender PID on the Unix socket (which
    # differs from snapshot.pid when the trainer lives in another PID namespace), else the claimed one.
    pid: int
    # Whether snapshot.pid and worker PIDs are valid in this exporter's PID namespace.
    same_pid_namespace: bool
    last_seen: float


class JobStore:
    def __init__(self, max_jobs: int, max_ranks: int, expiry: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_jobs = max_jobs
        self.max_ranks = max_ranks
        self.expiry = expiry
        self._clock = clock
        self._lock = threading.Lock()
        self._jobs: dict[str, dict[int, RankState]] = {}

    def accept(self, snapshot: Snapshot, peer_pid: int | None = None) -> RankState:
        """Store a snapshot; raises Rejected (too_many_jobs, too_many_ranks, stale) without storing."""
        pid = peer_pid if peer_pid is not None else snapshot.pid
        state = RankState(snapshot, pid, peer_pid is None or peer_pid == snapshot.pid, self._clock())
        with self._lock:
            ranks = self._jobs.get(snapshot.job)
            if ranks is None:
                if len(self._jobs) >= self.max_jobs:
                    raise Rejected("too_many_jobs", f"already tracking {self.max_jobs} jobs")
                ranks = self._jobs[snapshot.job] = {}
            previous = ranks.get(snapshot.rank)
            if previous is None:
                if len(ranks) >= self.max_ranks:
                    raise Rejected("too_many_ranks", f"job already has {self.max_ranks} ranks")
            elif previous.pid == pid and snapshot.seq <= previous.snapshot.seq:
                # Same process, older or repeated datagram: totals would go backwards.
                raise Rejected("stale", f"seq {snapshot.seq} <= {previous.snapshot.seq}")
            ranks[snapshot.rank] = state
        return state

    def expire(self) -> list[RankState]:
        """Forget job/ranks silent for longer than ``expiry``; returns what was dropped."""
        deadline = self._clock() - self.expiry
        dropped: list[RankState] = []
        with self._lock:
            for job in list(self._jobs):
                ranks = self._jobs[job]
                for rank in [r for r, s in ranks.items() if s.last_seen < deadline]:
                    dropped.append(ranks.pop(rank))
                if not ranks:
                    del self._jobs[job]
        return dropped

    def ranks(self) -> list[RankState]:
        with self._lock:
            return [state for ranks in self._jobs.values() for state in ranks.values()]

    def job_count(self) -> int:
        with self._lock:
            return len(self._jobs)
