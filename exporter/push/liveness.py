"""Whether the process that pushed a rank's datagrams still runs, and which processes descend from it, from
``<procfs>/<pid>/stat``.

The hook sends only when steps end, so a hung trainer falls silent. The job store keeps a silent rank as long
as its sender lives, so that its series (and BottleneckTrainingStalled) stay until the process is gone. Only a
PID the kernel vouched for is followed (``SO_PASSCRED`` on the Unix socket, translated into this exporter's
PID namespace); the ``pid`` a UDP datagram claims may belong to another PID namespace or be made up. Likewise a
DataLoader worker PID that a datagram names is believed only when its parents lead to that sender.

A process is named by its PID *and* its start time (field 22 of ``stat``, clock ticks after boot), read when
its first datagram arrives: once the trainer exits and the kernel gives its PID to a new process, the start
time differs and the rank is no longer held. Exposes nothing itself; what it keeps shows as, e.g.::

    bottleneck_train_last_step_timestamp_seconds{training_job="resnet",rank="0"} 1.7180000252e+09
    bottleneck_push_ranks 8.0
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time

from bottleneck_exporter.procfs import USER_HZ, ProcParseError, TaskStat, read_stat, shows_own_pid_namespace

log = logging.getLogger(__name__)

# Process states that are not running code any more: zombie (exited, not yet reaped by its parent), dead.
_GONE_STATES = frozenset("ZXx")
# Parent PIDs walked from a claimed worker up to its trainer: workers are children (fork, spawn) or
# grandchildren (forkserver); the bound only stops a walk through a pathological process tree.
_MAX_DEPTH = 16


@dataclasses.dataclass(frozen=True)
class ProcessIdentity:
    pid: int
    starttime: int  # clock ticks after boot; tells the sender from a later process given the same PID


def boot_clock() -> float:
    """Seconds since boot on the clock ``stat``'s start time counts in (CLOCK_BOOTTIME)."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


class ProcessTable:
    """Identifies and re-checks sender processes under ``procfs``, which must show this exporter's own PID
    namespace (the kernel reports sender PIDs in it); otherwise every check answers "unknown"."""

    def __init__(self, procfs: str = "/proc") -> None:
        self.procfs = procfs
        self.usable = shows_own_pid_namespace(procfs)
        if not self.usable:
            log.info("push: %s does not show this exporter's PID namespace (%s/self is not PID %d); silent "
                     "ranks are forgotten after --push.job-expiry even while their process lives", procfs,
                     procfs, os.getpid())

    def identify(self, pid: int, received: float | None = None) -> ProcessIdentity | None:
        """The running process with this PID, or None when it is gone, unreadable, or started after
        ``received`` (boot-clock seconds at which its datagram arrived: then the sender has exited and
        its PID already belongs to another process)."""
        if not self.usable:
            return None
        stat = self._read(pid)
        if stat is None or stat.state in _GONE_STATES:
            return None
        if received is not None and stat.starttime / USER_HZ > received:
            return None
        return ProcessIdentity(pid, stat.starttime)

    def alive(self, process: ProcessIdentity) -> bool:
        """Whether the identified process still runs (a zombie does not; a new process on its PID is not it)."""
        stat = self._read(process.pid)
        return stat is not None and stat.state not in _GONE_STATES and stat.starttime == process.starttime

    def descends_from(self, pid: int, ancestor: int) -> bool:
        """Whether ``pid`` is a child, grandchild, ... of ``ancestor`` (a DataLoader worker of its trainer, also
        through a forkserver), by walking parent PIDs; False when any step cannot be read."""
        if not self.usable:
            return False
        for _ in range(_MAX_DEPTH):
            stat = self._read(pid)
            if stat is None or stat.ppid <= 1:
                return False
            if stat.ppid == ancestor:
                return True
            pid = stat.ppid
        return False

    def _read(self, pid: int) -> TaskStat | None:
        """The process's stat; None when it is gone or its stat does not parse (then nothing vouches for it)."""
        try:
            return read_stat(self.procfs, pid)
        except ProcParseError:
            return None
