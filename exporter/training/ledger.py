"""Per-thread CPU of a trainer and its DataLoader workers, by thread role, kept monotonic across scrapes.

Reads ``/proc/PID/task/TID/stat`` (utime, stime in USER_HZ ticks, start time), ``/proc/PID/task/TID/status``
(context switches, VmRSS), ``/proc/PID/io`` (storage bytes) and ``/proc/uptime`` (the clock the kernel
dates threads by). Exposes nothing itself; ``bottleneck_exporter.collectors.training`` turns a ``TrainerLedger`` into

    bottleneck_training_cpu_seconds_total{process="train.py",local_rank="",role="main",mode="user"} 41.2
    bottleneck_training_busiest_thread_cpu_ratio{process="train.py",local_rank="0",role="main"} 0.97

Why a ledger: the kernel's per-thread counters vanish with their thread (a DataLoader worker exits at the end
of every epoch unless persistent_workers=True), so summing live threads would make a "counter" fall and
Prometheus would read a reset. The ledger instead adds up each thread's growth between scrapes; a thread
that exits loses only what it used after the last scrape that saw it.
"""

from __future__ import annotations

import dataclasses

from bottleneck_exporter.procfs import PIN_MEMORY_COMM, USER_HZ, WORKER_COMM, read_io, read_stat, read_status, tids

MAIN, DATA_WORKER, PIN_MEMORY, OTHER = "main", "data_worker", "pin_memory", "other"
ROLES = (MAIN, DATA_WORKER, PIN_MEMORY, OTHER)

# Below this many seconds between scrapes a thread's growth is a handful of ticks (10 ms each): too coarse
# for a ratio. Closer scrapes (two Prometheus servers, a curl) reuse the last ratio instead.
BUSIEST_MIN_WINDOW_SECONDS = 1.0
# /proc/uptime and thread start times both have 10 ms resolution.
_START_TOLERANCE_SECONDS = 0.02


def role_of(tid: int, pid: int, comm: str, in_worker_process: bool) -> str:
    """A thread's role: every thread of a worker process loads data; in the trainer the thread whose TID
    is the PID is the main (Python) thread; torch names its pin-memory thread ``pt_data_pin``."""
    if in_worker_process or comm == WORKER_COMM:
        return DATA_WORKER
    if tid == pid:
        return MAIN
    if comm == PIN_MEMORY_COMM:
        return PIN_MEMORY
    return OTHER


@dataclasses.dataclass(frozen=True)
class ThreadSample:
    tid: int
    starttime: int  # ticks after boot; with tid, tells a reused TID from the thread it replaced
    role: str
    utime: int  # ticks
    stime: int
    voluntary_switches: int
    involuntary_switches: int

    @property
    def key(self) -> tuple[int, int]:
        return (self.tid, self.starttime)


@dataclasses.dataclass
class ProcessSample:
    """One trainer and its workers at one instant."""

    threads: list[ThreadSample]
    rss_bytes: int | None
    io_read_bytes: int | None
    io_written_bytes: int | None
    workers_found: int


def sample_process_threads(
    procfs: str, pid: int, in_worker_process: bool
) -> tuple[list[ThreadSample], int | None]:
    """Threads of one process and its resident memory; threads that exit while being read are skipped."""
    threads: list[ThreadSample] = []
    rss: int | None = None
    for tid in tids(procfs, pid):
        stat = read_stat(procfs, pid, tid)
        if stat is None:
            continue
        status = read_status(procfs, pid, tid)
        if rss is None and status is not None:
            rss = status.rss_bytes  # the process's, shown in each of its threads
        threads.append(ThreadSample(
            tid=tid,
            starttime=stat.starttime,
            role=role_of(tid, pid, stat.comm, in_worker_process),
            utime=stat.utime,
            stime=stat.stime,
            voluntary_switches=status.voluntary_switches if status is not None else 0,
            involuntary_switches=status.involuntary_switches if status is not None else 0,
        ))
    return threads, rss


def sample_trainer(procfs: str, pid: int, worker_pids: list[int]) -> ProcessSample | None:
    """The trainer's threads plus its workers' threads (role data_worker). None when the trainer is gone."""
    threads, rss = sample_process_threads(procfs, pid, in_worker_process=False)
    if not threads:
        return None
    io = read_io(procfs, pid)
    io_read, io_written = io if io is not None else (None, None)
    workers_found = 0
    for worker in worker_pids:
        worker_threads, worker_rss = sample_process_threads(procfs, worker, in_worker_process=True)
        if not worker_threads:
            continue  # exited since discovery
        workers_found += 1
        threads.extend(worker_threads)
        if worker_rss is not None:
            rss = (rss or 0) + worker_rss
        worker_io = read_io(procfs, worker)
        if worker_io is not None and io_read is not None and io_written is not None:
            io_read += worker_io[0]
            io_written += worker_io[1]
    return ProcessSample(threads, rss, io_read, io_written, workers_found)


class TrainerLedger:
    """Monotonic per-role counters and busiest-thread ratios for one trainer, updated once per scrape."""

    def __init__(self) -> None:
        # role -> [user ticks, system ticks]
        self.cpu_ticks: dict[str, list[int]] = {role: [0, 0] for role in ROLES}
        self.voluntary_switches = 0
        self.involuntary_switches = 0
        self.io_read_bytes: int | None = None
        self.io_written_bytes: int | None = None
        # role -> share of one core; empty until two scrapes at least BUSIEST_MIN_WINDOW_SECONDS apart
        self.busiest: dict[str, float] = {}
        self.threads_by_role: dict[str, int] = dict.fromkeys(ROLES, 0)
        self.rss_bytes: int | None = None
        self.workers_found = 0
        self._last: dict[tuple[int, int], ThreadSample] = {}
        self._last_io: tuple[int, int] | None = None
        self._window_start: float | None = None
        self._window_cpu: dict[tuple[int, int], int] = {}

    def update(self, sample: ProcessSample, uptime: float | None) -> None:
        """Fold in a new sample; ``uptime`` is /proc/uptime read just before the sample was taken (None when
        unreadable: then no busiest-thread ratio, as thread start times cannot be placed on a clock)."""
        self.threads_by_role = dict.fromkeys(ROLES, 0)
        for thread in sample.threads:
            self.threads_by_role[thread.role] += 1
            previous = self._last.get(thread.key)
            if previous is None:
                grown = (thread.utime, thread.stime, thread.voluntary_switches, thread.involuntary_switches)
            else:
                grown = (thread.utime - previous.utime, thread.stime - previous.stime,
                         thread.voluntary_switches - previous.voluntary_switches,
                         thread.involuntary_switches - previous.involuntary_switches)
            user, system, voluntary, involuntary = (max(0, value) for value in grown)
            self.cpu_ticks[thread.role][0] += user
            self.cpu_ticks[thread.role][1] += system
            self.voluntary_switches += voluntary
            self.involuntary_switches += involuntary
        self._last = {thread.key: thread for thread in sample.threads}

        self.rss_bytes = sample.rss_bytes
        self.workers_found = sample.workers_found
        self._update_io(sample)
        if uptime is not None:
            self._update_busiest(sample, uptime)

    def _update_io(self, sample: ProcessSample) -> None:
        if sample.io_read_bytes is None or sample.io_written_bytes is None:
            return
        now = (sample.io_read_bytes, sample.io_written_bytes)
        if self._last_io is None or self.io_read_bytes is None or self.io_written_bytes is None:
            self.io_read_bytes, self.io_written_bytes = now
        else:
            # A worker reaped by its parent moves its bytes into the parent's /proc/PID/io (no change in the
            # sum); one reaped elsewhere (a forkserver) makes the sum fall: count only growth.
            self.io_read_bytes += max(0, now[0] - self._last_io[0])
            self.io_written_bytes += max(0, now[1] - self._last_io[1])
        self._last_io = now

    def _update_busiest(self, sample: ProcessSample, uptime: float) -> None:
        current = {thread.key: thread.utime + thread.stime for thread in sample.threads}
        if self._window_start is None:
            # First sight of this trainer: no window yet, so no ratio (a since-start average would say
            # little about now and would read like a current value).
            self._window_start, self._window_cpu = uptime, current
            return
        elapsed = uptime - self._window_start
        if elapsed < BUSIEST_MIN_WINDOW_SECONDS:
            return
        busiest: dict[str, float] = {}
        for thread in sample.threads:
            start_cpu = self._window_cpu.get(thread.key)
            if start_cpu is None:
                if thread.starttime / USER_HZ < self._window_start - _START_TOLERANCE_SECONDS:
                    continue  # existed before the window but was not seen then: its growth is unknown
                start_cpu = 0
            share = (current[thread.key] - start_cpu) / USER_HZ / elapsed
            # Tick rounding can push a fully busy thread a hair over one core.
            share = min(1.0, max(0.0, share))
            busiest[thread.role] = max(busiest.get(thread.role, 0.0), share)
        self.busiest = busiest
        self._window_start, self._window_cpu = uptime, current
