"""Broken /proc and /sys files: a collector that cannot parse its input fails (success 0) and exports none of
its series; no NaN, no infinity, no negative counter, ever; one log line per change of a collector's state.

Each case copies the host (or training) fixture tree into tmp_path and breaks one file the way a careless
mount, a FUSE filesystem or a half-written fixture would: a non-number, a negative number, a line or file cut
short, an empty file. Then the reader itself: the quirks of stat lines and of files that vanish.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from bottleneck_exporter import procfs
from bottleneck_exporter.cli import build_collectors, build_parser
from bottleneck_exporter.collectors.orchestrator import Orchestrator
from bottleneck_exporter.hook.session import data_worker_children
from bottleneck_exporter.training.registry import TrainingRegistry
from tests.conftest import FIXTURES, PACKAGE, ROOT

HOST = FIXTURES / "host"
TRAINING = FIXTURES / "training"
SELF_SERIES = ("bottleneck_scrape_collector_success", "bottleneck_scrape_collector_duration_seconds",
               "bottleneck_build_info")


def orchestrated(procfs_path: Path, sysfs_path: Path, *collectors: str) -> Orchestrator:
    args = build_parser().parse_args([
        f"--path.procfs={procfs_path}", f"--path.sysfs={sysfs_path}", "--collector.disable-defaults",
        *(f"--collector.{name}" for name in collectors),
    ])
    return Orchestrator(build_collectors(args, {}, TrainingRegistry()))


def scrape(orchestrator: Orchestrator) -> list[tuple[str, str, dict[str, str], float]]:
    """(family type, sample name, labels, value) of one scrape, as a client reads the exposition."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(orchestrator)
    text = generate_latest(registry).decode()
    return [(family.type, sample.name, sample.labels, sample.value)
            for family in text_string_to_metric_families(text) for sample in family.samples]


def success(samples: list[tuple[str, str, dict[str, str], float]], collector: str) -> float:
    return next(value for _, name, labels, value in samples
                if name == "bottleneck_scrape_collector_success" and labels["collector"] == collector)


def host_copy(tmp_path: Path) -> tuple[Path, Path]:
    shutil.copytree(HOST, tmp_path / "host")
    return tmp_path / "host" / "proc", tmp_path / "host" / "sys"


# (file under the host tree, what it is replaced with, the collector that reads it). The id names the
# failure the case guards against, as the landed exporter showed it.
BROKEN_HOST_FILES = [
    pytest.param("proc/stat", "", "cpu", id="empty-stat-exported-bottleneck_cpus-0"),
    pytest.param("proc/stat", "cpu  1 2 3 4\n", "cpu", id="stat-without-cpuN-lines-exported-bottleneck_cpus-0"),
    pytest.param("proc/stat", "cpu0 100 0 50 -4000 0 0 0 0\n", "cpu", id="negative-cpu-ticks-exported"),
    pytest.param("proc/stat", "cpu0 100 0 50 4000 0 0 0 0\ncpu1 100 0 5", "cpu",
                 id="stat-cut-mid-line-dropped-a-cpu"),
    pytest.param("proc/loadavg", "nan nan nan 1/100 5\n", "cpu", id="nan-load-average-exported"),
    pytest.param("proc/loadavg", "inf 1.0 1.0 1/100 5\n", "cpu", id="infinite-load-average-exported"),
    pytest.param("proc/loadavg", "0.5 0.4\n", "cpu", id="truncated-loadavg-exported-nothing-at-success-1"),
    pytest.param("proc/schedstat", "version 15\ntimestamp 1\ncpu0 0 0 1 1 1 1 1 -5 1\n", "cpu",
                 id="negative-run-delay-exported"),
    pytest.param("proc/meminfo", "", "memory", id="empty-meminfo-was-success-1"),
    pytest.param("proc/meminfo", "MemTotal:       abc kB\nMemFree: 1 kB\n", "memory",
                 id="non-number-meminfo-was-success-1"),
    pytest.param("proc/meminfo", "MemTotal:       -5 kB\nMemFree: 1 kB\nBuffers: 1 kB\nCached: 1 kB\n"
                 "SwapTotal: 0 kB\nSwapFree: 0 kB\n", "memory", id="negative-memory-total-exported"),
    pytest.param("proc/meminfo", "MemTotal:       263852920 kB\nMemFree:  8123", "memory",
                 id="meminfo-cut-mid-line-was-success-1"),
    pytest.param("proc/meminfo", "MemTotal:       263852920 kB\n", "memory",
                 id="meminfo-cut-after-a-line-was-success-1"),
    pytest.param("proc/meminfo", "MemTotal: 1000 kB\nMemFree: 10 kB\nMemAvailable: 2000 kB\nBuffers: 1 kB\n"
                 "Cached: 1 kB\nSwapTotal: 0 kB\nSwapFree: 0 kB\n", "memory",
                 id="memory-available-above-total-exported"),
    pytest.param("proc/meminfo", "MemTotal: 1000 kB\nMemFree: 1001 kB\nMemAvailable: 20 kB\nBuffers: 1 kB\n"
                 "Cached: 1 kB\nSwapTotal: 0 kB\nSwapFree: 0 kB\n", "memory", id="memory-free-above-total-exported"),
    pytest.param("proc/meminfo", "MemTotal: 1000 kB\nMemFree: 10 kB\nMemAvailable: 20 kB\nBuffers: 1 kB\n"
                 "Cached: 1 kB\nSwapTotal: 10 kB\nSwapFree: 11 kB\n", "memory", id="swap-free-above-total-exported"),
    pytest.param("proc/vmstat", "pswpin 1\npswpout 2\npgmajfault -3\n", "memory",
                 id="negative-major-faults-counter-exported"),
    pytest.param("proc/vmstat", "", "memory", id="empty-vmstat-was-success-1"),
    pytest.param("proc/pressure/io", "", "pressure", id="empty-pressure-file-was-success-1"),
    pytest.param("proc/pressure/io", "some avg10=0.00 avg60=0.00 avg300=0.00 total=many\n", "pressure",
                 id="non-number-pressure-total-was-success-1"),
    pytest.param("proc/pressure/memory", "some avg10=0.00 avg60=0.00 avg300=0.00 total=-7\n", "pressure",
                 id="negative-pressure-total-was-success-1"),
    pytest.param("proc/pressure/cpu", "some avg10=0.00 avg60=0.00 avg300=0.00 total=123", "pressure",
                 id="pressure-file-cut-short-was-success-1"),
    pytest.param("proc/diskstats", "   8       0 sda 1 0 abc 1 1 0 8 1 0 1 1 0 0 0 0\n", "disk",
                 id="non-number-in-diskstats"),
    pytest.param("proc/diskstats", "   8       0 sda 1 0 8 1 1 0\n", "disk", id="truncated-diskstats-line-skipped"),
    pytest.param("proc/net/dev", "", "network", id="empty-net-dev-was-success-1"),
    pytest.param("proc/net/dev", "Inter-| Receive | Transmit\n face |bytes|bytes\n"
                 "  eth0: -1 2 0 0 0 0 0 0 5 6 0 0 0 0 0 0\n", "network", id="negative-network-counter-exported"),
    pytest.param("proc/net/dev", "Inter-| Receive | Transmit\n face |bytes|bytes\n  eth0: 1 2 0 0\n",
                 "network", id="truncated-net-dev-line-skipped"),
    pytest.param("sys/class/infiniband/mlx5_0/ports/1/counters/port_rcv_data", "-1\n", "network",
                 id="negative-infiniband-counter-exported"),
    pytest.param("sys/class/infiniband/mlx5_0/ports/1/rate", "nan Gb/sec (4X HDR)\n", "network",
                 id="nan-infiniband-rate-exported"),
    pytest.param("sys/class/net/eth0/speed", "fast\n", "network", id="non-number-link-speed-was-success-1"),
]


@pytest.mark.parametrize(("relative", "content", "collector"), BROKEN_HOST_FILES)
def test_a_file_that_does_not_parse_fails_its_collector_and_exports_none_of_its_series(
    tmp_path: Path, relative: str, content: str, collector: str
) -> None:
    proc, sys_ = host_copy(tmp_path)
    (tmp_path / "host" / relative).write_text(content)
    samples = scrape(orchestrated(proc, sys_, collector))
    assert success(samples, collector) == 0
    assert [name for _, name, _, _ in samples if not name.startswith(SELF_SERIES)] == []


@pytest.mark.parametrize(("relative", "content", "collector"), BROKEN_HOST_FILES)
def test_a_broken_file_leaves_the_other_collectors_whole(
    tmp_path: Path, relative: str, content: str, collector: str
) -> None:
    proc, sys_ = host_copy(tmp_path)
    healthy = scrape(orchestrated(proc, sys_, "cpu", "memory", "pressure", "disk", "network"))
    (tmp_path / "host" / relative).write_text(content)
    broken = scrape(orchestrated(proc, sys_, "cpu", "memory", "pressure", "disk", "network"))
    others = {"cpu", "memory", "pressure", "disk", "network"} - {collector}
    assert {name: success(broken, name) for name in others} == dict.fromkeys(others, 1.0)
    # What is still served is what a healthy scrape serves: nothing half-parsed slips in.
    served = {(name, tuple(sorted(labels.items()))): value for _, name, labels, value in healthy
              if not name.startswith(SELF_SERIES)}
    for _, name, labels, value in broken:
        if not name.startswith(SELF_SERIES):
            assert served.get((name, tuple(sorted(labels.items())))) == value, (name, labels, value)


def test_no_nan_infinity_or_negative_value_in_any_broken_scrape(tmp_path: Path) -> None:
    """All the broken files at once, every host collector on: whatever is served is a finite, non-negative
    number (the host collectors export no signed quantity)."""
    proc, sys_ = host_copy(tmp_path)
    for param in BROKEN_HOST_FILES:
        relative, content, _ = param.values
        (tmp_path / "host" / str(relative)).write_text(str(content))
    samples = scrape(orchestrated(proc, sys_, "cpu", "memory", "pressure", "disk", "network"))
    for kind, name, labels, value in samples:
        assert math.isfinite(value) and value >= 0, (kind, name, labels, value)


def test_a_machine_without_block_devices_is_not_a_failure(tmp_path: Path) -> None:
    proc, sys_ = host_copy(tmp_path)
    (proc / "diskstats").write_text("")
    samples = scrape(orchestrated(proc, sys_, "disk"))
    assert success(samples, "disk") == 1
    assert not [name for _, name, _, _ in samples if name.startswith("bottleneck_disk_")]


def test_a_failing_collector_logs_once_per_change_of_state_not_per_scrape(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    proc, sys_ = host_copy(tmp_path)
    meminfo = proc / "meminfo"
    good = meminfo.read_text()
    orchestrator = orchestrated(proc, sys_, "memory")
    caplog.set_level(logging.INFO, logger=PACKAGE)

    def lines_after_scrapes(scrapes: int) -> list[str]:
        caplog.clear()
        for _ in range(scrapes):
            scrape(orchestrator)
        return [record.getMessage() for record in caplog.records]

    assert lines_after_scrapes(3) == []
    meminfo.write_text("MemTotal: secret-token kB\n")
    failed = lines_after_scrapes(3)
    assert len(failed) == 1 and "memory" in failed[0] and str(meminfo) in failed[0] and "MemTotal" in failed[0]
    assert "\n" not in failed[0]
    assert "secret-token" not in failed[0]  # names the file and the key, never echoes its contents
    meminfo.write_text(good)
    recovered = lines_after_scrapes(3)
    assert len(recovered) == 1 and "memory" in recovered[0] and "recovered" in recovered[0]
    meminfo.write_text("")
    assert len(lines_after_scrapes(3)) == 1


# ---- the training collector's per-process files ----

def training_copy(tmp_path: Path) -> Path:
    proc = tmp_path / "proc"
    shutil.copytree(TRAINING / "proc-t0", proc, symlinks=True)
    return proc


def _replace_field(path: Path, index: int, value: str) -> None:
    """Field ``index`` (0-based, counted after the ``(comm)``) of a stat line."""
    text = path.read_text()
    head, tail = text.rsplit(") ", 1)
    fields = tail.split()
    fields[index] = value
    path.write_text(f"{head}) {' '.join(fields)}\n")


@pytest.mark.parametrize("breakage", [
    pytest.param(lambda proc: _replace_field(proc / "4242" / "task" / "4242" / "stat", 11, "12x"),
                 id="non-number-thread-utime-dropped-the-thread-at-success-1"),
    pytest.param(lambda proc: _replace_field(proc / "4242" / "task" / "4242" / "stat", 11, "-12"),
                 id="negative-thread-utime-dropped-the-thread-at-success-1"),
    pytest.param(lambda proc: (proc / "4242" / "task" / "4242" / "stat").write_text("4242 (python3) S 1 2 3\n"),
                 id="truncated-thread-stat-dropped-the-thread-at-success-1"),
    pytest.param(lambda proc: (proc / "4242" / "io").write_text("rchar: 1\nread_bytes: -5\nwrite_bytes: 0\n"),
                 id="negative-io-bytes-dropped-the-io-series-at-success-1"),
    pytest.param(lambda proc: (proc / "uptime").write_text("nan 1.0\n"), id="nan-uptime-was-read-as-a-clock"),
])
def test_a_process_file_that_does_not_parse_fails_the_training_collector(
    tmp_path: Path, breakage: Callable[[Path], object]
) -> None:
    proc = training_copy(tmp_path)
    healthy = scrape(orchestrated(proc, tmp_path / "no-sys", "training"))
    assert success(healthy, "training") == 1
    breakage(proc)
    samples = scrape(orchestrated(proc, tmp_path / "no-sys", "training"))
    assert success(samples, "training") == 0
    assert [n for _, n, _, _ in samples if not n.startswith(SELF_SERIES)] == []


# ---- the reader's quirks ----

def test_a_stat_line_whose_name_holds_spaces_and_parentheses_is_read_from_the_last_parenthesis() -> None:
    text = "77 (a) b (c)) R 1 77 77 0 -1 4194560 9 0 0 0 120 30 0 0 20 0 3 0 4242 1 1 18446744073709551615\n"
    stat = procfs.parse_stat(text, "/proc/77/stat")
    assert (stat.comm, stat.state, stat.ppid, stat.utime, stat.stime, stat.starttime) == (
        "a) b (c)", "R", 1, 120, 30, 4242)


def test_a_process_gone_before_its_files_are_read_is_no_data_not_an_error(tmp_path: Path) -> None:
    (tmp_path / "55").mkdir()
    (tmp_path / "55" / "stat").write_text("")  # an empty read counts as gone
    assert procfs.read_stat(str(tmp_path), 55) is None
    assert procfs.read_stat(str(tmp_path), 56) is None
    assert procfs.read_status(str(tmp_path), 56) is None
    assert procfs.read_io(str(tmp_path), 56) is None
    assert procfs.read_argv(str(tmp_path), 56) == []
    assert procfs.read_children(str(tmp_path), 56) == []


def test_a_file_that_refuses_reads_is_no_data(tmp_path: Path) -> None:
    (tmp_path / "meminfo").mkdir()  # EISDIR on read, as EACCES or EOPNOTSUPP would be (root reads anything)
    assert procfs.read_meminfo(str(tmp_path), ["MemTotal"]) is None


def test_a_parse_error_names_the_file_and_the_field_never_the_contents(tmp_path: Path) -> None:
    (tmp_path / "vmstat").write_text("pgmajfault hunter2\n")
    with pytest.raises(procfs.ProcParseError) as raised:
        procfs.read_vmstat(str(tmp_path), ["pgmajfault"])
    assert str(raised.value) == f"{tmp_path}/vmstat: pgmajfault is not a non-negative whole number"


def test_the_hook_finds_its_workers_by_the_name_torch_gives_them(tmp_path: Path) -> None:
    pid = os.getpid()
    (tmp_path / str(pid) / "task" / str(pid)).mkdir(parents=True)
    (tmp_path / str(pid) / "task" / str(pid) / "children").write_text("101 102 103 ")
    for child, comm in ((101, procfs.WORKER_COMM), (102, "python3"), (103, procfs.WORKER_COMM)):
        (tmp_path / str(child)).mkdir()
        (tmp_path / str(child) / "comm").write_text(comm + "\n")
    assert data_worker_children(str(tmp_path)) == [101, 103]
    (tmp_path / str(pid) / "task" / str(pid) / "children").write_text("101 garbage ")
    assert data_worker_children(str(tmp_path)) == []  # the hook never raises into training


def test_the_hook_and_the_proc_reader_import_nothing_outside_the_standard_library() -> None:
    """The hook loads inside the trainer and reads /proc through bottleneck_exporter.procfs: importing either must not
    pull a daemon dependency (prometheus_client, yaml, psutil, bcrypt, nvml) or torch."""
    probe = ("import sys; before = set(sys.modules); import bottleneck_exporter.procfs, bottleneck_exporter.hook; "
             "loaded = {m.split('.')[0] for m in set(sys.modules) - before}; "
             "print(' '.join(sorted(loaded - set(sys.stdlib_module_names))))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [PACKAGE]


def test_a_collector_bug_logs_its_traceback_once_not_per_scrape(caplog: pytest.LogCaptureFixture) -> None:
    class Broken:
        def collect(self) -> list[object]:
            raise KeyError("no such field")

    orchestrator = Orchestrator({"broken": Broken()})  # type: ignore[dict-item]
    caplog.set_level(logging.INFO, logger=PACKAGE)
    for _ in range(3):
        assert success(scrape(orchestrator), "broken") == 0
    assert len(caplog.records) == 1
    assert "broken" in caplog.records[0].getMessage() and "KeyError" in caplog.records[0].getMessage()
    assert caplog.records[0].exc_info is not None


@pytest.mark.parametrize(("text", "ids"), [("0-3,8,10-11\n", {0, 1, 2, 3, 8, 10, 11}), ("5", {5}), ("0-0", {0})])
def test_cpu_lists_read_as_the_kernel_writes_them(text: str, ids: set[int]) -> None:
    assert procfs.parse_id_list(text, "status", "Cpus_allowed_list") == ids


@pytest.mark.parametrize("text", ["", "3-1", "a-b", "0,,2", "-1"])
def test_a_garbled_cpu_list_names_its_file_and_key(text: str) -> None:
    with pytest.raises(procfs.ProcParseError, match="status: Cpus_allowed_list: expected a list"):
        procfs.parse_id_list(text, "status", "Cpus_allowed_list")


def test_allowed_cpus_and_memory_nodes_of_a_live_process_match_the_kernels_affinity() -> None:
    allowed = procfs.read_allowed("/proc", os.getpid())
    assert allowed is not None
    assert allowed.cpus == frozenset(os.sched_getaffinity(0))
    assert 0 in allowed.memory_nodes


def test_a_process_pinned_with_taskset_reads_only_its_cpus() -> None:
    """What the placement verdict compares with the GPU's affinity, from a real process the kernel pinned."""
    cpu = min(os.sched_getaffinity(0))
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        os.sched_setaffinity(child.pid, {cpu})
        allowed = procfs.read_allowed("/proc", child.pid)
        assert allowed is not None and allowed.cpus == {cpu}
    finally:
        child.communicate(b"")
    assert procfs.read_allowed("/proc", child.pid) is None  # gone: no data, no error
