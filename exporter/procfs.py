"""The one reader of /proc (and of the few /sys attributes the collectors read): it opens, reads and parses
them, with the kernel's quirks in one place. Standard library only: the hook imports it inside the trainer.

Two kinds of trouble, two answers:

- A file that is missing or cannot be opened is *no data*: processes exit between listing and reading
  (ENOENT, ESRCH), another user's files refuse us (EACCES), kernels differ in what they provide (no PSI, no
  schedstat, no task IO accounting). The readers then return None, {} or [].
- A file that is there but does not read as the kernel writes it (a non-number, a line or file cut short, a
  file empty where the kernel always writes something, NaN, infinity, a negative count) raises
  ``ProcParseError`` naming the file and the field, never the file's contents. A collector lets it through,
  so the orchestrator reports it failed (success 0) instead of exporting numbers nobody can vouch for.

Process files: ``PID/stat`` and ``PID/task/TID/stat`` (``TaskStat``), ``status`` (also ``Allowed``), ``io``,
``cmdline``, ``environ``, ``comm``, ``fd/*``, ``task/PID/children``. System files: ``stat``, ``loadavg``, ``schedstat``,
``uptime``, ``meminfo``, ``vmstat``, ``pressure/*``, ``diskstats``, ``net/dev``. Exposes nothing itself.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Iterable

# USER_HZ is 100 on every Linux architecture exported to user space; stat files count CPU time in it.
USER_HZ = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

# The names torch gives its tasks, as the kernel shows them (comm): a DataLoader worker process, the
# pin-memory thread of a trainer, and the main thread of torchrun's agent (it launches trainers, it is not one).
WORKER_COMM = "pt_data_worker"
PIN_MEMORY_COMM = "pt_data_pin"
ELASTIC_AGENT_COMM = "pt_elastic"

# Columns of the cpuN lines of /proc/stat (proc(5)). guest and guest_nice follow, but the kernel already
# counts them inside user and nice: reading them as modes would count that time twice.
CPU_MODES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
# Every kernel prints user, nice, system and idle; iowait came in 2.5.41, steal in 2.6.11.
_CPU_MIN_COLUMNS = 4

# /proc/schedstat versions whose cpuN lines we know. 15 to 17 changed only the domainN lines
# (Documentation/scheduler/sched-stats.rst); another version may move the field, so it is not read.
SCHEDSTAT_VERSIONS = (15, 16, 17)
# "cpuN yld_count 0 sched_count sched_goidle ttwu_count ttwu_local rq_cpu_time run_delay pcount": the 8th
# number is the time tasks spent runnable on this CPU's queue but not running, in nanoseconds.
_RUN_DELAY_FIELD = 8

# fs/proc/meminfo.c prints these on every kernel; a file without one of them was cut short. (MemAvailable
# came in 3.14, so its absence alone proves nothing.)
_MEMINFO_ALWAYS = ("MemTotal", "MemFree", "Buffers", "Cached", "SwapTotal", "SwapFree")

# Kernels before 4.18 print 11 numbers after "major minor name"; newer ones add discard and flush columns.
DISKSTATS_MIN_COLUMNS = 11
# Receive columns 0-7, transmit columns 8-15 after "name:".
NET_DEV_COLUMNS = 16

# A read shorter than this is the end of the file: stat, status and io come whole in one read, cmdline and
# environ a page per read on older kernels.
_PAGE = 4096
_READ_SIZE = 65536


class ProcParseError(ValueError):
    """A /proc or /sys file that exists but does not read as the kernel writes it."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


# ---- reading ----------------------------------------------------------------------------------------

def read_text(path: str) -> str | None:
    """A whole file, or None when it (or its process) is gone or unreadable. Unbuffered os.read is about
    three times faster than open().read() on these small files, and a scrape reads a few per thread."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        chunks = [os.read(fd, _READ_SIZE)]
        while len(chunks[-1]) >= _PAGE:
            chunks.append(os.read(fd, _READ_SIZE))
    except OSError:
        # ESRCH from a task that exited between open and read, EINVAL from some sysfs attributes,
        # EOPNOTSUPP from PSI files on a kernel booted with psi=0.
        return None
    finally:
        os.close(fd)
    return b"".join(chunks).decode("utf-8", errors="replace")


def _kernel_text(path: str, *, may_be_empty: bool = False) -> str | None:
    """A file the kernel writes as newline-terminated lines: None when unreadable; raises when it is empty
    or its last line has no newline (cut short: the kernel always ends these files with one)."""
    text = read_text(path)
    if text is None:
        return None
    if not text:
        if may_be_empty:
            return text
        raise ProcParseError(path, "empty")
    if not text.endswith("\n"):
        raise ProcParseError(path, "cut short (the last line has no newline)")
    return text


def _is_count(word: str) -> bool:
    return word.isascii() and word.isdigit()


def _count(word: str, path: str, what: str) -> int:
    """A count as the kernel prints it (%u, %lu, %llu): ASCII digits only, so never negative."""
    if not _is_count(word):
        raise ProcParseError(path, f"{what} is not a non-negative whole number")
    return int(word)


def _counts(words: list[str], path: str, what: str, names: tuple[str, ...] = ()) -> list[int]:
    """A row of counts. int() and one sign check first (the per-word check costs a third of a host scrape);
    only a row that fails them is walked again to name the column: by ``names``, else "<what> column N"."""
    try:
        numbers = [int(word) for word in words]
        if not numbers or min(numbers) >= 0:
            return numbers
    except ValueError:
        pass
    for column, word in enumerate(words, start=1):
        _count(word, path, names[column - 1] if names else f"{what} column {column}")
    raise AssertionError("unreachable: a column above failed")


def _amount(word: str, path: str, what: str) -> float:
    """A non-negative finite decimal (load averages, uptime, link rates)."""
    try:
        number = float(word)
    except ValueError:
        raise ProcParseError(path, f"{what} is not a number") from None
    if not math.isfinite(number) or number < 0:
        raise ProcParseError(path, f"{what} is not a finite non-negative number")
    return number


def read_int(path: str) -> int | None:
    """A sysfs attribute holding one whole number, which may be negative (a link speed of -1 is "unknown");
    None when the attribute is absent or refuses reads."""
    text = read_text(path)
    if text is None:
        return None
    word = text.strip()
    if not _is_count(word.removeprefix("-")):
        raise ProcParseError(path, "not a whole number")
    return int(word)


def read_count(path: str) -> int | None:
    """A sysfs counter: a non-negative whole number; None when the attribute is absent."""
    text = read_text(path)
    return None if text is None else _count(text.strip(), path, "the value")


def read_rate(path: str) -> float | None:
    """Bytes per second from an InfiniBand port's ``rate`` ("200 Gb/sec (4X HDR)"); None when absent."""
    text = read_text(path)
    if text is None:
        return None
    fields = text.split()
    if len(fields) < 2 or fields[1] != "Gb/sec":
        raise ProcParseError(path, 'not "<number> Gb/sec"')
    return _amount(fields[0], path, "the rate") * 1e9 / 8


def list_dir(path: str) -> list[str]:
    """Sorted entries of a directory; [] when it is missing or unreadable."""
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


# ---- processes and threads --------------------------------------------------------------------------

def pids(procfs: str) -> list[int]:
    """The PIDs of the processes now (the numeric entries of procfs), unordered."""
    try:
        names = os.listdir(procfs)
    except OSError:
        return []
    return [int(name) for name in names if _is_count(name)]


def tids(procfs: str, pid: int) -> list[int]:
    """The thread IDs of a process, in order; [] when it is gone."""
    return sorted(int(name) for name in list_dir(f"{procfs}/{pid}/task") if _is_count(name))


@dataclasses.dataclass(frozen=True)
class TaskStat:
    """The parts of ``PID/stat`` or ``PID/task/TID/stat`` this exporter uses."""

    comm: str
    state: str  # R, S, D, Z (zombie), X (dead), ...
    ppid: int
    flags: int  # PF_* bits: PF_KTHREAD marks a kernel thread
    utime: int  # clock ticks (USER_HZ)
    stime: int
    starttime: int  # clock ticks after boot; with the PID, tells a process from a later one given its PID


PF_KTHREAD = 0x00200000
# Where ppid, flags, utime, stime and starttime sit among the fields after "(comm)", and their names.
_STAT_NUMBERS = (1, 6, 11, 12, 19)
_STAT_NAMES = ("ppid (field 4)", "flags (field 9)", "utime (field 14)", "stime (field 15)", "starttime (field 22)")


def parse_stat(text: str, path: str) -> TaskStat:
    """A stat line. The name sits in parentheses and may itself hold spaces, parentheses and newlines
    (prctl(PR_SET_NAME) takes any bytes), so the fields start after the *last* ')'."""
    open_paren, close_paren = text.find("("), text.rfind(")")
    if open_paren < 0 or close_paren < open_paren:
        raise ProcParseError(path, "no (name) field")
    fields = text[close_paren + 2:].split()
    if len(fields) < 20:
        raise ProcParseError(path, f"{len(fields) + 2} fields, expected at least 22")
    ppid, flags, utime, stime, starttime = _counts([fields[index] for index in _STAT_NUMBERS], path, "stat",
                                                   _STAT_NAMES)
    return TaskStat(text[open_paren + 1:close_paren], fields[0], ppid, flags, utime, stime, starttime)


def _task_dir(procfs: str, pid: int, tid: int | None) -> str:
    return f"{procfs}/{pid}" if tid is None else f"{procfs}/{pid}/task/{tid}"


def _task_text(path: str) -> str | None:
    """A file of one process or thread. Empty reads as gone, like missing: processes exit between listing
    and reading, and a file with nothing in it vouches for nothing either way."""
    text = read_text(path)
    if not text:
        return None
    if text[-1] != "\n":
        raise ProcParseError(path, "cut short (the last line has no newline)")
    return text


def read_stat(procfs: str, pid: int, tid: int | None = None) -> TaskStat | None:
    """``PID/stat``, or ``PID/task/TID/stat`` for one thread; None when the process or thread is gone."""
    path = f"{procfs}/{pid}/stat" if tid is None else f"{procfs}/{pid}/task/{tid}/stat"
    text = _task_text(path)
    return None if text is None else parse_stat(text, path)


@dataclasses.dataclass(frozen=True)
class TaskStatus:
    """The parts of ``PID/task/TID/status`` this exporter uses."""

    rss_bytes: int | None  # VmRSS: the whole process's; absent for kernel threads and zombies
    voluntary_switches: int
    involuntary_switches: int


def _lines_of(text: str, keys: Iterable[str], separator: str) -> dict[str, list[str]]:
    """The words after ``key<separator>`` on each key's line, for the keys that are present. Looked up
    directly: status has ~60 lines, vmstat ~200, and we want a handful (parsing every line costs more than
    reading the file)."""
    text = "\n" + text
    words: dict[str, list[str]] = {}
    for key in keys:
        at = text.find(f"\n{key}{separator}")
        if at >= 0:
            start = at + len(key) + 2
            words[key] = text[start:text.find("\n", start)].split()
    return words


def _fields(text: str, path: str, keys: tuple[str, ...]) -> dict[str, int]:
    """``Key: value`` counts, in the file's unit; a key that is absent is left out."""
    return {key: _count(words[0] if words else "", path, key)
            for key, words in _lines_of(text, keys, ":").items()}


def read_status(procfs: str, pid: int, tid: int | None = None) -> TaskStatus | None:
    """Resident memory and context switches of a process (or one of its threads); None when it is gone."""
    path = f"{_task_dir(procfs, pid, tid)}/status"
    text = _task_text(path)
    if text is None:
        return None
    fields = _fields(text, path, ("VmRSS", "voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"))
    rss_kb = fields.get("VmRSS")
    return TaskStatus(
        rss_bytes=None if rss_kb is None else rss_kb * 1024,
        voluntary_switches=fields.get("voluntary_ctxt_switches", 0),
        involuntary_switches=fields.get("nonvoluntary_ctxt_switches", 0),
    )


def parse_id_list(text: str, path: str, what: str) -> frozenset[int]:
    """A kernel id list such as ``0-31,64-95`` (cpuset(7)'s "list format"), as a set of ids."""
    ids: set[int] = set()
    for part in text.strip().split(","):
        first, _, last = part.partition("-")
        if not _is_count(first) or (last and not _is_count(last)) or (last and int(last) < int(first)):
            raise ProcParseError(path, f"{what}: expected a list such as 0-31,64-95")
        ids.update(range(int(first), int(last or first) + 1))
    return frozenset(ids)


@dataclasses.dataclass(frozen=True)
class Allowed:
    """Where a process may run: ``Cpus_allowed_list`` and ``Mems_allowed_list`` of ``PID/status``."""

    cpus: frozenset[int]
    memory_nodes: frozenset[int]


def read_allowed(procfs: str, pid: int) -> Allowed | None:
    """The CPUs and memory (NUMA) nodes a process may use (taskset, numactl, a cpuset cgroup set them);
    None when it is gone or the kernel shows neither list."""
    path = f"{_task_dir(procfs, pid, None)}/status"
    text = _task_text(path)
    if text is None:
        return None
    lines = _lines_of(text, ("Cpus_allowed_list", "Mems_allowed_list"), ":")
    if "Cpus_allowed_list" not in lines or "Mems_allowed_list" not in lines:
        return None
    return Allowed(*(parse_id_list("".join(lines[key]), path, key)
                     for key in ("Cpus_allowed_list", "Mems_allowed_list")))


def read_io(procfs: str, pid: int) -> tuple[int, int] | None:
    """(read_bytes, write_bytes) of ``PID/io``: bytes the process caused to be read from and written to
    storage. None when it is gone, another user's (EACCES without CAP_SYS_PTRACE), or the kernel lacks
    task IO accounting."""
    path = f"{procfs}/{pid}/io"
    text = _task_text(path)
    if text is None:
        return None
    fields = _fields(text, path, ("read_bytes", "write_bytes"))
    if "read_bytes" not in fields or "write_bytes" not in fields:
        raise ProcParseError(path, "read_bytes or write_bytes missing")
    return fields["read_bytes"], fields["write_bytes"]


def read_argv(procfs: str, pid: int) -> list[str]:
    """The command line; [] for kernel threads, zombies and processes that are gone."""
    text = read_text(f"{procfs}/{pid}/cmdline")
    if not text:
        return []
    argv = text.rstrip("\0").split("\0")
    # setproctitle-style titles put everything in argv[0] with spaces.
    if len(argv) == 1 and " " in argv[0]:
        argv = argv[0].split()
    return argv


def read_environ_value(procfs: str, pid: int, key: str) -> str | None:
    """One variable from ``PID/environ``; None when unreadable (another user's process) or unset."""
    text = read_text(f"{procfs}/{pid}/environ")
    if not text:
        return None
    prefix = key + "="
    for entry in text.split("\0"):
        if entry.startswith(prefix):
            return entry[len(prefix):]
    return None


def read_comm(procfs: str, pid: int) -> str | None:
    """The kernel's name of a process (``PID/comm``, at most 15 bytes); None when it is gone."""
    text = read_text(f"{procfs}/{pid}/comm")
    return None if text is None else text.removesuffix("\n")


def read_cgroup(procfs: str, pid: int) -> str | None:
    """A process's control groups (``PID/cgroup``: ``hierarchy:controllers:path`` lines); None when gone."""
    return read_text(f"{procfs}/{pid}/cgroup")


def read_children(procfs: str, pid: int) -> list[int]:
    """Children of a process's main thread (``PID/task/PID/children``; needs CONFIG_PROC_CHILDREN, which
    every distribution kernel has). [] when unavailable."""
    path = f"{procfs}/{pid}/task/{pid}/children"
    text = read_text(path)
    # Each PID is followed by a space, and there is no final newline.
    return [] if text is None else [_count(word, path, "a child PID") for word in text.split()]


def holds_open(procfs: str, pid: int, targets: Iterable[str], max_fds: int) -> bool:
    """True when one of the process's first ``max_fds`` open files is one of ``targets`` (fd link targets,
    such as a device path). False when the fd directory is unreadable (another user's process)."""
    wanted = frozenset(targets)
    try:
        with os.scandir(f"{procfs}/{pid}/fd") as entries:
            for checked, entry in enumerate(entries):
                if checked >= max_fds:
                    return False
                try:
                    target = os.readlink(entry.path)
                except OSError:
                    continue  # closed since listed
                if target in wanted:
                    return True
    except OSError:
        pass
    return False


def shows_own_pid_namespace(procfs: str) -> bool:
    """Whether procfs shows this process's PID namespace (its ``self`` link names our PID): only then are
    the PIDs the kernel reports to us (SO_PASSCRED, getpid) the PIDs under procfs."""
    try:
        return os.readlink(f"{procfs}/self") == str(os.getpid())
    except OSError:
        return False


# ---- the whole system -------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class CpuStat:
    """What /proc/stat says about the CPUs."""

    ticks: dict[str, list[int]]  # online CPU number -> ticks per CPU_MODES column it has (4 to 8)
    counters: dict[str, int]  # ctxt, procs_running, procs_blocked, where present
    # The kernel's own sum over every CPU (the ``cpu`` line), where the file has it: it counts the time of
    # CPUs taken offline too, so unlike a sum of the cpuN lines it does not drop when one goes away.
    total: list[int] | None = None


def read_cpu_stat(procfs: str) -> CpuStat | None:
    """/proc/stat; raises when it has no cpuN line (every online CPU has one, so none means a broken file)."""
    path = f"{procfs}/stat"
    text = _kernel_text(path)
    if text is None:
        return None
    ticks: dict[str, list[int]] = {}
    counters: dict[str, int] = {}
    total: list[int] | None = None
    for line in text.splitlines():
        fields = line.split()
        if not fields:
            continue
        key = fields[0]
        if key.startswith("cpu") and (key == "cpu" or _is_count(key[3:])):
            columns = fields[1:1 + len(CPU_MODES)]
            if len(columns) < _CPU_MIN_COLUMNS:
                raise ProcParseError(path, f"{key} has {len(columns)} columns, expected at least "
                                           f"{_CPU_MIN_COLUMNS}")
            if key == "cpu":
                total = _counts(columns, path, key)
            else:
                ticks[key[3:]] = _counts(columns, path, key)
        elif key in ("ctxt", "procs_running", "procs_blocked"):
            counters[key] = _count(fields[1] if len(fields) > 1 else "", path, key)
    if not ticks:
        raise ProcParseError(path, "no cpuN line")
    return CpuStat(ticks, counters, total)


def read_loadavg(procfs: str) -> tuple[float, float, float] | None:
    """The 1-, 5- and 15-minute load averages."""
    path = f"{procfs}/loadavg"
    text = _kernel_text(path)
    if text is None:
        return None
    fields = text.split()
    if len(fields) < 3:
        raise ProcParseError(path, f"{len(fields)} fields, expected at least 3")
    one, five, fifteen = (_amount(fields[i], path, f"field {i + 1}") for i in range(3))
    return one, five, fifteen


@dataclasses.dataclass(frozen=True)
class Schedstat:
    version: int | None  # None when the first line is not "version N"
    run_delay_ns: dict[str, int] | None  # cpu number -> ns runnable but waiting; None for an unknown version


def read_schedstat(procfs: str) -> Schedstat | None:
    """/proc/schedstat; None without CONFIG_SCHEDSTATS (and CONFIG_SCHED_INFO)."""
    path = f"{procfs}/schedstat"
    text = _kernel_text(path)
    if text is None:
        return None
    lines = text.splitlines()
    head = lines[0].split()
    if len(head) != 2 or head[0] != "version" or not _is_count(head[1]):
        return Schedstat(None, None)
    version = int(head[1])
    if version not in SCHEDSTAT_VERSIONS:
        return Schedstat(version, None)
    waits: dict[str, int] = {}
    for line in lines[1:]:
        fields = line.split()
        if not fields or not (fields[0].startswith("cpu") and _is_count(fields[0][3:])):
            continue
        if len(fields) <= _RUN_DELAY_FIELD:
            raise ProcParseError(path, f"{fields[0]} has {len(fields) - 1} fields, expected at least "
                                       f"{_RUN_DELAY_FIELD}")
        waits[fields[0][3:]] = _count(fields[_RUN_DELAY_FIELD], path, f"{fields[0]} run_delay")
    return Schedstat(version, waits)


def read_uptime(procfs: str) -> float | None:
    """Seconds since boot (``uptime``): the clock thread start times are measured on."""
    path = f"{procfs}/uptime"
    text = _kernel_text(path)
    if text is None:
        return None
    fields = text.split()
    return _amount(fields[0] if fields else "", path, "uptime")


def read_meminfo(procfs: str, keys: Iterable[str]) -> dict[str, int] | None:
    """{key: bytes} of /proc/meminfo for those of ``keys`` it has (all of them "kB" lines). Raises when one
    of the lines every kernel prints is missing, MemTotal is 0, or free or available memory is above its total."""
    path = f"{procfs}/meminfo"
    text = _kernel_text(path)
    if text is None:
        return None
    values: dict[str, int] = {}
    for key, words in _lines_of(text, {*keys, *_MEMINFO_ALWAYS}, ":").items():
        if words[1:] != ["kB"]:
            raise ProcParseError(path, f'{key} is not "<number> kB"')
        values[key] = _count(words[0], path, key) * 1024
    missing = [key for key in _MEMINFO_ALWAYS if key not in values]
    if missing:
        raise ProcParseError(path, f"{', '.join(missing)} missing")
    if values["MemTotal"] == 0:
        raise ProcParseError(path, "MemTotal is 0")
    # What is free or available cannot exceed what there is: a file saying so is not the kernel's.
    for part, whole in (("MemFree", "MemTotal"), ("MemAvailable", "MemTotal"), ("SwapFree", "SwapTotal")):
        if part in values and values[part] > values[whole]:
            raise ProcParseError(path, f"{part} is above {whole}")
    return values


def read_vmstat(procfs: str, keys: Iterable[str]) -> dict[str, int] | None:
    """{key: count} of /proc/vmstat for those of ``keys`` it has."""
    path = f"{procfs}/vmstat"
    text = _kernel_text(path)
    if text is None:
        return None
    return {key: _count(words[0] if len(words) == 1 else "", path, key)
            for key, words in _lines_of(text, keys, " ").items()}


def read_pressure(procfs: str, resource: str) -> dict[str, int] | None:
    """{"some" / "full": total stall in microseconds} from ``pressure/<resource>``; None without PSI (before
    4.20, CONFIG_PSI off, or booted with psi=0: no file, or a file that refuses reads). ``full`` is absent
    for cpu before 5.13."""
    path = f"{procfs}/pressure/{resource}"
    text = _kernel_text(path)
    if text is None:
        return None
    totals: dict[str, int] = {}
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        if kind not in ("some", "full"):
            continue
        total = [value for key, _, value in (field.partition("=") for field in rest.split()) if key == "total"]
        totals[kind] = _count(total[0] if total else "", path, f"{kind} total")
    if "some" not in totals:
        raise ProcParseError(path, 'no "some" line')
    return totals


def read_diskstats(procfs: str) -> dict[str, list[int]] | None:
    """{device name: its numeric columns after "major minor name"}. Empty on a machine without block
    devices, which is no error."""
    path = f"{procfs}/diskstats"
    text = _kernel_text(path, may_be_empty=True)
    if text is None:
        return None
    devices: dict[str, list[int]] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        fields = line.split()
        if len(fields) < 3 + DISKSTATS_MIN_COLUMNS:
            raise ProcParseError(path, f"line {number} has {len(fields)} fields, expected at least "
                                       f"{3 + DISKSTATS_MIN_COLUMNS}")
        devices[fields[2]] = _counts(fields[3:], path, f"line {number} after the name,")
    return devices


def read_net_dev(procfs: str) -> dict[str, list[int]] | None:
    """{interface: its 16 counters} from ``net/dev`` (two header lines, then one line per interface)."""
    path = f"{procfs}/net/dev"
    text = _kernel_text(path)
    if text is None:
        return None
    lines = text.splitlines()
    if len(lines) < 2 or "|" not in lines[0] or "|" not in lines[1]:
        raise ProcParseError(path, "the two header lines are missing")
    interfaces: dict[str, list[int]] = {}
    for number, line in enumerate(lines[2:], start=3):
        # No space follows the colon once the byte count is wide: "eth0:123456789012 ...".
        name, colon, rest = line.partition(":")
        fields = rest.split()
        if not colon or len(fields) < NET_DEV_COLUMNS:
            raise ProcParseError(path, f'line {number} is not "name: {NET_DEV_COLUMNS} numbers"')
        interfaces[name.strip()] = _counts(fields[:NET_DEV_COLUMNS], path, f"line {number} after the name,")
    return interfaces


# ---- cgroup CPU controller ------------------------------------------------------------------------------
# The CFS bandwidth files of one cgroup directory (Documentation/scheduler/sched-bwc.rst): v1 ``cpu.stat``
# (nr_periods, nr_throttled, throttled_time in ns), ``cpu.cfs_quota_us`` (-1: no limit) and
# ``cpu.cfs_period_us``; v2 ``cpu.stat`` (the same counts, throttled_usec in µs) and ``cpu.max``
# ("$MAX $PERIOD", "max" for no limit). The quota is an amount of CPU time per period: quota / period cores.

@dataclasses.dataclass(frozen=True)
class CfsBandwidth:
    """What one cgroup's CFS bandwidth control counted: periods with runnable tasks, periods in which the
    quota ran out, and the time its tasks were held off the CPU for it (summed over the CPUs)."""

    periods: int
    throttled_periods: int
    throttled_seconds: float


# cpu.stat keys per cgroup version: (periods, throttled periods, throttled time), and the time's units per second.
_CPU_STAT_KEYS = {1: ("nr_periods", "nr_throttled", "throttled_time"), 2: ("nr_periods", "nr_throttled",
                                                                           "throttled_usec")}
_THROTTLED_PER_SECOND = {1: 1e9, 2: 1e6}


def read_cfs_bandwidth(directory: str, version: int) -> CfsBandwidth | None:
    """``cpu.stat`` of a cgroup directory; None when it is missing or refuses reads. A v2 ``cpu.stat``
    without ``nr_periods`` belongs to a cgroup whose cpu controller is off: it reads as zero periods."""
    path = f"{directory}/cpu.stat"
    text = _kernel_text(path)
    if text is None:
        return None
    keys = _CPU_STAT_KEYS[version]
    fields = _lines_of(text, keys, " ")
    if version == 2 and not fields:
        return CfsBandwidth(0, 0, 0.0)
    for key in keys:
        if key not in fields:
            raise ProcParseError(path, f"no {key} line")
    periods, throttled, held = (_count(fields[key][0] if len(fields[key]) == 1 else "", path, key) for key in keys)
    return CfsBandwidth(periods, throttled, held / _THROTTLED_PER_SECOND[version])


def read_cfs_quota(directory: str, version: int) -> tuple[float | None, bool]:
    """(the cgroup's CPU limit in cores or None for no limit, whether its files were there). A v2 cgroup
    without ``cpu.max`` (the root, or the cpu controller off) has no limit of its own."""
    if version == 1:
        quota_path, period_path = f"{directory}/cpu.cfs_quota_us", f"{directory}/cpu.cfs_period_us"
        quota_text, period_text = _kernel_text(quota_path), _kernel_text(period_path)
        if quota_text is None or period_text is None:
            return None, False
        quota_word = quota_text.strip()
        if quota_word == "-1":
            return None, True
        quota = _count(quota_word, quota_path, "the quota")
        period = _count(period_text.strip(), period_path, "the period")
    else:
        path = f"{directory}/cpu.max"
        text = _kernel_text(path)
        if text is None:
            return None, False
        words = text.split()
        if len(words) != 2:
            raise ProcParseError(path, 'not "$MAX $PERIOD"')
        if words[0] == "max":
            _count(words[1], path, "the period")
            return None, True
        quota, period = _count(words[0], path, "the quota"), _count(words[1], path, "the period")
    if period == 0:
        raise ProcParseError(period_path if version == 1 else path, "the period is 0")
    return quota / period, True
