"""The latest snapshot of every training job and rank that pushed to this exporter, with hard bounds.

Reads validated ``wire.schema.Snapshot``s from the receiver thread; the exposition reads ``ranks()`` on scrapes.
Bounded by construction: at most ``max_jobs`` jobs and ``max_ranks`` ranks per job, one fixed-size snapshot
each; anything beyond is refused with a reason the receiver counts::

    bottleneck_push_rejected_total{reason="too_many_jobs"} 17.0
    bottleneck_push_jobs 32.0

A job/rank that sent nothing for ``expiry`` seconds is forgotten, so finished jobs do not accumulate, unless
its sender, identified by the kernel, still runs (``liveness``): a hung trainer sends nothing but must stay
visible. Such a rank keeps its place in the bounds above until its process is gone.

A job/rank belongs to the sender that created it over the Unix socket (its kernel-reported PID and uid) until
that process exits: another sender's datagrams for it are refused, so nobody can reset or forge a rank that
is not theirs::

    bottleneck_push_rejected_total{reason="not_owner"} 3.0
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable

from bottleneck_exporter.push.liveness import ProcessIdentity, ProcessTable
from bottleneck_exporter.wire.schema import Rejected, Snapshot


@dataclasses.dataclass(frozen=True)
class RankState:
    snapshot: Snapshot
    # The trainer's PID as this exporter sees it: the kernel-reported sender PID on the Unix socket (which
    # differs from snapshot.pid when the trainer lives in another PID namespace), else the claimed one.
    pid: int
    # Whether snapshot.pid and worker PIDs are valid in this exporter's PID namespace.
    same_pid_namespace: bool
    last_seen: float
    # The kernel-reported sender with its start time, when its liveness can be checked; None for a PID that
    # is only claimed (UDP) or could not be read: such a rank expires after ``expiry`` of silence regardless.
    process: ProcessIdentity | None = None
    # The kernel-reported uid of the sender (Unix socket); None over UDP, where a rank belongs to nobody.
    uid: int | None = None


class JobStore:
    def __init__(self, max_jobs: int, max_ranks: int, expiry: float,
                 clock: Callable[[], float] = time.monotonic, processes: ProcessTable | None = None) -> None:
        self.max_jobs = max_jobs
        self.max_ranks = max_ranks
        self.expiry = expiry
        self.processes = processes  # None: expiry by silence only
        self._clock = clock
        self._lock = threading.Lock()
        self._jobs: dict[str, dict[int, RankState]] = {}

    def accept(self, snapshot: Snapshot, peer_pid: int | None = None, received: float | None = None,
               peer_uid: int | None = None) -> RankState:
        """Store a snapshot; raises Rejected (too_many_jobs, too_many_ranks, stale, not_owner) without storing.

        ``peer_pid`` and ``peer_uid`` identify the sender as the kernel reported it (None when unknown, as on
        UDP); ``received`` is the boot-clock time the datagram arrived (``liveness.boot_clock``)."""
        pid = peer_pid if peer_pid is not None else snapshot.pid
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
            elif not self._may_update(previous, peer_pid, peer_uid):
                raise Rejected("not_owner", f"job {snapshot.job} rank {snapshot.rank} belongs to PID "
                               f"{previous.pid} (uid {previous.uid}), which still runs")
            elif previous.pid == pid and snapshot.seq <= previous.snapshot.seq:
                # Same process, older or repeated datagram: totals would go backwards.
                raise Rejected("stale", f"seq {snapshot.seq} <= {previous.snapshot.seq}")
            process = self._identify(previous, peer_pid, received)
            state = RankState(snapshot, pid, peer_pid is None or peer_pid == snapshot.pid, self._clock(),
                              process, peer_uid)
            ranks[snapshot.rank] = state
        return state

    def _may_update(self, previous: RankState, peer_pid: int | None, peer_uid: int | None) -> bool:
        """Whether this sender may replace the rank's state: its owner, or anyone once the owner has exited."""
        if previous.uid is None:
            return True  # created over UDP: nobody's
        if peer_uid is None:
            return False  # a UDP datagram carries no credentials
        if peer_pid is not None and peer_pid == previous.pid and peer_uid == previous.uid:
            return True
        if previous.process is not None and self.processes is not None:
            return not self.processes.alive(previous.process)  # a restarted trainer takes over its rank
        # Whether the owner still runs cannot be told here: its own user may take over (a restart), nobody
        # else until the rank expires.
        return peer_uid == previous.uid

    def _identify(self, previous: RankState | None, peer_pid: int | None,
                  received: float | None) -> ProcessIdentity | None:
        if peer_pid is None or self.processes is None:
            return None
        if previous is not None and previous.process is not None and previous.process.pid == peer_pid:
            return previous.process  # read once per process, not once per datagram
        return self.processes.identify(peer_pid, received)

    def expire(self) -> list[RankState]:
        """Forget job/ranks silent for longer than ``expiry`` whose sender is not known to run; returns what
        was dropped."""
        deadline = self._clock() - self.expiry
        with self._lock:
            silent = [s for ranks in self._jobs.values() for s in ranks.values() if s.last_seen < deadline]
        # /proc is read outside the lock: scrapes need not wait for it.
        held = {id(s) for s in silent
                if s.process is not None and self.processes is not None and self.processes.alive(s.process)}
        dropped: list[RankState] = []
        with self._lock:
            for state in silent:
                job, rank = state.snapshot.job, state.snapshot.rank
                ranks = self._jobs.get(job)
                # A datagram that arrived meanwhile replaced the state: it is no longer silent.
                if id(state) in held or ranks is None or ranks.get(rank) is not state:
                    continue
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
