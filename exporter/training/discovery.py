"""Finds the training processes on this node, and their DataLoader worker processes, from /proc alone.

Reads ``/proc/PID/stat`` of every process on each scrape (name, parent, start time), and, cached per
process for as long as it lives, ``/proc/PID/cmdline``, ``/proc/PID/environ`` (``LOCAL_RANK``) and the
targets of ``/proc/PID/fd/*`` (an open ``/dev/nvidia-uvm`` means a CUDA context). Exposes nothing itself:
``bottleneck_exporter.collectors.training`` turns what it finds into series such as

    bottleneck_training_process_info{process="train.py",local_rank="0",training_job="",discovered_by="gpu"} 1.0
    bottleneck_training_dataloader_workers_found{process="train.py",local_rank="0"} 2.0

A trainer is found, strongest evidence first, because
  1. the push receiver registered it (``push``; the registry also names its workers),
  2. it has children named ``pt_data_worker`` (``dataloader_workers``; torch names worker processes so),
  3. it holds ``/dev/nvidia-uvm`` open (``gpu``), or
  4. its command line matches ``cmdline-include`` (``cmdline``).
The weak kinds (3, 4) also match launchers (torchrun's agent) and helpers forked by a trainer (they inherit
its command line and open files); ``resolve_trainers`` sorts those out, see its docstring.
"""

from __future__ import annotations

import dataclasses
import os
import re
import time
from collections.abc import Callable, Iterable

from bottleneck_exporter.procfs import (
    ELASTIC_AGENT_COMM,
    PF_KTHREAD,
    WORKER_COMM,
    TaskStat,
    holds_open,
    pids,
    read_argv,
    read_environ_value,
    read_stat,
)
from bottleneck_exporter.training.registry import RegisteredProcess

# Discovery reasons, strongest first: the order decides ``discovered_by`` and who is kept under max-processes.
PUSH, WORKERS, GPU, CMDLINE = "push", "dataloader_workers", "gpu", "cmdline"
STRENGTH = {PUSH: 0, WORKERS: 1, GPU: 2, CMDLINE: 3}

# CUDA opens the unified-memory device for every context; NVML-only tools (nvidia-smi, GPU exporters) open
# /dev/nvidiactl and /dev/nvidiaN but not this one, so they are not taken for trainers.
GPU_DEVICE_PATHS = ("/dev/nvidia-uvm",)
# A process without a CUDA context now may create one later: look again after this many seconds.
GPU_RECHECK_SECONDS = 30.0
# Reading thousands of fd links of, say, a database every 30 s is not worth it; CUDA opens its devices early.
GPU_MAX_FDS_CHECKED = 4096

# A script whose base name starts with train/pretrain/finetune, or a module whose last part does. Narrow on
# purpose: "train" anywhere would match test_training.py, constraint.py, strain.py.
DEFAULT_CMDLINE_INCLUDE = (r"(^|[\s/])((pre)?train|finetune)[\w.-]*\.py(\s|$)"
                           r"|(^|\s)-m\s+(\w+\.)*((pre)?train|finetune)\w*(\s|$)")

# Label values come from user command lines: keep them bounded.
MAX_LABEL_LENGTH = 64
_PYTHON = re.compile(r"^(python|pypy)[\d.]*$")
_PYTHON_OPTIONS_WITH_ARGUMENT = ("-X", "-W", "--check-hash-based-pycs")


def holds_gpu(procfs: str, pid: int) -> bool:
    """True when one of the process's open files is a CUDA device (an fd link to /dev/nvidia-uvm)."""
    return holds_open(procfs, pid, GPU_DEVICE_PATHS, GPU_MAX_FDS_CHECKED)


def script_name(argv: list[str], comm: str) -> str:
    """What to call a process in labels: ``train.py`` for ``python -u /x/train.py``, ``pkg.train`` for
    ``python -m pkg.train``, the executable's base name otherwise, the kernel's name (comm) for
    ``python -c``."""
    name = comm
    if argv:
        name = os.path.basename(argv[0]) or comm
        if _PYTHON.match(name):
            name = comm
            i = 1
            while i < len(argv):
                arg = argv[i]
                if arg == "-m" and i + 1 < len(argv):
                    name = argv[i + 1]
                    break
                if arg.startswith("-m") and len(arg) > 2 and not arg.startswith("--"):
                    name = arg[2:]
                    break
                if arg.startswith("-c") or arg == "-":
                    break
                if arg in _PYTHON_OPTIONS_WITH_ARGUMENT:
                    i += 2
                    continue
                if arg.startswith("-"):
                    i += 1
                    continue
                name = os.path.basename(arg) or comm
                break
    return name[:MAX_LABEL_LENGTH]


@dataclasses.dataclass
class Trainer:
    """A training process found on this scrape, and the worker processes that load data for it."""

    pid: int
    starttime: int
    comm: str
    reasons: set[str]
    worker_pids: list[int] = dataclasses.field(default_factory=list)
    job: str = ""
    local_rank: str = ""
    process: str = ""

    @property
    def identity(self) -> tuple[int, int]:
        """(pid, start time): a PID reused by a later process is a different trainer."""
        return (self.pid, self.starttime)

    @property
    def discovered_by(self) -> str:
        return min(self.reasons, key=STRENGTH.__getitem__)


@dataclasses.dataclass
class _Facts:
    """Per-process facts that do not change while the process lives, read once."""

    argv: list[str] | None = None
    cmdline_match: bool | None = None
    local_rank: str | None = None
    local_rank_read: bool = False
    gpu: bool = False
    gpu_checked_at: float | None = None


class Discovery:
    """Scans /proc on each call to ``find``; remembers per-process facts between calls (bounded by the live
    processes: facts of processes that are gone are dropped on the next scan)."""

    def __init__(
        self,
        procfs: str,
        *,
        cmdline_include: str = DEFAULT_CMDLINE_INCLUDE,
        gpu: bool = True,
        own_pid: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.procfs = procfs
        self.cmdline_include = re.compile(cmdline_include) if cmdline_include else None
        self.gpu = gpu
        self.own_pid = own_pid
        self._clock = clock
        self._facts: dict[tuple[int, int], _Facts] = {}

    # -- per-process facts (cached) ------------------------------------------------------------------

    def _fact(self, pid: int, stat: TaskStat) -> _Facts:
        key = (pid, stat.starttime)
        fact = self._facts.get(key)
        if fact is None:
            fact = self._facts[key] = _Facts()
        return fact

    def argv(self, pid: int, stat: TaskStat) -> list[str]:
        fact = self._fact(pid, stat)
        if fact.argv is None:
            fact.argv = read_argv(self.procfs, pid)
        return fact.argv

    def cmdline_matches(self, pid: int, stat: TaskStat) -> bool:
        if self.cmdline_include is None:
            return False
        fact = self._fact(pid, stat)
        if fact.cmdline_match is None:
            # Cached: the search costs tens of microseconds on the multi-kilobyte command lines some daemons have.
            fact.cmdline_match = bool(self.cmdline_include.search(" ".join(self.argv(pid, stat))))
        return fact.cmdline_match

    def local_rank(self, pid: int, stat: TaskStat) -> str | None:
        fact = self._fact(pid, stat)
        if not fact.local_rank_read:
            fact.local_rank = read_environ_value(self.procfs, pid, "LOCAL_RANK")
            fact.local_rank_read = True
        return fact.local_rank

    def uses_gpu(self, pid: int, stat: TaskStat) -> bool:
        fact = self._fact(pid, stat)
        if fact.gpu:
            return True  # a CUDA context lives as long as the process
        now = self._clock()
        if fact.gpu_checked_at is None or now - fact.gpu_checked_at >= GPU_RECHECK_SECONDS:
            fact.gpu_checked_at = now
            fact.gpu = holds_gpu(self.procfs, pid)
        return fact.gpu

    # -- the scan ------------------------------------------------------------------------------------

    def scan(self) -> dict[int, TaskStat]:
        """stat of every user-space process now; kernel threads and vanished processes are left out."""
        processes: dict[int, TaskStat] = {}
        for pid in pids(self.procfs):
            stat = read_stat(self.procfs, pid)
            if stat is None or stat.flags & PF_KTHREAD:
                continue
            processes[pid] = stat
        live = {(pid, stat.starttime) for pid, stat in processes.items()}
        for key in [k for k in self._facts if k not in live]:
            del self._facts[key]
        return processes

    def find(self, registered: Iterable[RegisteredProcess] = ()) -> list[Trainer]:
        processes = self.scan()
        return resolve_trainers(processes, list(registered), self)


def _trainer_of_worker(worker: int, processes: dict[int, TaskStat], discovery: Discovery) -> int | None:
    """The process a DataLoader worker loads data for: its parent, or, under the forkserver start method,
    the parent of the forkserver. None for orphans (reparented to init)."""
    parent = processes[worker].ppid
    if parent in processes and any("multiprocessing.forkserver" in arg
                                   for arg in discovery.argv(parent, processes[parent])):
        parent = processes[parent].ppid
    if parent <= 1 or parent not in processes or processes[parent].comm == WORKER_COMM:
        return None
    return parent


def _ancestors(pid: int, processes: dict[int, TaskStat]) -> Iterable[int]:
    seen = {pid}
    current = processes[pid].ppid
    while current in processes and current not in seen:
        yield current
        seen.add(current)
        current = processes[current].ppid


def resolve_trainers(
    processes: dict[int, TaskStat], registered: list[RegisteredProcess], discovery: Discovery
) -> list[Trainer]:
    """Decide which processes are trainers and which processes are their workers.

    Strong evidence (a push registration, pt_data_worker children) always makes a trainer. Weak evidence
    (GPU, command line) is discarded for: DataLoader workers, even orphaned ones; torchrun's agent (comm
    ``pt_elastic``); descendants of a trainer (helpers forked by it inherit its command line and its open
    GPU files); and ancestors of a strong trainer (launchers). Between two weak candidates where one descends from the
    other, the ancestor wins (the descendant is a helper) unless the descendant has LOCAL_RANK or a GPU and
    the ancestor has not (then the ancestor is a launcher such as deepspeed or accelerate).
    """
    trainers, workers = _strong_trainers(processes, registered, discovery)
    strong = set(trainers)
    weak = _weak_candidates(processes, strong, workers, discovery)
    dropped = _launchers_and_helpers(weak, strong, processes, discovery)
    for pid, reasons in weak.items():
        if pid not in dropped:
            for reason in reasons:
                _add_reason(trainers, processes, pid, reason)
    for trainer in trainers.values():
        _name(trainer, processes[trainer.pid], discovery)
    return sorted(trainers.values(), key=lambda t: (STRENGTH[t.discovered_by], t.starttime, t.pid))


def _add_reason(trainers: dict[int, Trainer], processes: dict[int, TaskStat], pid: int, reason: str) -> Trainer:
    trainer = trainers.get(pid)
    if trainer is None:
        stat = processes[pid]
        trainer = trainers[pid] = Trainer(pid, stat.starttime, stat.comm, set())
    trainer.reasons.add(reason)
    return trainer


def _strong_trainers(
    processes: dict[int, TaskStat], registered: list[RegisteredProcess], discovery: Discovery
) -> tuple[dict[int, Trainer], set[int]]:
    """Trainers on strong evidence, and every DataLoader worker: the processes the push receiver registered
    (with the workers they named), then the trainers that pt_data_worker processes load data for."""
    trainers: dict[int, Trainer] = {}
    workers: set[int] = set()
    for reg in registered:
        if reg.pid not in processes:
            continue
        trainer = _add_reason(trainers, processes, reg.pid, PUSH)
        trainer.job, trainer.local_rank = reg.job, reg.local_rank
        for worker in reg.worker_pids:
            if worker in processes and worker != reg.pid and worker not in workers:
                workers.add(worker)
                trainer.worker_pids.append(worker)
    for pid, stat in sorted(processes.items()):
        if stat.comm != WORKER_COMM or pid in workers:
            continue
        parent = _trainer_of_worker(pid, processes, discovery)
        if parent is not None:
            workers.add(pid)
            _add_reason(trainers, processes, parent, WORKERS).worker_pids.append(pid)
    for pid in workers:
        trainers.pop(pid, None)  # a worker that loads data for a nested loader is still a worker
    return trainers, workers


def _weak_candidates(
    processes: dict[int, TaskStat], strong: set[int], workers: set[int], discovery: Discovery
) -> dict[int, set[str]]:
    """{pid: weak reasons} of the processes whose command line matches or that hold a GPU, other than the
    strong trainers, the workers, this exporter, and torchrun's agent."""
    weak: dict[int, set[str]] = {}
    for pid, stat in processes.items():
        if (pid in strong or pid in workers or pid == discovery.own_pid
                or stat.comm in (ELASTIC_AGENT_COMM, WORKER_COMM)):
            continue
        reasons = set()
        if discovery.cmdline_matches(pid, stat):
            reasons.add(CMDLINE)
        if discovery.gpu and discovery.uses_gpu(pid, stat):
            reasons.add(GPU)
        if reasons:
            weak[pid] = reasons
    return weak


def _launchers_and_helpers(
    weak: dict[int, set[str]], strong: set[int], processes: dict[int, TaskStat], discovery: Discovery
) -> set[int]:
    """The weak candidates that are not trainers: ancestors of a strong trainer (launchers), its descendants
    (helpers), and of two weak candidates in one line of descent the one that looks less like a rank."""
    launchers = {a for pid in strong for a in _ancestors(pid, processes)}

    def looks_like_rank(pid: int) -> tuple[bool, bool]:
        return (discovery.local_rank(pid, processes[pid]) is not None, GPU in weak[pid])

    dropped: set[int] = set()
    for pid in weak:
        if pid in launchers:
            dropped.add(pid)
            continue
        for ancestor in _ancestors(pid, processes):
            if ancestor in strong:
                dropped.add(pid)
                break
            if ancestor in weak:
                mine, theirs = looks_like_rank(pid), looks_like_rank(ancestor)
                if (mine[0] and not theirs[0]) or (mine[1] and not theirs[1]):
                    dropped.add(ancestor)
                else:
                    dropped.add(pid)
                    break
    return dropped


def _name(trainer: Trainer, stat: TaskStat, discovery: Discovery) -> None:
    """The trainer's labels: its script name, and its LOCAL_RANK unless the push receiver gave one."""
    trainer.process = script_name(discovery.argv(trainer.pid, stat), stat.comm)
    if not trainer.local_rank:
        trainer.local_rank = (discovery.local_rank(trainer.pid, stat) or "")[:MAX_LABEL_LENGTH]
    trainer.worker_pids.sort()
