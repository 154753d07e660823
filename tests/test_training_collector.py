"""Training collector: discovery rules and per-role CPU on a fixture /proc, then the real kernel and PyTorch.

The fixture (tests/fixtures/training/make_fixture.py says what each PID is) has two instants, ``proc-t0``
and ``proc-t1`` 15 s later; a symlink switched between them is the collector's procfs. Expected values
are computed here from the fixture's raw ticks and bytes, or read from the live kernel by the test itself,
never copied from the exporter's output.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from bottleneck_exporter.cli import build_collectors, build_parser
from bottleneck_exporter.collectors.base import Collector
from bottleneck_exporter.config import ConfigError
from bottleneck_exporter.training.discovery import Discovery, read_argv, script_name
from bottleneck_exporter.training.registry import RegisteredProcess, TrainingRegistry
from bottleneck_exporter.web.exposition import text_format  # the writer /metrics answers with
from tests.conftest import FIXTURES, ROOT, require_tool

TRAINING = FIXTURES / "training"
GOLDEN = ROOT / "tests" / "golden" / "training.prom"
GOLDEN_HEADER = "# Regenerate: .venv/bin/pytest tests/test_training_collector.py -m golden --update-golden\n"
USER_HZ = os.sysconf("SC_CLK_TCK")
FIXTURE_HZ = 100  # the fixture's ticks are written for USER_HZ 100, as on every Linux that exports it

CPU = "bottleneck_training_cpu_seconds_total"
BUSIEST = "bottleneck_training_busiest_thread_cpu_ratio"
THREADS = "bottleneck_training_threads"
WORKERS = "bottleneck_training_dataloader_workers_found"
INFO = "bottleneck_training_process_info"


def fixture_registry() -> TrainingRegistry:
    """What the push receiver would have registered: PID 8000 and its (unrenamed) workers."""
    registry = TrainingRegistry()
    registry.register(RegisteredProcess(pid=8000, job="resnet", rank="3", local_rank="3", worker_pids=(8001, 8002)))
    return registry


def training_collector(procfs: Path | str, training: TrainingRegistry | None = None, *flags: str) -> Collector:
    """The training collector as the command line builds it (flags really parsed)."""
    args = build_parser().parse_args([f"--path.procfs={procfs}", "--collector.disable-defaults",
                                      "--collector.training", *flags])
    return build_collectors(args, {}, training or TrainingRegistry())["training"]


def as_registry(collector: Collector) -> CollectorRegistry:
    # Registered bare, not behind the Orchestrator: an exception here fails the test instead of a gauge.
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)  # type: ignore[arg-type]
    return registry


class FixtureNode:
    """A procfs path that can be moved from t0 to t1."""

    def __init__(self, tmp_path: Path) -> None:
        self.proc = tmp_path / "proc"
        self.at("t0")

    def at(self, instant: str) -> None:
        if self.proc.is_symlink():
            self.proc.unlink()
        self.proc.symlink_to(TRAINING / f"proc-{instant}")


# ---- raw fixture readers, independent of the exporter's parsers ----

def ticks(tree: str, pid: int, tid: int) -> tuple[int, int]:
    """(utime, stime) of one fixture thread."""
    text = (TRAINING / f"proc-{tree}" / str(pid) / "task" / str(tid) / "stat").read_text()
    fields = text.rsplit(")", 1)[1].split()
    return int(fields[11]), int(fields[12])


def tids(tree: str, pid: int) -> list[int]:
    task = TRAINING / f"proc-{tree}" / str(pid) / "task"
    return sorted(int(name) for name in os.listdir(task)) if task.exists() else []


def uptime(tree: str) -> float:
    return float((TRAINING / f"proc-{tree}" / "uptime").read_text().split()[0])


# ---- fixture: golden scrape ----

@pytest.mark.golden
def test_fixture_scrape_matches_golden(tmp_path: Path, update_golden: bool) -> None:
    node = FixtureNode(tmp_path)
    registry = as_registry(training_collector(node.proc, fixture_registry()))
    text_format(registry)
    node.at("t1")
    text = text_format(registry).decode()
    if update_golden:
        GOLDEN.write_text(GOLDEN_HEADER + text)
    assert GOLDEN.read_text() == GOLDEN_HEADER + text, "scrape differs from golden; review with --update-golden"

    promtool = require_tool("promtool")
    result = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True,
                            check=False)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


# ---- fixture: values ----

def test_fixture_cpu_per_role_follows_from_thread_ticks(tmp_path: Path) -> None:
    node = FixtureNode(tmp_path)
    registry = as_registry(training_collector(node.proc))
    labels = {"process": "train.py", "local_rank": "0"}

    def cpu(role: str, mode: str) -> float | None:
        return registry.get_sample_value(CPU, {**labels, "role": role, "mode": mode})

    roles_t0 = {"main": [(4242, 4242)], "other": [(4242, 4243)], "pin_memory": [(4242, 4250)],
                "data_worker": [(w, t) for w in (4300, 4301) for t in tids("t0", w)]}
    for role, threads in roles_t0.items():
        assert cpu(role, "user") == pytest.approx(sum(ticks("t0", *t)[0] for t in threads) / FIXTURE_HZ)
        assert cpu(role, "system") == pytest.approx(sum(ticks("t0", *t)[1] for t in threads) / FIXTURE_HZ)

    node.at("t1")
    # Worker 4301 exited before t1 and 4302 replaced it: what 4301 used is kept, 4302 counts in full.
    kept = [(w, t) for w in (4300,) for t in tids("t1", w)]
    expected_user = (sum(ticks("t0", *t)[0] for t in roles_t0["data_worker"])
                     + sum(ticks("t1", *t)[0] - ticks("t0", *t)[0] for t in kept)
                     + sum(ticks("t1", 4302, t)[0] for t in tids("t1", 4302)))
    assert cpu("data_worker", "user") == pytest.approx(expected_user / FIXTURE_HZ)
    assert registry.get_sample_value(WORKERS, labels) == 2
    assert registry.get_sample_value(THREADS, {**labels, "role": "data_worker"}) == len(kept) + 1


def test_cpu_counter_does_not_fall_when_a_worker_exits(tmp_path: Path) -> None:
    node = FixtureNode(tmp_path)
    registry = as_registry(training_collector(node.proc))
    labels = {"process": "train.py", "local_rank": "0", "role": "data_worker", "mode": "user"}
    before = registry.get_sample_value(CPU, labels)
    live_sum_t1 = sum(ticks("t1", w, t)[0] for w in (4300, 4302) for t in tids("t1", w)) / FIXTURE_HZ
    node.at("t1")
    after = registry.get_sample_value(CPU, labels)
    assert before is not None and after is not None
    # A sum over live threads would fall here (4301's ticks are gone); Prometheus would read a reset.
    assert live_sum_t1 < before <= after


def test_busiest_ratio_is_the_busiest_threads_growth_over_uptime(tmp_path: Path) -> None:
    node = FixtureNode(tmp_path)
    registry = as_registry(training_collector(node.proc))
    labels = {"process": "train.py", "local_rank": "0"}
    assert registry.get_sample_value(BUSIEST, {**labels, "role": "data_worker"}) is None, "no window yet"
    node.at("t1")
    window = uptime("t1") - uptime("t0")

    def share(pid: int, tid: int) -> float:
        grown = sum(ticks("t1", pid, tid)) - (sum(ticks("t0", pid, tid)) if tid in tids("t0", pid) else 0)
        return grown / FIXTURE_HZ / window

    workers = [(w, t) for w in (4300, 4302) for t in tids("t1", w)]
    assert registry.get_sample_value(BUSIEST, {**labels, "role": "data_worker"}) == pytest.approx(
        max(share(*t) for t in workers))
    assert registry.get_sample_value(BUSIEST, {**labels, "role": "main"}) == pytest.approx(share(4242, 4242))
    assert registry.get_sample_value(BUSIEST, {**labels, "role": "pin_memory"}) == pytest.approx(
        share(4242, 4250))


def test_io_counter_does_not_count_a_reaped_workers_bytes_twice(tmp_path: Path) -> None:
    def read_bytes(tree: str, pid: int) -> int:
        lines = (TRAINING / f"proc-{tree}" / str(pid) / "io").read_text().splitlines()
        return next(int(line.split()[1]) for line in lines if line.startswith("read_bytes:"))

    node = FixtureNode(tmp_path)
    registry = as_registry(training_collector(node.proc))
    labels = {"process": "train.py", "local_rank": "0"}
    node.at("t1")
    # 4301's bytes moved into the trainer's /proc/PID/io when it was reaped: the sum is what to expose.
    assert registry.get_sample_value("bottleneck_training_io_read_bytes_total", labels) == sum(
        read_bytes("t1", pid) for pid in (4242, 4300, 4302))


# ---- fixture: discovery ----

def found(procfs: Path, training: TrainingRegistry | None = None, **options: object) -> dict[int, str]:
    discovery = Discovery(str(procfs), **options)  # type: ignore[arg-type]
    return {t.pid: t.discovered_by for t in discovery.find((training or TrainingRegistry()).processes())}


def test_discovery_finds_each_kind_of_trainer(tmp_path: Path) -> None:
    assert found(FixtureNode(tmp_path).proc, fixture_registry()) == {
        8000: "push", 4242: "dataloader_workers", 5001: "gpu", 5002: "gpu", 6000: "cmdline", 6001: "cmdline"}


@pytest.mark.parametrize("pid", [
    pytest.param(5000, id="torchrun_agent_launches_trainers"),
    pytest.param(5010, id="helper_forked_by_a_trainer_inherits_its_gpu_files_and_cmdline"),
    pytest.param(7000, id="nvidia_smi_opens_nvidiactl_but_has_no_cuda_context"),
    pytest.param(7100, id="pytest_running_test_training_collector_py"),
    pytest.param(9000, id="orphaned_worker_reparented_to_init"),
    pytest.param(4300, id="dataloader_worker_shares_the_trainers_cmdline"),
])
def test_is_not_taken_for_a_trainer(tmp_path: Path, pid: int) -> None:
    assert pid not in found(FixtureNode(tmp_path).proc, fixture_registry())


def test_registered_workers_get_their_role_though_their_names_do_not_match(tmp_path: Path) -> None:
    registry = as_registry(training_collector(FixtureNode(tmp_path).proc, fixture_registry()))
    labels = {"process": "main.py", "local_rank": "3"}
    assert registry.get_sample_value(INFO, {**labels, "training_job": "resnet", "discovered_by": "push"}) == 1
    assert registry.get_sample_value(WORKERS, labels) == 2
    expected = sum(ticks("t0", w, w)[0] for w in (8001, 8002)) / FIXTURE_HZ
    assert registry.get_sample_value(CPU, {**labels, "role": "data_worker", "mode": "user"}) == pytest.approx(
        expected)


def test_ranks_without_gpu_discovery_are_still_found_by_cmdline_but_not_their_helper(tmp_path: Path) -> None:
    # 5010 has LOCAL_RANK like its parent 5001: a tie, so the ancestor is the trainer.
    result = found(FixtureNode(tmp_path).proc, gpu=False)
    assert {pid: why for pid, why in result.items() if 5000 <= pid < 6000} == {5001: "cmdline", 5002: "cmdline"}


def test_empty_cmdline_include_turns_command_line_discovery_off(tmp_path: Path) -> None:
    registry = as_registry(training_collector(FixtureNode(tmp_path).proc, None,
                                              "--collector.training.cmdline-include="))
    discovered = {s.labels["discovered_by"] for f in registry.collect() for s in f.samples if s.name == INFO}
    assert discovered == {"dataloader_workers", "gpu"}


def test_trainers_sharing_labels_are_told_apart_by_start_time(tmp_path: Path) -> None:
    registry = as_registry(training_collector(FixtureNode(tmp_path).proc))
    for process, pid in (("train.py", 6000), ("train.py#2", 6001)):  # 6000 started first
        value = registry.get_sample_value(CPU, {"process": process, "local_rank": "", "role": "main",
                                                "mode": "user"})
        assert value == pytest.approx(ticks("t0", pid, pid)[0] / FIXTURE_HZ)


def test_max_processes_keeps_the_strongest_evidence(tmp_path: Path) -> None:
    registry = as_registry(training_collector(FixtureNode(tmp_path).proc, fixture_registry(),
                                              "--collector.training.max-processes=2"))
    info = {(s.labels["process"], s.labels["discovered_by"]) for f in registry.collect() for s in f.samples
            if s.name == INFO}
    assert info == {("main.py", "push"), ("train.py", "dataloader_workers")}


def test_bad_cmdline_include_is_refused_naming_the_flag(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"--collector\.training\.cmdline-include: not a valid regular"):
        training_collector(tmp_path, None, "--collector.training.cmdline-include=(train")


def test_process_vanishing_mid_read_does_not_fail_the_scrape(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    shutil.copytree(TRAINING / "proc-t0", proc, symlinks=True)
    shutil.rmtree(proc / "4300" / "task")  # worker gone between listing and reading
    (proc / "4242" / "task" / "4250" / "status").unlink()  # thread gone between stat and status
    shutil.rmtree(proc / "5001" / "task")  # trainer gone after discovery
    (proc / "6000" / "stat").write_text("")  # read returned nothing
    registry = as_registry(training_collector(proc))
    labels = {"process": "train.py", "local_rank": "0"}
    assert registry.get_sample_value(WORKERS, labels) == 1
    assert registry.get_sample_value(THREADS, {**labels, "role": "pin_memory"}) == 1
    assert registry.get_sample_value(INFO, {"process": "pretrain_gpt.py", "local_rank": "0", "training_job": "",
                                            "discovered_by": "gpu"}) is None
    assert registry.get_sample_value(INFO, {"process": "pretrain_gpt.py", "local_rank": "1", "training_job": "",
                                            "discovered_by": "gpu"}) == 1


def test_a_garbled_cpu_list_costs_that_trainers_allowed_cpus_only_and_is_logged_naming_the_key(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    proc = tmp_path / "proc"
    shutil.copytree(TRAINING / "proc-t0", proc, symlinks=True)
    status = proc / "4242" / "status"
    status.write_text(status.read_text().replace("Cpus_allowed_list:\t0-7", "Cpus_allowed_list:\t7-0"))
    registry = as_registry(training_collector(proc, fixture_registry()))
    trainer, other = {"process": "train.py", "local_rank": "0"}, {"process": "main.py", "local_rank": "3"}
    assert registry.get_sample_value("bottleneck_training_allowed_cpus", trainer) is None
    assert registry.get_sample_value(WORKERS, trainer) == 2, "its other series stay"
    assert registry.get_sample_value("bottleneck_training_allowed_cpus", other) == 8
    assert "4242/status: Cpus_allowed_list: expected a list" in caplog.text


def test_a_trainer_s_garbled_cpu_list_is_logged_once_and_again_only_after_it_read_well(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    proc = tmp_path / "proc"
    shutil.copytree(TRAINING / "proc-t0", proc, symlinks=True)
    status = proc / "4242" / "status"
    good = status.read_text()
    collector = training_collector(proc, fixture_registry())

    def scrape_logged(text: str) -> int:
        status.write_text(text)
        caplog.clear()
        list(collector.collect())
        return sum("no allowed CPUs for train.py" in record.getMessage() for record in caplog.records)

    garbled = good.replace("Cpus_allowed_list:\t0-7", "Cpus_allowed_list:\t7-0")
    assert [scrape_logged(garbled), scrape_logged(garbled), scrape_logged(good), scrape_logged(garbled)] == \
        [1, 0, 0, 1]


@pytest.mark.parametrize(("argv", "comm", "expected"), [
    (["python3", "train.py", "--lr", "1"], "python3", "train.py"),
    (["/usr/bin/python3.11", "-u", "-X", "dev", "/src/job/pretrain_gpt.py"], "python3.11", "pretrain_gpt.py"),
    (["python", "-m", "my_project.train", "--cfg", "a.yaml"], "python", "my_project.train"),
    (["python", "-mtorch.distributed.run", "x.py"], "python", "torch.distributed.run"),
    (["python3", "-c", "import train"], "python3", "python3"),
    (["/opt/bin/trainer", "--config", "x"], "trainer", "trainer"),
    ([], "pt_main_thread", "pt_main_thread"),
])
def test_process_label_is_the_script_name(argv: list[str], comm: str, expected: str) -> None:
    assert script_name(argv, comm) == expected


def test_process_label_survives_setproctitle(tmp_path: Path) -> None:
    # setproctitle writes one string over argv, with spaces where the NULs were.
    (tmp_path / "77").mkdir()
    (tmp_path / "77" / "cmdline").write_text("python3 /x/train.py --lr 1\0\0\0")
    assert script_name(read_argv(str(tmp_path), 77), "python3") == "train.py"


# ---- the real kernel ----

def kernel_ticks(pid: int, tid: int) -> int:
    """utime + stime of one live thread, read here independently of the exporter."""
    with open(f"/proc/{pid}/task/{tid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def kernel_uptime() -> float:
    with open("/proc/uptime") as fh:
        return float(fh.read().split()[0])


class Burner:
    def __init__(self, proc: subprocess.Popen[str], label: str, pin_tid: int, workers: list[int]) -> None:
        self.proc, self.label, self.pin_tid, self.workers = proc, label, pin_tid, workers
        self.pid = proc.pid

    def threads_by_role(self) -> dict[str, list[tuple[int, int]]]:
        """(pid, tid) per role, from the TIDs the burner reported, not from thread names."""
        trainer = [int(t) for t in os.listdir(f"/proc/{self.pid}/task")]
        return {
            "main": [(self.pid, self.pid)],
            "pin_memory": [(self.pid, self.pin_tid)],
            "other": [(self.pid, t) for t in trainer if t not in (self.pid, self.pin_tid)],
            "data_worker": [(w, int(t)) for w in self.workers for t in os.listdir(f"/proc/{w}/task")],
        }

    def role_ticks(self) -> dict[str, int]:
        return {role: sum(kernel_ticks(*t) for t in threads) for role, threads in self.threads_by_role().items()}


@contextmanager
def burner(tmp_path: Path, *args: str) -> Iterator[Burner]:
    # A name of its own, so the series are told apart from anything else running on this machine.
    script = tmp_path / f"roles_{os.getpid()}_{tmp_path.name[-12:]}.py"
    shutil.copy(TRAINING / "burn_roles.py", script)
    proc = subprocess.Popen([sys.executable, str(script), *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    try:
        line = proc.stdout.readline().split()  # type: ignore[union-attr]
        assert line and line[0] == "ready", f"burner did not start: {line}"
        yield Burner(proc, script.name, int(line[1]), [int(p) for p in line[2:]])
    finally:
        proc.stdin.close()  # type: ignore[union-attr]
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


Snapshot = dict[tuple[str, frozenset[tuple[str, str]]], float]


def snapshot(registry: CollectorRegistry) -> Snapshot:
    """One scrape, every sample: {(name, labels): value}."""
    return {(s.name, frozenset(s.labels.items())): s.value for f in registry.collect() for s in f.samples}


def value(snap: Snapshot, name: str, **labels: str) -> float | None:
    return snap.get((name, frozenset(labels.items())))


def role_cpu(snap: Snapshot, labels: dict[str, str], role: str) -> float:
    values = [value(snap, CPU, **labels, role=role, mode=mode) for mode in ("user", "system")]
    assert None not in values, f"no {role} CPU series for {labels}"
    return sum(values)  # type: ignore[arg-type]


@pytest.mark.live
def test_live_cpu_goes_to_the_burning_roles(tmp_path: Path) -> None:
    with burner(tmp_path, "--workers", "2", "--busy-workers", "1", "--burn", "3") as b:
        registry = as_registry(training_collector("/proc"))
        labels = {"process": b.label, "local_rank": ""}
        busy_worker = b.workers[0]
        up_a0, ticks_a0 = kernel_uptime(), kernel_ticks(busy_worker, busy_worker)
        first = snapshot(registry)
        up_a1, ticks_a1 = kernel_uptime(), kernel_ticks(busy_worker, busy_worker)
        time.sleep(1.2)
        up_b0, ticks_b0 = kernel_uptime(), kernel_ticks(busy_worker, busy_worker)
        second = snapshot(registry)
        up_b1, ticks_b1 = kernel_uptime(), kernel_ticks(busy_worker, busy_worker)
    after_exit = snapshot(registry)

    grown = {role: role_cpu(second, labels, role) - role_cpu(first, labels, role)
             for role in ("main", "data_worker", "pin_memory")}
    assert grown["data_worker"] > 0.1 and grown["pin_memory"] > 0.1, grown
    assert grown["main"] < 0.25 * min(grown["data_worker"], grown["pin_memory"]), grown
    assert value(first, BUSIEST, **labels, role="data_worker") is None, "first sight: no window yet"

    # The collector's window lies between the bracketing reads, so its share must too (10 ms tick slack).
    busiest = value(second, BUSIEST, **labels, role="data_worker")
    slack = 0.02
    low = (ticks_b0 - ticks_a1) / USER_HZ / (up_b1 - up_a0)
    high = min(1.0, (ticks_b1 - ticks_a0) / USER_HZ / (up_b0 - up_a1))
    assert busiest is not None and low - slack <= busiest <= high + slack, (low, busiest, high)
    # A spinning thread gets about a core on an idle machine, but CI and development boxes here have 2 cores
    # shared by parallel test runs (0.21 seen at load 4.4): the bracket above is the exact check; this one
    # says the burning roles stand far above the idle main thread.
    pin_busiest = value(second, BUSIEST, **labels, role="pin_memory")
    main_busiest = value(second, BUSIEST, **labels, role="main")
    assert pin_busiest is not None and main_busiest is not None
    assert min(busiest, pin_busiest) > max(0.1, 5 * main_busiest), (busiest, pin_busiest, main_busiest)
    assert value(after_exit, WORKERS, **labels) is None, "series of an exited trainer must go"


@pytest.mark.live
def test_live_cpu_agrees_with_the_kernels_accounting(tmp_path: Path) -> None:
    with burner(tmp_path, "--workers", "2", "--busy-workers", "2", "--burn", "1") as b:
        registry = as_registry(training_collector("/proc"))
        labels = {"process": b.label, "local_rank": ""}
        for _ in range(3):
            before = b.role_ticks()
            snap = snapshot(registry)
            after = b.role_ticks()
            exported = {role: role_cpu(snap, labels, role) for role in before}
            for role in before:
                # Kernel counters only grow: the exporter's reading sits between the two reads around it.
                assert before[role] / USER_HZ - 1e-9 <= exported[role] <= after[role] / USER_HZ + 1e-9, (
                    role, before[role], exported[role], after[role])
            time.sleep(0.4)
        assert value(snapshot(registry), THREADS, **labels, role="data_worker") == len(
            b.threads_by_role()["data_worker"])


@pytest.mark.live
def test_live_registry_gives_roles_to_workers_with_other_names(tmp_path: Path) -> None:
    with burner(tmp_path, "--worker-name", "", "--pin-name", "", "--workers", "2", "--busy-workers", "2",
                "--burn", "1.5") as b:
        labels = {"process": b.label, "local_rank": "5"}
        unregistered = as_registry(training_collector("/proc"))
        assert not [s for f in unregistered.collect() for s in f.samples if s.labels.get("process") == b.label], (
            "found without the registry: this test would prove nothing")

        training = TrainingRegistry()
        training.register(RegisteredProcess(pid=b.pid, job="jobx", rank="5", local_rank="5",
                                            worker_pids=tuple(b.workers)))
        registry = as_registry(training_collector("/proc", training))
        before = b.role_ticks()["data_worker"]
        first = snapshot(registry)
        time.sleep(0.5)
        second = snapshot(registry)
        after = b.role_ticks()["data_worker"]
    assert value(second, INFO, **labels, training_job="jobx", discovered_by="push") == 1
    assert value(second, WORKERS, **labels) == 2
    assert value(second, THREADS, **labels, role="pin_memory") == 0  # the unnamed thread counts as "other"
    assert before / USER_HZ <= role_cpu(first, labels, "data_worker") < role_cpu(second, labels, "data_worker")
    assert role_cpu(second, labels, "data_worker") <= after / USER_HZ


CHURN = """
import os, sys, time
deadline = time.monotonic() + float(sys.argv[1])
while time.monotonic() < deadline:
    for _ in range(3):
        if os.fork() == 0:
            with open("/proc/self/comm", "w") as fh:
                fh.write("pt_data_worker")
            time.sleep(0.005 * (os.getpid() % 7))
            os._exit(0)
    for _ in range(3):
        os.wait()
print("done", flush=True)
"""


@pytest.mark.live
def test_live_workers_exiting_during_scrapes_never_fail_them(tmp_path: Path) -> None:
    script = tmp_path / f"churn_{os.getpid()}.py"
    script.write_text(CHURN)
    proc = subprocess.Popen([sys.executable, str(script), "2"], stdout=subprocess.PIPE, text=True)
    collector = training_collector("/proc")
    seen = 0
    try:
        while proc.poll() is None:
            families = list(collector.collect())  # raises here if a vanished process broke the scrape
            seen += any(s.labels.get("process") == script.name for f in families for s in f.samples)
    finally:
        proc.wait(timeout=10)
    assert proc.returncode == 0
    assert seen > 0, "the churning trainer was never seen: the race was not exercised"


# ---- real PyTorch ----

@pytest.mark.live
@pytest.mark.torch
def test_live_pytorch_dataloader_workers_are_found_by_the_exporter(tmp_path: Path, start_exporter) -> None:
    script = tmp_path / f"train_tiny_{os.getpid()}.py"
    shutil.copy(TRAINING / "train_tiny.py", script)
    trainer = subprocess.Popen([sys.executable, str(script), "--num-workers", "2", "--max-seconds", "120"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        line = trainer.stdout.readline().split()  # type: ignore[union-attr]
        assert line[:1] == ["training"], f"training did not start: {line}"
        exporter = start_exporter(["--collector.disable-defaults", "--collector.training"])

        def ours() -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
            return {(s.name, frozenset((k, v) for k, v in s.labels.items() if k not in ("process", "local_rank"))):
                    s.value for f in text_string_to_metric_families(exporter.scrape()) for s in f.samples
                    if s.labels.get("process") == script.name}

        first = ours()
        time.sleep(1.2)
        second = ours()
    finally:
        trainer.stdin.close()  # type: ignore[union-attr]
        trainer.wait(timeout=30)

    assert second[(INFO, frozenset({("training_job", ""), ("discovered_by", "dataloader_workers")}))] == 1
    assert second[(WORKERS, frozenset())] == 2
    assert second[(THREADS, frozenset({("role", "data_worker")}))] >= 2

    def worker_cpu(sample: dict[tuple[str, frozenset[tuple[str, str]]], float]) -> float:
        return sum(sample[(CPU, frozenset({("role", "data_worker"), ("mode", m)}))] for m in ("user", "system"))

    assert 0 < worker_cpu(first) < worker_cpu(second)
    assert (BUSIEST, frozenset({("role", "data_worker")})) in second
