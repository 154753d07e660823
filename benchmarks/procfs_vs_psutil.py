"""What reading /proc costs through ``bottleneck_exporter.procfs`` and through psutil, for each job the exporter does.

    .venv/bin/python benchmarks/procfs_vs_psutil.py [--rounds 200] [--threads 32]

Reads the real /proc of this machine, in this process, one job after the other, and prints per job the
median wall time of one call over ``--rounds`` calls, ours and psutil's, and what psutil's answer lacks for
the job. Jobs: each host collector's files; the training collector's discovery scan (stat of every process);
sampling every thread of a process (this process, given ``--threads`` extra idle threads); push liveness
(one process's state and start time); the hook's DataLoader worker lookup (children and their names).
psutil reads the same files, so the times compare parsing and object overhead; what it cannot answer
(thread names, per-thread context switches, schedstat, PSI, --path.procfs per collector) is why
``bottleneck_exporter.procfs`` stays the reader.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable

import psutil

from bottleneck_exporter import procfs
from bottleneck_exporter.training.discovery import Discovery
from bottleneck_exporter.training.ledger import sample_process_threads

PROC = "/proc"
# What the memory collector reads.
MEMINFO_KEYS = ("MemTotal", "MemAvailable", "MemFree", "Buffers", "Cached", "SwapTotal", "SwapFree")
VMSTAT_KEYS = ("pswpin", "pswpout", "pgmajfault", "oom_kill")


def median_microseconds(call: Callable[[], object], rounds: int) -> float:
    call()  # warm caches (psutil's Process objects, our per-process facts)
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def ours_scan() -> object:
    return {pid: stat for pid in procfs.pids(PROC) if (stat := procfs.read_stat(PROC, pid)) is not None}


def psutil_scan() -> object:
    return {p.pid: p.info for p in psutil.process_iter(["ppid", "name", "create_time"])}


def psutil_threads(pid: int) -> object:
    process = psutil.Process(pid)
    with process.oneshot():
        return process.threads(), process.memory_info().rss, process.num_ctx_switches(), process.io_counters()


def psutil_workers() -> object:
    return [child.pid for child in psutil.Process().children() if child.name() == procfs.WORKER_COMM]


def psutil_liveness(pid: int) -> object:
    process = psutil.Process(pid)
    with process.oneshot():
        return process.status(), process.create_time()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=200, help="calls per job and reader (default %(default)s)")
    parser.add_argument("--threads", type=int, default=32, help="extra idle threads (default %(default)s)")
    args = parser.parse_args()

    stop = threading.Event()
    idle = [threading.Thread(target=stop.wait, daemon=True) for _ in range(args.threads)]
    for thread in idle:
        thread.start()
    pid = os.getpid()
    processes = len(procfs.pids(PROC))
    print(f"{os.cpu_count()} CPUs, {processes} processes, this process {len(procfs.tids(PROC, pid))} threads, "
          f"psutil {psutil.__version__}, Python {sys.version.split()[0]}, median of {args.rounds} calls\n")

    jobs: list[tuple[str, Callable[[], object], Callable[[], object], str]] = [
        ("cpu: stat, loadavg, schedstat",
         lambda: (procfs.read_cpu_stat(PROC), procfs.read_loadavg(PROC), procfs.read_schedstat(PROC)),
         lambda: (psutil.cpu_times(percpu=True), psutil.cpu_stats(), psutil.getloadavg()),
         "no run-queue wait (schedstat), no procs_blocked"),
        ("memory: meminfo, vmstat",
         lambda: (procfs.read_meminfo(PROC, MEMINFO_KEYS), procfs.read_vmstat(PROC, VMSTAT_KEYS)),
         lambda: (psutil.virtual_memory(), psutil.swap_memory()),
         "no major faults, no OOM kills; swap in bytes, not pages"),
        ("pressure: PSI cpu, io, memory",
         lambda: [procfs.read_pressure(PROC, r) for r in ("cpu", "io", "memory")],
         lambda: None,
         "no PSI at all"),
        ("disk: diskstats",
         lambda: procfs.read_diskstats(PROC),
         lambda: psutil.disk_io_counters(perdisk=True),
         "its own partition rule, no io_now"),
        ("network: net/dev",
         lambda: procfs.read_net_dev(PROC),
         lambda: psutil.net_io_counters(pernic=True),
         "same columns (sysfs speed and InfiniBand are ours either way)"),
        (f"discovery: stat of all {processes} processes",
         ours_scan, psutil_scan,
         "one procfs path per interpreter (psutil.PROCFS_PATH), not per collector"),
        ("discovery as the collector runs it (facts cached)",
         Discovery(PROC, own_pid=pid).find, lambda: None,
         "-"),
        ("thread ledger: every thread of one process",
         lambda: sample_process_threads(PROC, pid, in_worker_process=False),
         lambda: psutil_threads(pid),
         "no thread names (roles), no per-thread start time or context switches"),
        ("push liveness: one process's state and start time",
         lambda: procfs.read_stat(PROC, pid), lambda: psutil_liveness(pid),
         "start time in seconds since the epoch (rounded), not ticks"),
        ("hook: DataLoader workers (children and names)",
         lambda: [c for c in procfs.read_children(PROC, pid) if procfs.read_comm(PROC, c) == procfs.WORKER_COMM],
         psutil_workers,
         "scans every process for children; not importable in the hook (stdlib only)"),
    ]
    print(f"{'job':<52} {'ours µs':>9} {'psutil µs':>10}  what psutil lacks")
    for name, ours, theirs, lacks in jobs:
        our_time = median_microseconds(ours, args.rounds)
        probe = theirs()
        their_time = "-" if probe is None else f"{median_microseconds(theirs, args.rounds):.0f}"
        print(f"{name:<52} {our_time:>9.0f} {their_time:>10}  {lacks}")
    stop.set()
    return 0


if __name__ == "__main__":
    sys.exit(main())
