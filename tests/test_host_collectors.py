"""Host collectors (cpu, memory, pressure, disk, network): a fixture tree, options, and the real kernel.

Expected values are computed here from the fixture's raw numbers (ticks / USER_HZ, sectors x 512, ...), never
copied from the exporter's output.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from bottleneck_exporter.cli import build_collectors, build_parser
from bottleneck_exporter.collectors.orchestrator import Orchestrator
from bottleneck_exporter.training.registry import TrainingRegistry
from bottleneck_exporter.web.exposition import text_format  # the writer /metrics answers with
from tests.conftest import FIXTURES, ROOT, free_port, require_tool

HOST = FIXTURES / "host"
GOLDEN = ROOT / "tests" / "golden" / "host.prom"
GOLDEN_HEADER = "# Regenerate: .venv/bin/pytest tests/test_host_collectors.py -m golden --update-golden\n"
COLLECTORS = ("cpu", "memory", "pressure", "disk", "network")
USER_HZ = os.sysconf("SC_CLK_TCK")
Labels = dict[str, str]


def host_registry(procfs: Path | str, sysfs: Path | str, *flags: str) -> CollectorRegistry:
    """The host collectors as the command line builds them (flags really parsed), behind the Orchestrator."""
    args = build_parser().parse_args([
        f"--path.procfs={procfs}", f"--path.sysfs={sysfs}", "--collector.disable-defaults",
        *(f"--collector.{name}" for name in COLLECTORS), *flags,
    ])
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Orchestrator(build_collectors(args, {}, TrainingRegistry())))
    return registry


def snapshot(registry: CollectorRegistry) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """One scrape, every sample: {(name, labels): value}."""
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in registry.collect() for s in family.samples}


def label_values(registry: CollectorRegistry, name: str, label: str) -> set[str]:
    return {dict(labels)[label] for (sample, labels) in snapshot(registry) if sample == name}


def fixture_copy(tmp_path: Path) -> tuple[Path, Path]:
    shutil.copytree(HOST, tmp_path / "host")
    return tmp_path / "host" / "proc", tmp_path / "host" / "sys"


# ---- raw readers, independent of the exporter's parsers ----

def stat_lines(path: Path) -> dict[str, list[int]]:
    rows = (line.split() for line in path.read_text().splitlines())
    return {f[0]: [int(v) for v in f[1:]] for f in rows if f}


def meminfo_bytes(path: Path) -> dict[str, int]:
    result = {}
    for line in path.read_text().splitlines():
        key, value = line.split(":")
        number, *unit = value.split()
        result[key] = int(number) * (1024 if unit == ["kB"] else 1)
    return result


def diskstats(path: Path) -> dict[str, list[int]]:
    return {f[2]: [int(v) for v in f[3:]] for f in (line.split() for line in path.read_text().splitlines())}


def net_dev(path: Path) -> dict[str, list[int]]:
    rows = {}
    for line in path.read_text().splitlines()[2:]:
        name, rest = line.split(":", 1)
        rows[name.strip()] = [int(v) for v in rest.split()]
    return rows


def schedstat_run_delays(path: Path) -> tuple[int, dict[str, int]]:
    """(version, {cpu: run_delay ns}). cpuN: yld_count, 0, sched_count, sched_goidle, ttwu_count, ttwu_local,
    rq_cpu_time, run_delay, pcount."""
    lines = [line.split() for line in path.read_text().splitlines()]
    delays = {f[0][3:]: int(f[8]) for f in lines if re.fullmatch(r"cpu\d+", f[0])}
    return int(lines[0][1]), delays


def psi_total(path: Path, kind: str) -> int:
    line = next(line for line in path.read_text().splitlines() if line.startswith(kind + " "))
    return int(line.rsplit("total=", 1)[1])


# ---- golden scrape of the fixture tree ----

def golden_text(registry: CollectorRegistry) -> str:
    # Durations change on every run; build_info carries the Python version of whoever runs the test.
    volatile = ("bottleneck_scrape_collector_duration_seconds", "bottleneck_build_info")
    text = text_format(registry).decode()
    lines = [line for line in text.splitlines() if not any(v in line for v in volatile)]
    return GOLDEN_HEADER + "\n".join(lines) + "\n"


@pytest.mark.golden
def test_fixture_scrape_matches_the_golden_file(update_golden: bool) -> None:
    text = golden_text(host_registry(HOST / "proc", HOST / "sys"))
    if update_golden:
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(text)
    assert GOLDEN.exists(), "no golden file yet: run with --update-golden and review the diff"
    assert text == GOLDEN.read_text(), "scrape differs from tests/golden/host.prom (--update-golden rewrites)"


@pytest.mark.golden
@pytest.mark.tools
def test_golden_scrape_passes_promtool_check_metrics() -> None:
    promtool = require_tool("promtool")
    result = subprocess.run([promtool, "check", "metrics"], input=GOLDEN.read_text(), capture_output=True,
                            text=True, timeout=60)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


# ---- values read back against the fixture's raw numbers ----

def test_cpu_values_follow_the_fixture() -> None:
    registry = host_registry(HOST / "proc", HOST / "sys")
    stat = stat_lines(HOST / "proc" / "stat")
    cpus = {key[3:]: ticks for key, ticks in stat.items() if re.fullmatch(r"cpu\d+", key)}
    assert len(cpus) == 4
    modes = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
    for cpu, ticks in cpus.items():
        for mode, tick in zip(modes, ticks, strict=False):
            assert registry.get_sample_value("bottleneck_cpu_seconds_total", {"cpu": cpu, "mode": mode}) == (
                tick / USER_HZ)
    # guest time is already inside user; it must not appear as a mode of its own.
    assert registry.get_sample_value("bottleneck_cpu_seconds_total", {"cpu": "0", "mode": "guest"}) is None
    assert registry.get_sample_value("bottleneck_cpus") == len(cpus)
    assert registry.get_sample_value("bottleneck_context_switches_total") == stat["ctxt"][0]
    assert registry.get_sample_value("bottleneck_procs_running") == stat["procs_running"][0]
    assert registry.get_sample_value("bottleneck_procs_blocked") == stat["procs_blocked"][0]
    load = (HOST / "proc" / "loadavg").read_text().split()
    for name, raw in zip(("bottleneck_load1", "bottleneck_load5", "bottleneck_load15"), load, strict=False):
        assert registry.get_sample_value(name) == float(raw)
    version, delays = schedstat_run_delays(HOST / "proc" / "schedstat")
    assert version == 15 and set(delays) == set(cpus)
    for cpu, run_delay_ns in delays.items():
        assert registry.get_sample_value("bottleneck_cpu_runqueue_wait_seconds_total", {"cpu": cpu}) == (
            run_delay_ns / 1e9)
    assert registry.get_sample_value("bottleneck_cpu_all_runqueue_wait_seconds_total") == pytest.approx(
        sum(delays.values()) / 1e9)


def test_memory_values_follow_the_fixture() -> None:
    registry = host_registry(HOST / "proc", HOST / "sys")
    meminfo = meminfo_bytes(HOST / "proc" / "meminfo")
    for key, name in (("MemTotal", "total"), ("MemAvailable", "available"), ("MemFree", "free"),
                      ("Buffers", "buffers"), ("Cached", "cached"), ("SwapTotal", "swap_total"),
                      ("SwapFree", "swap_free")):
        assert registry.get_sample_value(f"bottleneck_memory_{name}_bytes") == meminfo[key], key
    vmstat = dict(line.split() for line in (HOST / "proc" / "vmstat").read_text().splitlines())
    for key, name in (("pswpin", "swapped_in_pages"), ("pswpout", "swapped_out_pages"),
                      ("pgmajfault", "major_faults"), ("oom_kill", "oom_kills")):
        assert registry.get_sample_value(f"bottleneck_memory_{name}_total") == int(vmstat[key]), key


def test_pressure_values_follow_the_fixture() -> None:
    registry = host_registry(HOST / "proc", HOST / "sys")
    for resource in ("cpu", "io", "memory"):
        for kind in ("some", "full"):
            microseconds = psi_total(HOST / "proc" / "pressure" / resource, kind)
            labels = {"resource": resource, "kind": kind}
            seconds = registry.get_sample_value("bottleneck_pressure_seconds_total", labels)
            assert seconds == microseconds / 1e6


def test_disk_values_follow_the_fixture() -> None:
    registry = host_registry(HOST / "proc", HOST / "sys")
    stats = diskstats(HOST / "proc" / "diskstats")
    # nvme0n1 has 4096-byte logical blocks: diskstats still counts 512-byte sectors.
    assert (HOST / "sys" / "block" / "nvme0n1" / "queue" / "logical_block_size").read_text().strip() == "4096"
    for device in ("nvme0n1", "sda", "dm-0"):
        raw = stats[device]
        expected = {
            "bottleneck_disk_reads_completed_total": raw[0],
            "bottleneck_disk_read_bytes_total": raw[2] * 512,
            "bottleneck_disk_read_time_seconds_total": raw[3] / 1000,
            "bottleneck_disk_writes_completed_total": raw[4],
            "bottleneck_disk_written_bytes_total": raw[6] * 512,
            "bottleneck_disk_write_time_seconds_total": raw[7] / 1000,
            "bottleneck_disk_io_now": raw[8],
            "bottleneck_disk_io_time_seconds_total": raw[9] / 1000,
            "bottleneck_disk_io_time_weighted_seconds_total": raw[10] / 1000,
        }
        for name, value in expected.items():
            assert registry.get_sample_value(name, {"device": device}) == pytest.approx(value, rel=1e-12), (
                device, name)


def test_network_values_follow_the_fixture() -> None:
    registry = host_registry(HOST / "proc", HOST / "sys")
    rows = net_dev(HOST / "proc" / "net" / "dev")
    columns = {"receive_bytes": 0, "receive_packets": 1, "receive_errors": 2, "receive_drop": 3,
               "transmit_bytes": 8, "transmit_packets": 9, "transmit_errors": 10, "transmit_drop": 11}
    for device in ("eth0", "ib0", "docker0"):
        for what, column in columns.items():
            assert registry.get_sample_value(f"bottleneck_network_{what}_total", {"device": device}) == (
                rows[device][column]), (device, what)
    net = HOST / "sys" / "class" / "net"
    for device in ("eth0", "ib0"):
        megabits = int((net / device / "speed").read_text())
        speed = registry.get_sample_value("bottleneck_network_speed_bytes", {"device": device})
        assert speed == megabits * 1e6 / 8
        assert registry.get_sample_value("bottleneck_network_up", {"device": device}) == 1
    # docker0 reports speed -1 (unknown) and is down.
    assert (net / "docker0" / "speed").read_text().strip() == "-1"
    assert registry.get_sample_value("bottleneck_network_speed_bytes", {"device": "docker0"}) is None
    assert registry.get_sample_value("bottleneck_network_up", {"device": "docker0"}) == 0
    ports = HOST / "sys" / "class" / "infiniband" / "mlx5_0" / "ports"
    port1 = {"device": "mlx5_0", "port": "1"}
    for name, filename in (("received", "port_rcv_data"), ("transmitted", "port_xmit_data")):
        words = int((ports / "1" / "counters" / filename).read_text())
        assert registry.get_sample_value(f"bottleneck_infiniband_port_{name}_bytes_total", port1) == words * 4
    for name, filename in (("received_packets", "port_rcv_packets"), ("transmitted_packets", "port_xmit_packets"),
                           ("receive_errors", "port_rcv_errors"), ("transmit_discards", "port_xmit_discards"),
                           ("transmit_wait", "port_xmit_wait"), ("link_downed", "link_downed")):
        raw = int((ports / "1" / "counters" / filename).read_text())
        assert registry.get_sample_value(f"bottleneck_infiniband_port_{name}_total", port1) == raw, name
    for port in ("1", "2"):
        gigabits = float((ports / port / "rate").read_text().split()[0])
        labels = {"device": "mlx5_0", "port": port}
        assert registry.get_sample_value("bottleneck_infiniband_port_speed_bytes", labels) == gigabits * 1e9 / 8
        active = (ports / port / "state").read_text().strip().endswith("ACTIVE")
        assert registry.get_sample_value("bottleneck_infiniband_port_up", labels) == (1 if active else 0)
    # Port 2 has only the data counters: the others are left out, not zero.
    assert registry.get_sample_value("bottleneck_infiniband_port_received_packets_total",
                                     {"device": "mlx5_0", "port": "2"}) is None


# ---- device selection ----

def test_partitions_loop_and_optical_devices_are_left_out_by_default() -> None:
    registry = host_registry(HOST / "proc", HOST / "sys")
    assert label_values(registry, "bottleneck_disk_read_bytes_total", "device") == {"nvme0n1", "sda", "dm-0"}


def test_device_include_adds_partitions_and_loop_devices_back() -> None:
    include = "--collector.disk.device-include=^(sda1|nvme0n1p2|loop0)$"
    registry = host_registry(HOST / "proc", HOST / "sys", include)
    assert label_values(registry, "bottleneck_disk_read_bytes_total", "device") == {
        "nvme0n1", "sda", "dm-0", "sda1", "nvme0n1p2", "loop0"}
    raw = diskstats(HOST / "proc" / "diskstats")["sda1"]
    assert registry.get_sample_value("bottleneck_disk_read_bytes_total", {"device": "sda1"}) == raw[2] * 512


def test_device_exclude_replaces_the_default_exclusion() -> None:
    registry = host_registry(HOST / "proc", HOST / "sys", "--collector.disk.device-exclude=^dm-")
    # loop and sr are whole disks in sysfs: with the default pattern gone they come back; partitions do not.
    assert label_values(registry, "bottleneck_disk_read_bytes_total", "device") == {
        "nvme0n1", "sda", "loop0", "loop1", "sr0"}


def test_without_sysfs_partitions_are_recognised_by_name(tmp_path: Path) -> None:
    registry = host_registry(HOST / "proc", tmp_path)  # an empty directory: no /sys/block
    assert label_values(registry, "bottleneck_disk_read_bytes_total", "device") == {"nvme0n1", "sda", "dm-0"}


def test_without_sysfs_dm_10_is_not_taken_for_a_partition_of_dm_1(tmp_path: Path) -> None:
    procfs, _ = fixture_copy(tmp_path)
    with (procfs / "diskstats").open("a") as fh:
        for minor, name in ((1, "dm-1"), (10, "dm-10"), (0, "md1"), (1, "md12"), (2, "md1p1")):
            fh.write(f" 253 {minor:7d} {name} 10 0 80 1 0 0 0 0 0 1 1 0 0 0 0 0 0\n")
    registry = host_registry(procfs, tmp_path / "no-sysfs")
    assert label_values(registry, "bottleneck_disk_read_bytes_total", "device") == {
        "nvme0n1", "sda", "dm-0", "dm-1", "dm-10", "md1", "md12"}


def test_loopback_is_left_out_by_default_and_included_on_request() -> None:
    assert label_values(host_registry(HOST / "proc", HOST / "sys"), "bottleneck_network_receive_bytes_total",
                        "device") == {"eth0", "ib0", "docker0"}
    registry = host_registry(HOST / "proc", HOST / "sys", "--collector.network.device-include=^lo$")
    assert registry.get_sample_value("bottleneck_network_receive_bytes_total", {"device": "lo"}) == (
        net_dev(HOST / "proc" / "net" / "dev")["lo"][0])
    # lo has no speed file and operstate "unknown".
    assert registry.get_sample_value("bottleneck_network_speed_bytes", {"device": "lo"}) is None
    assert registry.get_sample_value("bottleneck_network_up", {"device": "lo"}) == 0


# ---- what a kernel may lack ----

def test_missing_psi_schedstat_and_infiniband_leave_no_series_and_no_failure(tmp_path: Path) -> None:
    procfs, sysfs = fixture_copy(tmp_path)
    shutil.rmtree(procfs / "pressure")
    (procfs / "schedstat").unlink()
    shutil.rmtree(sysfs / "class" / "infiniband")
    (sysfs / "class" / "net" / "eth0" / "speed").unlink()  # EINVAL on read reads the same: no file content
    samples = snapshot(host_registry(procfs, sysfs))
    names = {name for name, _ in samples}
    for gone in ("bottleneck_pressure_seconds_total", "bottleneck_cpu_runqueue_wait_seconds_total",
                 "bottleneck_cpu_all_runqueue_wait_seconds_total",
                 "bottleneck_infiniband_port_received_bytes_total",
                 "bottleneck_infiniband_port_transmitted_bytes_total"):
        assert gone not in names
    assert ("bottleneck_network_speed_bytes", frozenset({("device", "eth0")})) not in samples
    for collector in COLLECTORS:
        assert samples[("bottleneck_scrape_collector_success", frozenset({("collector", collector)}))] == 1
    assert "bottleneck_cpu_seconds_total" in names  # the rest of the collector still works


def test_a_cpu_going_offline_does_not_make_the_node_run_queue_wait_fall(tmp_path: Path) -> None:
    """rate() would read the fall as a counter reset: a spike of the node's whole wait since boot."""
    procfs, sysfs = fixture_copy(tmp_path)
    registry = host_registry(procfs, sysfs)
    before = registry.get_sample_value("bottleneck_cpu_all_runqueue_wait_seconds_total")
    schedstat = procfs / "schedstat"
    schedstat.write_text("".join(line for line in schedstat.read_text().splitlines(keepends=True)
                                 if not line.startswith("cpu3 ")))
    assert registry.get_sample_value("bottleneck_cpu_runqueue_wait_seconds_total", {"cpu": "3"}) is None
    assert registry.get_sample_value("bottleneck_cpu_all_runqueue_wait_seconds_total") == before


def test_schedstat_of_an_unknown_version_is_not_misread(tmp_path: Path) -> None:
    procfs, sysfs = fixture_copy(tmp_path)
    schedstat = procfs / "schedstat"
    schedstat.write_text(schedstat.read_text().replace("version 15", "version 14", 1))
    registry = host_registry(procfs, sysfs)
    assert registry.get_sample_value("bottleneck_cpu_runqueue_wait_seconds_total", {"cpu": "0"}) is None
    assert registry.get_sample_value("bottleneck_scrape_collector_success", {"collector": "cpu"}) == 1


def _set_cpu0(stat: Path, mode_index: int, ticks: int) -> None:
    lines = stat.read_text().splitlines()
    fields = lines[1].split()
    assert fields[0] == "cpu0"
    fields[1 + mode_index] = str(ticks)
    lines[1] = " ".join(fields)
    stat.write_text("\n".join(lines) + "\n")


def test_iowait_stepping_back_is_not_served_as_a_counter_reset(tmp_path: Path) -> None:
    procfs, sysfs = fixture_copy(tmp_path)
    registry = host_registry(procfs, sysfs)
    iowait = {"cpu": "0", "mode": "iowait"}
    first = registry.get_sample_value("bottleneck_cpu_seconds_total", iowait)
    raw = stat_lines(procfs / "stat")["cpu0"][4]
    _set_cpu0(procfs / "stat", 4, raw - 1)  # proc(5): iowait "may decrease"
    assert registry.get_sample_value("bottleneck_cpu_seconds_total", iowait) == first
    _set_cpu0(procfs / "stat", 4, raw + 5)
    assert registry.get_sample_value("bottleneck_cpu_seconds_total", iowait) == (raw + 5) / USER_HZ


def test_a_cpu_that_came_back_online_restarts_its_counters(tmp_path: Path) -> None:
    procfs, sysfs = fixture_copy(tmp_path)
    registry = host_registry(procfs, sysfs)
    assert registry.get_sample_value("bottleneck_cpu_seconds_total", {"cpu": "0", "mode": "idle"}) is not None
    _set_cpu0(procfs / "stat", 3, 1000)  # idle restarted from (near) zero: a real reset, not jitter
    _set_cpu0(procfs / "stat", 0, 10)
    idle = registry.get_sample_value("bottleneck_cpu_seconds_total", {"cpu": "0", "mode": "idle"})
    user = registry.get_sample_value("bottleneck_cpu_seconds_total", {"cpu": "0", "mode": "user"})
    assert (idle, user) == (1000 / USER_HZ, 10 / USER_HZ)


# ---- bad options are refused at start, naming the key ----

def _run_exporter(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bottleneck_exporter", f"--web.listen-address=127.0.0.1:{free_port()}",
                           *args], capture_output=True, text=True, timeout=60, cwd=ROOT)


def test_a_bad_regex_flag_is_refused_at_start_naming_the_flag() -> None:
    result = _run_exporter("--collector.disk.device-exclude=(sd[a-z")
    assert result.returncode == 2, result.stderr
    assert "--collector.disk.device-exclude" in result.stderr
    assert "regular expression" in result.stderr


def test_a_bad_regex_in_the_config_file_is_refused_at_start_naming_the_key(tmp_path: Path) -> None:
    config = tmp_path / "config.yml"
    config.write_text('collectors:\n  disk:\n    device-exclude: "(sd[a-z"\n')
    result = _run_exporter(f"--config.file={config}")
    assert result.returncode == 2, result.stderr
    assert "collectors.disk.device-exclude" in result.stderr
    assert "regular expression" in result.stderr


# ---- the real kernel of this machine ----

@pytest.mark.live
def test_live_values_lie_between_the_kernels_own_readings() -> None:
    proc = Path("/proc")
    registry = host_registry(proc, "/sys")
    before_stat, before_disk, before_net = stat_lines(proc / "stat"), diskstats(proc / "diskstats"), net_dev(
        proc / "net" / "dev")
    before_vm = dict(line.split() for line in (proc / "vmstat").read_text().splitlines())
    samples = snapshot(registry)
    after_stat, after_disk, after_net = stat_lines(proc / "stat"), diskstats(proc / "diskstats"), net_dev(
        proc / "net" / "dev")
    after_vm = dict(line.split() for line in (proc / "vmstat").read_text().splitlines())

    def value(name: str, **labels: str) -> float:
        return samples[(name, frozenset(labels.items()))]

    for collector in COLLECTORS:
        assert value("bottleneck_scrape_collector_success", collector=collector) == 1
    modes = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
    cpus = [key[3:] for key in before_stat if re.fullmatch(r"cpu\d+", key)]
    assert value("bottleneck_cpus") == len(cpus) == os.sysconf("SC_NPROCESSORS_ONLN")
    for cpu in cpus:
        for index, mode in enumerate(modes):
            low, high = before_stat[f"cpu{cpu}"][index], after_stat[f"cpu{cpu}"][index]
            # idle and iowait may step back by a tick on tickless kernels (proc(5)); allow that much.
            slack = 2 if mode in ("idle", "iowait") else 0
            assert (low - slack) / USER_HZ <= value("bottleneck_cpu_seconds_total", cpu=cpu, mode=mode) <= (
                high + slack) / USER_HZ, (cpu, mode)
    assert before_stat["ctxt"][0] <= value("bottleneck_context_switches_total") <= after_stat["ctxt"][0]
    assert value("bottleneck_procs_running") >= 1  # the scrape itself was running

    meminfo = meminfo_bytes(proc / "meminfo")
    assert value("bottleneck_memory_total_bytes") == meminfo["MemTotal"]
    assert value("bottleneck_memory_swap_total_bytes") == meminfo["SwapTotal"]
    major_faults = value("bottleneck_memory_major_faults_total")
    assert int(before_vm["pgmajfault"]) <= major_faults <= int(after_vm["pgmajfault"])

    disks = {dict(labels)["device"] for name, labels in samples if name == "bottleneck_disk_read_bytes_total"}
    whole = {entry.replace("!", "/") for entry in os.listdir("/sys/block")}
    default_excluded = re.compile(r"^(z?ram|loop|fd|sr)\d+$")
    assert disks == {d for d in before_disk if d in whole and not default_excluded.search(d)}
    for device in disks:
        for column, name, multiplier, divisor in ((2, "bottleneck_disk_read_bytes_total", 512, 1),
                                                  (6, "bottleneck_disk_written_bytes_total", 512, 1),
                                                  (9, "bottleneck_disk_io_time_seconds_total", 1, 1000)):
            assert (before_disk[device][column] * multiplier / divisor <= value(name, device=device)
                    <= after_disk[device][column] * multiplier / divisor), (device, name)

    interfaces = {dict(labels)["device"] for name, labels in samples
                  if name == "bottleneck_network_receive_bytes_total"}
    assert interfaces == set(before_net) - {"lo"}
    for device in interfaces:
        for column, name in ((0, "bottleneck_network_receive_bytes_total"),
                             (8, "bottleneck_network_transmit_bytes_total")):
            assert before_net[device][column] <= value(name, device=device) <= after_net[device][column]
        speed = Path("/sys/class/net", device, "speed")
        try:
            megabits = int(speed.read_text())
        except OSError:  # EINVAL: the driver does not know its speed
            megabits = -1
        assert samples.get(("bottleneck_network_speed_bytes", frozenset({("device", device)}))) == (
            megabits * 125_000 if megabits > 0 else None)


@pytest.mark.live
def test_live_pressure_and_runqueue_wait_agree_with_the_kernel_where_it_has_them() -> None:
    proc = Path("/proc")
    registry = host_registry(proc, "/sys")
    psi = proc / "pressure" / "cpu"
    schedstat = proc / "schedstat"
    psi_before = psi_total(psi, "some") if psi.exists() else None
    sched_before = schedstat_run_delays(schedstat)[1] if schedstat.exists() else None
    samples = snapshot(registry)
    pressure = samples.get(("bottleneck_pressure_seconds_total",
                            frozenset({("resource", "cpu"), ("kind", "some")})))
    if psi_before is None:
        assert pressure is None
    else:
        assert psi_before / 1e6 <= pressure <= psi_total(psi, "some") / 1e6  # type: ignore[operator]
    wait = samples.get(("bottleneck_cpu_runqueue_wait_seconds_total", frozenset({("cpu", "0")})))
    if sched_before is None:
        assert wait is None
    else:
        sched_after = schedstat_run_delays(schedstat)[1]
        assert sched_before["0"] / 1e9 <= wait <= sched_after["0"] / 1e9  # type: ignore[operator]


# ---- names written whole ----

@pytest.mark.parametrize("golden", sorted(path.name for path in (ROOT / "tests" / "golden").glob("*.prom")))
def test_every_series_name_is_written_whole_in_its_collector_and_in_metrics_md(golden: str) -> None:
    """Searching docs/metrics.md's name of a series finds the code that makes it: no name assembled from
    parts or with its _total added by the client library."""
    code = "\n".join(path.read_text() for path in (ROOT / "exporter").rglob("*.py"))
    contract = (ROOT / "docs" / "metrics.md").read_text()
    text = (ROOT / "tests" / "golden" / golden).read_text()
    # The text format names a counter family with its _total, as the code should.
    names = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")}
    assert names
    for name in sorted(names):
        assert f'"{name}"' in code, f"{name} is not written whole in exporter/"
        assert re.search(rf"\b{name}\b", contract), f"{name} is not in docs/metrics.md"
