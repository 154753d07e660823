"""Training processes on this node: CPU per thread role, busiest thread, memory, context switches, IO.

Finds trainers without being told (``bottleneck_exporter.training.discovery``: DataLoader worker children, a CUDA device
held open, a command line) or because the push receiver registered them, then reads every thread of the trainer and its
DataLoader workers (``bottleneck_exporter.training.ledger``). No PID or TID labels: a trainer is named by its script and
LOCAL_RANK; two trainers that would share both get ``#2``, ``#3``... by start time.

    bottleneck_training_process_info{process="train.py",local_rank="0",training_job="",discovered_by="gpu"} 1.0
    bottleneck_training_cpu_seconds_total{process="train.py",local_rank="0",role="main",mode="user"} 812.4
    bottleneck_training_busiest_thread_cpu_ratio{process="train.py",local_rank="0",role="data_worker"} 0.98
    bottleneck_training_cpu_throttled_seconds_total{process="train.py",local_rank="0"} 731.6

The CPU limit of the cgroups the trainer and its workers run in, and how often it throttles them, come from
``bottleneck_exporter.training.throttling``; a cgroup file that is missing or garbled costs only that trainer's
throttling series, counted in ``bottleneck_training_cgroup_read_errors_total``. Trainers under the same limit
(the ranks of one container) share it: each one's share is in ``bottleneck_training_cpu_limit_share_cores``.
The CPUs a trainer may run on (``Cpus_allowed_list``) are counted in ``bottleneck_training_allowed_cpus``.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable
from typing import Any

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from bottleneck_exporter.collectors.base import Context, register
from bottleneck_exporter.collectors.problems import ProblemLog
from bottleneck_exporter.kube.processes import ProcessPods, label_pods
from bottleneck_exporter.options import Option, parse_bool, parse_positive_int, parse_regex
from bottleneck_exporter.procfs import USER_HZ, ProcParseError, read_allowed, read_uptime
from bottleneck_exporter.training.discovery import DEFAULT_CMDLINE_INCLUDE, Discovery, Trainer
from bottleneck_exporter.training.ledger import ROLES, TrainerLedger, sample_trainer
from bottleneck_exporter.training.throttling import Throttling, ThrottlingReader
from bottleneck_exporter.wire.schema import JOB_LABEL

log = logging.getLogger(__name__)

_LABELS = ["process", "local_rank"]


def disambiguate(trainers: list[Trainer]) -> dict[tuple[int, int], tuple[str, str]]:
    """(process, local_rank) label values per trainer identity. Trainers that would share them are told apart
    by start order: the oldest keeps the plain name, the next is ``train.py#2``, and so on. Stable while
    they all live; when the oldest exits the next one inherits the plain name (a counter reset there)."""
    groups: dict[tuple[str, str], list[Trainer]] = {}
    for trainer in trainers:
        groups.setdefault((trainer.process, trainer.local_rank), []).append(trainer)
    labels: dict[tuple[int, int], tuple[str, str]] = {}
    for (process, local_rank), members in groups.items():
        for ordinal, trainer in enumerate(sorted(members, key=lambda t: (t.starttime, t.pid)), start=1):
            labels[trainer.identity] = (process if ordinal == 1 else f"{process}#{ordinal}", local_rank)
    return labels


@register(
    "training",
    help="Training processes found on the node: CPU per thread role (main, data_worker, pin_memory, other), "
    "busiest thread, memory, context switches, IO (/proc/PID/task).",
    options=(
        Option("cmdline-include", DEFAULT_CMDLINE_INCLUDE,
               "Regular expression searched in each process's command line (arguments joined by spaces) "
               "to find trainers that have no DataLoader workers and no GPU; empty turns this off.",
               parse_regex),
        Option("gpu-discovery", True,
               "Treat processes holding /dev/nvidia-uvm open (a CUDA context) as trainers.", parse_bool),
        Option("max-processes", 32, "Report at most this many training processes (strongest evidence, then "
               "oldest, first).", parse_positive_int),
    ),
)
class TrainingCollector:
    def __init__(self, ctx: Context) -> None:
        options: dict[str, Any] = ctx.options
        self.procfs = ctx.procfs
        self.registry = ctx.training
        self.max_processes = int(options.get("max-processes", 32))
        # Only when reading our own /proc can our own PID be recognised (and it never is a trainer).
        own_pid = os.getpid() if os.path.realpath(ctx.procfs) == "/proc" else None
        self.discovery = Discovery(
            ctx.procfs,
            cmdline_include=str(options.get("cmdline-include", DEFAULT_CMDLINE_INCLUDE)),
            gpu=bool(options.get("gpu-discovery", True)),
            own_pid=own_pid,
        )
        self._ledgers: dict[tuple[int, int], TrainerLedger] = {}
        self._dropped_logged = 0
        # namespace/pod/container of trainers that run in a pod (bottleneck_exporter.kube.processes).
        self.pods = ProcessPods(ctx.procfs, ctx.rootfs)
        self.throttling = ThrottlingReader(ctx.procfs, ctx.sysfs)
        self._cgroup_errors = 0
        self._cgroup_problems = ProblemLog(log)  # per trainer: its cgroup files
        self._status_problems = ProblemLog(log)  # per trainer: its CPU list
        # Scrapes can run concurrently (one HTTP thread each) and the ledgers carry state between them.
        self._lock = threading.Lock()

    def _sample(self) -> list[tuple[Trainer, TrainerLedger]]:
        trainers = self.discovery.find(self.registry.processes() if self.registry is not None else ())
        if len(trainers) > self.max_processes:
            if len(trainers) != self._dropped_logged:
                log.warning("found %d training processes, reporting the first %d (--collector.training."
                            "max-processes)", len(trainers), self.max_processes)
                self._dropped_logged = len(trainers)
            trainers = trainers[:self.max_processes]
        uptime = read_uptime(self.procfs)
        reported: list[tuple[Trainer, TrainerLedger]] = []
        for trainer in trainers:
            sample = sample_trainer(self.procfs, trainer.pid, trainer.worker_pids)
            if sample is None:
                continue  # exited since discovery
            ledger = self._ledgers.get(trainer.identity) or TrainerLedger()
            ledger.update(sample, uptime)
            reported.append((trainer, ledger))
        # Ledgers of trainers that are gone (or no longer reported) go with them.
        self._ledgers = {trainer.identity: ledger for trainer, ledger in reported}
        return reported

    def _throttling(self, reported: list[tuple[Trainer, TrainerLedger]]) -> dict[tuple[int, int], Throttling]:
        """Per trainer, its cgroups' throttling; a trainer whose cgroup files fail gets none (counted, and
        logged once until it reads again)."""
        found: dict[tuple[int, int], Throttling] = {}
        for trainer, _ in reported:
            try:
                throttling = self.throttling.read([trainer.pid, *trainer.worker_pids])
            except ProcParseError as error:
                self._cgroup_errors += 1
                self._cgroup_problems.failed(trainer.identity, "no CPU throttling series for %s (pid %d): %s "
                                             "(logged again only after it reads)", trainer.process, trainer.pid,
                                             error)
                continue
            self._cgroup_problems.read(trainer.identity)
            if throttling is not None:
                found[trainer.identity] = throttling
        self._cgroup_problems.keep(trainer.identity for trainer, _ in reported)
        return found

    def _allowed(self, reported: list[tuple[Trainer, TrainerLedger]]) -> dict[tuple[int, int], int]:
        """Per trainer, the CPUs its main thread may run on (taskset, a cpuset cgroup: docker --cpuset-cpus,
        Slurm's task/cgroup, the kubelet's static CPU manager), which the workers it forks inherit; none for a
        trainer gone, or whose list does not parse (logged once until it parses again)."""
        found: dict[tuple[int, int], int] = {}
        for trainer, _ in reported:
            try:
                allowed = read_allowed(self.procfs, trainer.pid)
            except ProcParseError as error:
                self._status_problems.failed(trainer.identity, "no allowed CPUs for %s (pid %d): %s",
                                             trainer.process, trainer.pid, error)
                continue
            self._status_problems.read(trainer.identity)
            if allowed is not None and allowed.cpus:
                found[trainer.identity] = len(allowed.cpus)
        self._status_problems.keep(trainer.identity for trainer, _ in reported)
        return found

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            reported = self._sample()
            pods = self.pods.identify((trainer.identity, trainer.pid) for trainer, _ in reported)
            throttled = self._throttling(reported)
            allowed = self._allowed(reported)
            cgroup_errors = self._cgroup_errors
        labels = disambiguate([trainer for trainer, _ in reported])

        info = GaugeMetricFamily("bottleneck_training_process_info",
                                 "A training process found on this node; value is always 1.",
                                 labels=[*_LABELS, JOB_LABEL, "discovered_by"])
        cpu = CounterMetricFamily("bottleneck_training_cpu_seconds_total",
                                  "CPU time of the trainer's threads and its DataLoader workers' threads, by "
                                  "thread role; kept from falling when threads exit (their time since the "
                                  "last scrape is lost).",
                                  labels=[*_LABELS, "role", "mode"])
        busiest = GaugeMetricFamily("bottleneck_training_busiest_thread_cpu_ratio",
                                    "CPU of the busiest thread of the role as a share of one core, since the "
                                    "previous scrape (absent on the first scrape of a process).",
                                    labels=[*_LABELS, "role"])
        threads = GaugeMetricFamily("bottleneck_training_threads",
                                    "Threads per role (worker processes' threads count as data_worker).",
                                    labels=[*_LABELS, "role"])
        rss = GaugeMetricFamily("bottleneck_training_resident_memory_bytes",
                                "Resident memory of the trainer plus its DataLoader workers (pages shared "
                                "after fork count in each process).", labels=_LABELS)
        switches = CounterMetricFamily("bottleneck_training_context_switches_total",
                                       "Context switches of all threads of the trainer and its workers.",
                                       labels=[*_LABELS, "kind"])
        io_read = CounterMetricFamily("bottleneck_training_io_read_bytes_total",
                                      "Bytes the trainer and its workers caused to be read from storage "
                                      "(/proc/PID/io read_bytes).", labels=_LABELS)
        io_written = CounterMetricFamily("bottleneck_training_io_written_bytes_total",
                                         "Bytes the trainer and its workers caused to be written to storage "
                                         "(/proc/PID/io write_bytes).", labels=_LABELS)
        workers = GaugeMetricFamily("bottleneck_training_dataloader_workers_found",
                                    "DataLoader worker processes found for the trainer.", labels=_LABELS)
        limit = GaugeMetricFamily("bottleneck_training_cpu_limit_cores",
                                  "CPU limit (CFS quota / period, in cores) of the cgroups the trainer and its "
                                  "workers run in; absent when none of them has a limit.", labels=_LABELS)
        limit_share = GaugeMetricFamily("bottleneck_training_cpu_limit_share_cores",
                                        "The trainer's share of its CPU limit (cores): the limit divided among "
                                        "the trainers found under the same limit (ranks of one container share "
                                        "it); absent when none of its cgroups has a limit.", labels=_LABELS)
        allowed_cpus = GaugeMetricFamily("bottleneck_training_allowed_cpus",
                                         "CPUs the trainer may run on (its main thread's Cpus_allowed_list: "
                                         "taskset, a cpuset cgroup), which the workers it forks inherit.",
                                         labels=_LABELS)
        periods = CounterMetricFamily("bottleneck_training_cpu_periods_total",
                                      "CFS enforcement periods in which the trainer's cgroups had tasks to run "
                                      "(cpu.stat nr_periods).", labels=_LABELS)
        throttled_periods = CounterMetricFamily("bottleneck_training_cpu_throttled_periods_total",
                                                "CFS periods in which the trainer's cgroups used up their CPU "
                                                "limit and were throttled (cpu.stat nr_throttled).",
                                                labels=_LABELS)
        throttled_seconds = CounterMetricFamily("bottleneck_training_cpu_throttled_seconds_total",
                                                "Time the trainer's cgroups were held off the CPU by their CPU "
                                                "limit, summed over CPUs (cpu.stat throttled_time or "
                                                "throttled_usec).", labels=_LABELS)
        cgroup_errors_family = CounterMetricFamily("bottleneck_training_cgroup_read_errors_total",
                                                   "Reads of a trainer's cgroup CPU files that failed (missing, "
                                                   "unreadable or garbled): that trainer's throttling series are "
                                                   "left out of that scrape.")
        cgroup_errors_family.add_metric([], cgroup_errors)

        # Ranks that torchrun starts in one container all run under that container's (or pod's) limit.
        sharing: dict[frozenset[str], int] = {}
        for limited in throttled.values():
            sharing[limited.limited_by] = sharing.get(limited.limited_by, 0) + 1
        for trainer, ledger in reported:
            base = list(labels[trainer.identity])
            info.add_metric([*base, trainer.job, trainer.discovered_by], 1.0)
            for role in ROLES:
                user, system = ledger.cpu_ticks[role]
                cpu.add_metric([*base, role, "user"], user / USER_HZ)
                cpu.add_metric([*base, role, "system"], system / USER_HZ)
                threads.add_metric([*base, role], ledger.threads_by_role[role])
                if role in ledger.busiest:
                    busiest.add_metric([*base, role], ledger.busiest[role])
            if ledger.rss_bytes is not None:
                rss.add_metric(base, ledger.rss_bytes)
            switches.add_metric([*base, "voluntary"], ledger.voluntary_switches)
            switches.add_metric([*base, "involuntary"], ledger.involuntary_switches)
            if ledger.io_read_bytes is not None and ledger.io_written_bytes is not None:
                io_read.add_metric(base, ledger.io_read_bytes)
                io_written.add_metric(base, ledger.io_written_bytes)
            workers.add_metric(base, ledger.workers_found)
            if trainer.identity in allowed:
                allowed_cpus.add_metric(base, allowed[trainer.identity])
            throttling = throttled.get(trainer.identity)
            if throttling is not None:
                if throttling.limit_cores is not None:
                    limit.add_metric(base, throttling.limit_cores)
                    limit_share.add_metric(base, throttling.limit_cores / sharing[throttling.limited_by])
                periods.add_metric(base, throttling.periods)
                throttled_periods.add_metric(base, throttling.throttled_periods)
                throttled_seconds.add_metric(base, throttling.throttled_seconds)

        families = (info, cpu, busiest, threads, rss, switches, io_read, io_written, workers, limit, limit_share,
                    allowed_cpus, periods, throttled_periods, throttled_seconds)
        label_pods(families, {labels[identity]: pod for identity, pod in pods.items()}, tuple(_LABELS), info)
        for family in families:
            if family.samples:
                yield family
        yield cgroup_errors_family
