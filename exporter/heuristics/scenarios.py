"""The scenario table: input series → expected verdicts, for every alert of the catalogue.

Each alert (each severity tier) has at least one scenario that fires, one near miss that must not fire,
and one that must not fire *yet* because its ``for:`` has not elapsed. The same table

* renders to ``tests/rules/*.yml``, run by ``promtool test rules`` against the generated rules, and
* drives the Python evaluator (``bottleneck_exporter.heuristics.promql``) that ``diagnose`` uses,

so the PromQL and the Python side cannot drift. Scenario names say which failure they guard against.

Series carry the labels a Prometheus scrape with ``honor_labels: false`` gives them: ``job`` is the scrape
job (``EXPORTER_JOB``) on every series of the exporter, the training job's name is ``training_job``.

Series are written per minute (the promtool ``interval``); ``Timeline.start`` is the minute at which
the situation begins (a job starts, a disk saturates); before it, node and GPU series show ``before``
values and training series are absent.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

from bottleneck_exporter.heuristics.catalogue import HEURISTICS
from bottleneck_exporter.heuristics.parameters import format_value
from bottleneck_exporter.heuristics.promql import SeriesStore, parse_duration
from bottleneck_exporter.heuristics.sources import Bundle

FIRES, NEAR_MISS, NOT_YET = "fires", "near_miss", "not_yet"
INSTANCE = "gpu-node-1:9847"
INSTANCE_2 = "gpu-node-2:9847"
EXPORTER_JOB = "bottleneck-exporter"
TRAIN_JOB = "resnet50"

Track = list[float | None]


@dataclasses.dataclass(frozen=True)
class Timeline:
    length: int  # last minute with samples
    start: int = 0

    def before(self, minute: int) -> bool:
        return minute < self.start


@dataclasses.dataclass(frozen=True)
class Series:
    labels: tuple[tuple[str, str], ...]  # "__name__" included
    track: tuple[float | None, ...]  # one value per minute; None = no sample

    @property
    def selector(self) -> str:
        labels = dict(self.labels)
        name = labels.pop("__name__")
        inner = ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        return f"{name}{{{inner}}}"

    @property
    def notation(self) -> str:
        """promtool's expanding notation: ``_x3 0+48x10`` (``a+bxn`` is n+1 values)."""
        tokens: list[str] = []
        values = list(self.track)
        i = 0
        while i < len(values):
            if values[i] is None:
                j = i
                while j + 1 < len(values) and values[j + 1] is None:
                    j += 1
                tokens.append("_" if j == i else f"_x{j - i + 1}")
                i = j + 1
                continue
            first = values[i]
            assert first is not None
            j = i
            step: float | None = None
            while j + 1 < len(values) and values[j + 1] is not None:
                delta = round(values[j + 1] - values[j], 6)  # type: ignore[operator]
                if step is None:
                    step = delta
                elif delta != step:
                    break
                j += 1
            count = j - i
            if count == 0:
                tokens.append(format_value(first))
            elif not step:
                tokens.append(f"{format_value(first)}x{count}")
            else:
                sign = "+" if step > 0 else "-"
                tokens.append(f"{format_value(first)}{sign}{format_value(abs(step))}x{count}")
            i = j + 1
        return " ".join(tokens)

    def points(self, interval: float = 60.0) -> list[tuple[float, float]]:
        return [(m * interval, v) for m, v in enumerate(self.track) if v is not None]


def series(name: str, labels: Mapping[str, str], track: Track) -> Series:
    return Series(tuple(sorted({"__name__": name, **labels}.items())), tuple(track))


def gauge(tl: Timeline, value: float, before: float | None = None) -> Track:
    return [before if tl.before(m) else value for m in range(tl.length + 1)]


def counter(tl: Timeline, per_second: float, before: float | None = None, initial: float = 0.0,
            stop_at: int | None = None) -> Track:
    """A counter rising at ``per_second`` (``before`` until the start; None = absent), frozen from
    ``stop_at`` on."""
    track: Track = []
    total = initial
    present = False
    for m in range(tl.length + 1):
        rate = before if tl.before(m) else per_second
        if rate is None:
            track.append(None)
            continue
        if present and (stop_at is None or m <= stop_at):
            total = round(total + rate * 60, 6)
        present = True
        track.append(total)
    return track


# ---------------------------------------------------------------------------------------------- builders


def node(tl: Timeline, instance: str = INSTANCE, before: Mapping[str, float] | None = None,
         **values: float) -> list[Series]:
    """A node as the exporter's cpu, memory, pressure, disk and network collectors expose it."""
    v = {"cpus": 8, "busy": 0.3, "iowait": 0.02, "load": 2.0, "ctx_per_cpu": 2000, "mem_available": 0.5,
         "swap": 0.0, "io_pressure": 0.05, "cpu_pressure": 0.1, "memory_pressure": 0.0, "disk_busy": 0.2,
         "nic": 0.1, "nic_speed": 1.25e9, **values}
    b = {**v, **(before or {})}
    target = {"instance": instance, "job": EXPORTER_JOB}
    out: list[Series] = []
    cpus = [str(cpu) for cpu in range(int(v["cpus"]))]  # one series per CPU, as node_exporter counts them
    for cpu in cpus:
        for mode, share in (("user", 0.8), ("system", 0.2)):
            out.append(series("bottleneck_cpu_seconds_total", {**target, "cpu": cpu, "mode": mode},
                              counter(tl, v["busy"] * share, b["busy"] * share, initial=1000)))
        out.append(series("bottleneck_cpu_seconds_total", {**target, "cpu": cpu, "mode": "iowait"},
                          counter(tl, v["iowait"], b["iowait"], initial=10)))
        out.append(series("bottleneck_cpu_seconds_total", {**target, "cpu": cpu, "mode": "idle"},
                          counter(tl, 1 - v["busy"] - v["iowait"], 1 - b["busy"] - b["iowait"], initial=5000)))
    total = 64 * 2**30
    out += [
        series("bottleneck_cpus", target, gauge(tl, v["cpus"], b["cpus"])),
        series("bottleneck_load1", target, gauge(tl, v["load"], b["load"])),
        series("bottleneck_context_switches_total", target,
               counter(tl, v["ctx_per_cpu"] * v["cpus"], b["ctx_per_cpu"] * b["cpus"], initial=10**6)),
        series("bottleneck_memory_total_bytes", target, gauge(tl, total)),
        series("bottleneck_memory_available_bytes", target,
               gauge(tl, round(total * v["mem_available"]), round(total * b["mem_available"]))),
        series("bottleneck_memory_swapped_in_pages_total", target, counter(tl, v["swap"] / 2, b["swap"] / 2)),
        series("bottleneck_memory_swapped_out_pages_total", target, counter(tl, v["swap"] / 2, b["swap"] / 2)),
        series("bottleneck_pressure_seconds_total", {**target, "resource": "io", "kind": "some"},
               counter(tl, v["io_pressure"], b["io_pressure"], initial=100)),
        series("bottleneck_pressure_seconds_total", {**target, "resource": "cpu", "kind": "some"},
               counter(tl, v["cpu_pressure"], b["cpu_pressure"], initial=100)),
        series("bottleneck_pressure_seconds_total", {**target, "resource": "memory", "kind": "some"},
               counter(tl, v["memory_pressure"], b["memory_pressure"], initial=100)),
        series("bottleneck_disk_io_time_seconds_total", {**target, "device": "nvme0n1"},
               counter(tl, v["disk_busy"], b["disk_busy"], initial=500)),
        series("bottleneck_disk_io_time_seconds_total", {**target, "device": "sda"},
               counter(tl, 0.01, 0.01, initial=500)),
        series("bottleneck_network_receive_bytes_total", {**target, "device": "eth0"},
               counter(tl, v["nic"] * v["nic_speed"], b["nic"] * b["nic_speed"], initial=10**9)),
        series("bottleneck_network_transmit_bytes_total", {**target, "device": "eth0"},
               counter(tl, 0.05 * v["nic_speed"], 0.05 * b["nic_speed"], initial=10**9)),
        series("bottleneck_network_speed_bytes", {**target, "device": "eth0"}, gauge(tl, v["nic_speed"])),
        series("up", target, gauge(tl, 1)),
    ]
    if "runqueue" in values:  # seconds waited per second per CPU; /proc/schedstat is missing in some containers
        out += [series("bottleneck_cpu_runqueue_wait_seconds_total", {**target, "cpu": cpu},
                       counter(tl, v["runqueue"], b["runqueue"], initial=50))
                for cpu in cpus]
    return out


def gpu(tl: Timeline, index: str = "0", instance: str = INSTANCE, before: Mapping[str, float] | None = None,
        **values: float) -> list[Series]:
    """One GPU as the gpu collector exposes it (NVML)."""
    v = {"util": 0.9, "mem": 0.6, "idle_samples": 0.02, "busy_samples": 0.85, "thermal": 0.0,
         "temp": 65, "slowdown": 90, "gen": 4, "width": 16, "up": 1, **values}
    b = {**v, **(before or {})}
    labels = {"instance": instance, "job": EXPORTER_JOB, "gpu": index, "uuid": f"GPU-5e1f7c3a-000{index}"}
    total = 80 * 2**30
    per_minute = 360  # NVML keeps about six GPU-Util samples a second

    def samples_at_or_below(share_of: Callable[[Mapping[str, float]], float]) -> Track:
        return counter(tl, share_of(v) * per_minute / 60, share_of(b) * per_minute / 60)

    out = [
        series("bottleneck_gpu_up", labels, gauge(tl, v["up"], b["up"])),
        series("bottleneck_gpu_utilization_ratio", labels, gauge(tl, v["util"], b["util"])),
        series("bottleneck_gpu_memory_total_bytes", labels, gauge(tl, total)),
        series("bottleneck_gpu_memory_used_bytes", labels,
               gauge(tl, round(total * v["mem"]), round(total * b["mem"]))),
        series("bottleneck_gpu_utilization_samples_bucket", {**labels, "le": "0.05"},
               samples_at_or_below(lambda s: s["idle_samples"])),
        series("bottleneck_gpu_utilization_samples_bucket", {**labels, "le": "0.8"},
               samples_at_or_below(lambda s: 1 - s["busy_samples"])),
        series("bottleneck_gpu_utilization_samples_bucket", {**labels, "le": "+Inf"},
               samples_at_or_below(lambda s: 1.0)),
        series("bottleneck_gpu_utilization_samples_count", labels, samples_at_or_below(lambda s: 1.0)),
        series("bottleneck_gpu_temperature_celsius", labels, gauge(tl, v["temp"], b["temp"])),
        series("bottleneck_gpu_slowdown_temperature_celsius", labels, gauge(tl, v["slowdown"])),
        series("bottleneck_gpu_pcie_link_generation", labels, gauge(tl, v["gen"], b["gen"])),
        series("bottleneck_gpu_pcie_link_max_generation", labels, gauge(tl, 4)),
        series("bottleneck_gpu_pcie_link_width", labels, gauge(tl, v["width"], b["width"])),
        series("bottleneck_gpu_pcie_link_max_width", labels, gauge(tl, 16)),
        # Benign reasons are active on every busy GPU; the rules must ignore them.
        series("bottleneck_gpu_clock_event_active", {**labels, "reason": "sw_power_cap"}, gauge(tl, 1)),
        series("bottleneck_gpu_clock_event_active", {**labels, "reason": "gpu_idle"}, gauge(tl, 0)),
        series("bottleneck_gpu_clock_event_active", {**labels, "reason": "hw_thermal_slowdown"},
               [pattern_value(b["thermal"] if tl.before(m) else v["thermal"], m) for m in range(tl.length + 1)]),
        series("bottleneck_gpu_ecc_errors_total", {**labels, "type": "corrected"}, counter(tl, 0.05, 0.05)),
    ]
    return out


def pattern_value(share: float, minute: int) -> float:
    """1 in ``share`` of the minutes (share 1/n: every n-th minute), else 0: a flickering 0/1 gauge."""
    if share <= 0:
        return 0.0
    if share >= 1:
        return 1.0
    period = round(1 / share)
    return 1.0 if minute % period == 0 else 0.0


def ecc_uncorrected(tl: Timeline, errors_at: Sequence[int], index: str = "0",
                    instance: str = INSTANCE) -> list[Series]:
    labels = {"instance": instance, "job": EXPORTER_JOB, "gpu": index, "uuid": f"GPU-5e1f7c3a-000{index}",
              "type": "uncorrected"}
    track: Track = []
    total = 0.0
    for m in range(tl.length + 1):
        total += 2 * errors_at.count(m)
        track.append(total)
    return [series("bottleneck_gpu_ecc_errors_total", labels, track)]


def rank(tl: Timeline, rank_: str = "0", instance: str = INSTANCE, training_job: str = TRAIN_JOB, step: float = 0.5,
         data_wait: float = 0.05, forward: float = 0.15, optimizer: float = 0.05, gpu_busy: float = 0.8,
         num_workers: int = 4, stall: tuple[int, int] | None = None, device: str = "cuda:0", between: float = 0.0,
         collective: float | None = None) -> list[Series]:
    """One training rank as the push receiver exposes the hook's telemetry; absent before the start.

    Times are seconds per step; backward is the rest of the step after ``between`` (the rank's own code
    outside the phases); ``collective`` (seconds per step in collectives, inside backward) only where given,
    as only hooks that measure it report it. ``stall`` = (first minute without steps, minute steps resume)."""
    labels = {"instance": instance, "job": EXPORTER_JOB, "training_job": training_job, "rank": rank_}

    def stalled(m: int) -> bool:
        return stall is not None and stall[0] <= m < stall[1]

    def progressing(per_second: float) -> Track:
        track: Track = []
        total = 0.0
        for m in range(tl.length + 1):
            if tl.before(m):
                track.append(None)
                continue
            if m > tl.start and not stalled(m):
                total = round(total + per_second * 60, 6)
            track.append(total)
        return track

    last_step: Track = []
    last = 0.0
    for m in range(tl.length + 1):
        if not tl.before(m) and not stalled(m):
            last = m * 60.0
        last_step.append(None if tl.before(m) else last)
    backward = round(step - data_wait - forward - optimizer - between, 9)
    phases = [("data_wait", data_wait), ("forward", forward), ("backward", backward), ("optimizer", optimizer),
              ("step", step)]
    out = [
        series("bottleneck_train_phase_seconds_total", {**labels, "phase": phase}, progressing(seconds / step))
        for phase, seconds in phases
    ]
    if collective is not None:  # seconds per step with an all-reduce in flight (overlaps backward)
        out.append(series("bottleneck_train_phase_seconds_total", {**labels, "phase": "collective"},
                          progressing(collective / step)))
    out += [
        series("bottleneck_train_steps_total", labels, progressing(1 / step)),
        series("bottleneck_train_step_duration_seconds_sum", labels, progressing(1.0)),
        series("bottleneck_train_step_duration_seconds_count", labels, progressing(1 / step)),
        series("bottleneck_train_gpu_busy_seconds_total", labels, progressing(gpu_busy)),
        series("bottleneck_train_gpu_idle_seconds_total", labels, progressing(1 - gpu_busy)),
        series("bottleneck_train_last_step_timestamp_seconds", labels, last_step),
        series("bottleneck_train_dataloader_num_workers", labels,
               [None if tl.before(m) else float(num_workers) for m in range(tl.length + 1)]),
        series("bottleneck_train_info", {**labels, "local_rank": rank_, "world_size": "1", "device": device},
               [None if tl.before(m) else 1.0 for m in range(tl.length + 1)]),
    ]
    return out


def process(tl: Timeline, instance: str = INSTANCE, training_job: str = TRAIN_JOB, local_rank: str = "0",
            main: float = 0.4, worker: float = 0.5, workers: int = 4, alive_until: int | None = None,
            workers_cpu: float | None = None) -> list[Series]:
    """A training process as the training collector sees it from /proc; absent before the start.

    ``worker`` is the busiest worker thread's share of a core; ``workers_cpu`` (cores, all workers
    together) adds the workers' CPU time counter."""
    target = {"instance": instance, "job": EXPORTER_JOB}
    proc = {"process": "train.py", "local_rank": local_rank}

    def present(value: float) -> Track:
        return [None if tl.before(m) or (alive_until is not None and m >= alive_until) else value
                for m in range(tl.length + 1)]

    out = [
        series("bottleneck_training_process_info", {**target, "training_job": training_job, **proc,
                                                    "discovered_by": "hook"}, present(1)),
        series("bottleneck_training_busiest_thread_cpu_ratio", {**target, **proc, "role": "main"}, present(main)),
        series("bottleneck_training_dataloader_workers_found", {**target, **proc}, present(workers)),
    ]
    if workers:
        out.append(series("bottleneck_training_busiest_thread_cpu_ratio", {**target, **proc, "role": "data_worker"},
                          present(worker)))
    if workers_cpu is not None:
        cpu = counter(tl, workers_cpu, None, initial=10)
        out.append(series("bottleneck_training_cpu_seconds_total",
                          {**target, **proc, "role": "data_worker", "mode": "user"},
                          [None if alive_until is not None and m >= alive_until else c for m, c in enumerate(cpu)]))
    return out


def ddp_job(tl: Timeline, slow_rank_data_wait: float) -> list[Series]:
    """Four DDP ranks on two nodes: the all-reduce evens out their step times (1 s each), so only the
    local work (data wait + forward + optimizer) of rank 3 shows that it is the slow one."""
    return [s for r in range(4)
            for s in rank(tl, rank_=str(r), instance=INSTANCE if r < 2 else INSTANCE_2, step=1.0,
                          data_wait=slow_rank_data_wait if r == 3 else 0.2, forward=0.2, optimizer=0.05)]


def gloo_job(tl: Timeline, rank0_between: float) -> list[Series]:
    """Three gloo ranks on one node, 0.8 s steps: each computes 0.5 s; rank 0 also spends ``rank0_between``
    seconds between steps (logging), which ranks 1 and 2 wait out inside backward's all-reduce."""
    return [s for r in range(3)
            for s in rank(tl, rank_=str(r), step=0.8, data_wait=0.05, forward=0.2, optimizer=0.05,
                          between=rank0_between if r == 0 else 0.0, device="cpu")]


def xid(tl: Timeline, code: str, errors_at: Sequence[int], index: str = "0", instance: str = INSTANCE) -> list[Series]:
    """The gpu collector's XID counter for one GPU and code: 0 until the first event, one more per event."""
    labels = {"instance": instance, "job": EXPORTER_JOB, "gpu": index, "uuid": f"GPU-5e1f7c3a-000{index}", "xid": code}
    return [series("bottleneck_gpu_xid_errors_total", labels,
                   [float(sum(1 for at in errors_at if at <= m)) for m in range(tl.length + 1)])]


def collectors(tl: Timeline, failing: Callable[[int], bool], instance: str = INSTANCE) -> list[Series]:
    target = {"instance": instance, "job": EXPORTER_JOB}
    return [
        series("bottleneck_scrape_collector_success", {**target, "collector": "cpu"}, gauge(tl, 1)),
        series("bottleneck_scrape_collector_success", {**target, "collector": "gpu"},
               [0.0 if failing(m) else 1.0 for m in range(tl.length + 1)]),
    ]


def scrape_up(tl: Timeline, down: Callable[[int], bool], job: str = EXPORTER_JOB,
              instance: str = INSTANCE) -> list[Series]:
    return [series("up", {"instance": instance, "job": job},
                   [0.0 if down(m) else 1.0 for m in range(tl.length + 1)])]


# ---------------------------------------------------------------------------------------------- the table


@dataclasses.dataclass(frozen=True)
class Expect:
    """An alert instance the scenario's tier must produce: its labels (without alertname and severity)
    and, when given, its value (compared to 4 significant digits, as the description shows it)."""

    labels: Mapping[str, str]
    value: float | None = None


@dataclasses.dataclass(frozen=True)
class Scenario:
    alert: str  # heuristic name, e.g. "InputBound"
    severity: str
    kind: str  # fires | near_miss | not_yet
    name: str  # the failure it guards against
    build: Callable[[Timeline], list[Series]]
    expect: tuple[Expect, ...] = ()
    start: int = 10  # not_yet: minute the situation begins
    eval_at: int | None = None  # fires / near_miss: default for: + 7 minutes
    # Raw series the expectation depends on beyond the alert's own (a cause label read from them): a bundle
    # whose sources lack one of them does not run the scenario.
    needs: tuple[str, ...] = ()

    def runs_in(self, bundle: Bundle) -> bool:
        return all(bundle.provides(name) for name in self.needs)

    @property
    def title(self) -> str:
        return f"{self.alert} {self.severity} {self.kind}: {self.name}"


RANK0 = {"instance": INSTANCE, "job": EXPORTER_JOB, "training_job": TRAIN_JOB, "rank": "0"}
NODE1 = {"instance": INSTANCE, "job": EXPORTER_JOB}
GPU0 = {**NODE1, "gpu": "0", "uuid": "GPU-5e1f7c3a-0000"}
PROC0 = {**NODE1, "process": "train.py", "local_rank": "0"}
NO_CAUSE = "none of its node's signals stands out: work only this rank does"


def straggler(instance: str, rank_: str, phase: str, cause: str) -> dict[str, str]:
    """The labels of a StragglerRank alert: the rank, where its extra time goes, what its node shows."""
    return {"instance": instance, "job": EXPORTER_JOB, "training_job": TRAIN_JOB, "rank": rank_, "phase": phase,
            "cause": cause}


def _s(alert: str, kind: str, name: str, build: Callable[[Timeline], list[Series]], *expect: Expect,
       severity: str = "warning", start: int = 10, eval_at: int | None = None, needs: tuple[str, ...] = ()) -> Scenario:
    return Scenario(alert, severity, kind, name, build, tuple(expect), start, eval_at, needs)


def _cases() -> list[Scenario]:
    e = Expect
    return [
        # -- input-bound ------------------------------------------------------------------------------
        _s("InputBound", FIRES, "num_workers_0_rank_waits_80pct_of_each_step",
           lambda t: rank(t, data_wait=0.4, forward=0.04, optimizer=0.01) + node(t) + process(t, main=1.0, workers=0),
           e(RANK0, 0.8)),
        _s("InputBound", NEAR_MISS, "data_wait_45pct_just_below_threshold",
           lambda t: rank(t, data_wait=0.225, forward=0.1) + node(t) + process(t)),
        _s("InputBound", NEAR_MISS, "storage_saturated_is_io_bound_not_input_bound",
           lambda t: rank(t, data_wait=0.4, forward=0.04, optimizer=0.01) + node(t, disk_busy=0.95)
           + process(t, worker=0.2)),
        _s("InputBound", NOT_YET, "job_started_3m_ago_already_input_bound",
           lambda t: rank(t, data_wait=0.4, forward=0.04, optimizer=0.01) + node(t) + process(t, main=1.0, workers=0),
           e(RANK0, 0.8)),
        _s("LoaderSaturated", FIRES, "num_workers_0_main_thread_pegged_gpu_idle",
           lambda t: process(t, main=0.98, workers=0) + gpu(t, util=0.1), e(PROC0, 0.98)),
        _s("LoaderSaturated", NEAR_MISS, "busy_workers_feed_a_busy_gpu",
           lambda t: process(t, worker=0.95) + gpu(t, util=0.6)),
        _s("LoaderSaturated", NEAR_MISS, "main_thread_busy_dispatching_with_workers_present",
           lambda t: process(t, main=1.0, worker=0.3) + gpu(t, util=0.1)),
        _s("LoaderSaturated", FIRES, "eight_workers_share_two_saturated_cores_while_the_gpu_idles",
           lambda t: process(t, worker=0.25, workers=8, workers_cpu=1.9) + node(t, cpus=2, busy=0.98, iowait=0.0)
           + gpu(t, util=0.1), e(PROC0)),
        _s("LoaderSaturated", NEAR_MISS, "workers_share_saturated_cores_while_the_gpu_computes",
           lambda t: process(t, worker=0.25, workers=8, workers_cpu=1.9) + node(t, cpus=2, busy=0.98, iowait=0.0)
           + gpu(t, util=0.6)),
        _s("LoaderSaturated", NEAR_MISS, "other_processes_saturate_the_cores_not_the_loaders",
           lambda t: process(t, worker=0.2, workers=2, workers_cpu=0.3) + node(t, cpus=2, busy=0.98, iowait=0.0)
           + gpu(t, util=0.1)),
        _s("LoaderSaturated", NOT_YET, "trainer_started_recently",
           lambda t: process(t, main=0.98, workers=0) + gpu(t, util=0.1), e(PROC0, 0.98)),
        _s("IoBound", FIRES, "dataset_on_saturated_disk_loaders_idle",
           lambda t: rank(t, data_wait=0.4, forward=0.04, optimizer=0.01) + node(t, disk_busy=0.95)
           + process(t, worker=0.2), e(RANK0, 0.8)),
        _s("IoBound", FIRES, "network_filesystem_stalls_show_as_io_pressure",
           lambda t: rank(t, data_wait=0.3, forward=0.1, optimizer=0.05) + node(t, io_pressure=0.6)
           + process(t, worker=0.1), e(RANK0, 0.6)),
        _s("IoBound", NEAR_MISS, "disk_busy_but_loaders_cpu_bound",
           lambda t: rank(t, data_wait=0.4, forward=0.04, optimizer=0.01) + node(t, disk_busy=0.95)
           + process(t, worker=0.95)),
        _s("IoBound", NOT_YET, "job_started_on_a_saturated_disk",
           lambda t: rank(t, data_wait=0.4, forward=0.04, optimizer=0.01) + node(t, disk_busy=0.95)
           + process(t, worker=0.2), e(RANK0, 0.8)),
        _s("GpuSawtooth", FIRES, "gpu_idle_40pct_busy_50pct_of_samples",
           lambda t: gpu(t, util=0.55, idle_samples=0.4, busy_samples=0.5), e(GPU0, 0.4), severity="info"),
        _s("GpuSawtooth", NEAR_MISS, "flat_low_line_is_not_a_sawtooth",
           lambda t: gpu(t, util=0.3, idle_samples=0.05, busy_samples=0.0), severity="info"),
        _s("GpuSawtooth", NOT_YET, "sawtooth_began_after_a_flat_busy_phase",
           lambda t: gpu(t, idle_samples=0.4, busy_samples=0.5, before={"idle_samples": 0.0, "busy_samples": 1.0}),
           e(GPU0), severity="info"),
        # -- CPU --------------------------------------------------------------------------------------
        _s("CpuSaturated", FIRES, "cores_95pct_busy_gpu_underfed",
           lambda t: node(t, busy=0.95, iowait=0.0) + gpu(t, util=0.2) + process(t), e(NODE1, 0.95)),
        _s("CpuSaturated", FIRES, "cpu_job_waits_for_data_on_saturated_cores",
           lambda t: node(t, busy=0.96, iowait=0.0) + rank(t, data_wait=0.2, device="cpu") + process(t),
           e(NODE1, 0.96)),
        _s("CpuSaturated", FIRES, "psi_cpu_shows_tasks_queueing_for_the_cores",
           lambda t: node(t, busy=0.95, iowait=0.0, cpu_pressure=0.7) + process(t), e(NODE1, 0.95)),
        _s("CpuSaturated", FIRES, "runqueue_wait_shows_tasks_queueing_for_the_cores",
           lambda t: node(t, busy=0.95, iowait=0.0, runqueue=0.6) + process(t), e(NODE1, 0.95)),
        _s("CpuSaturated", NEAR_MISS, "cpu_only_job_uses_every_core_for_its_own_compute",
           lambda t: node(t, busy=0.97, iowait=0.0, runqueue=0.05) + rank(t, data_wait=0.02, device="cpu")
           + process(t)),
        _s("CpuSaturated", NEAR_MISS, "saturated_and_queueing_but_no_job_trains_on_the_node",
           lambda t: node(t, busy=0.97, iowait=0.0, cpu_pressure=0.9) + gpu(t, util=0.2)),
        _s("CpuSaturated", NEAR_MISS, "cores_88pct_busy",
           lambda t: node(t, busy=0.88, iowait=0.0) + gpu(t, util=0.2) + process(t)),
        _s("CpuSaturated", NEAR_MISS, "iowait_is_not_busy",
           lambda t: node(t, busy=0.6, iowait=0.38) + gpu(t, util=0.2) + process(t)),
        _s("CpuSaturated", NOT_YET, "cores_became_busy_recently",
           lambda t: node(t, busy=0.98, iowait=0.0, before={"busy": 0.3}) + gpu(t, util=0.2) + process(t),
           e(NODE1)),
        _s("CpuOverloaded", FIRES, "load_12_on_4_cpus", lambda t: node(t, cpus=4, load=12.0) + process(t),
           e(NODE1, 3.0)),
        _s("CpuOverloaded", NEAR_MISS, "load_5_6_on_4_cpus", lambda t: node(t, cpus=4, load=5.6) + process(t)),
        _s("CpuOverloaded", NEAR_MISS, "load_12_on_4_cpus_but_no_job_trains_on_the_node",
           lambda t: node(t, cpus=4, load=12.0)),
        _s("CpuOverloaded", NOT_YET, "load_rose_recently",
           lambda t: node(t, cpus=4, load=12.0, before={"load": 2.0}) + process(t), e(NODE1, 3.0)),
        _s("DataLoaderWorkersExceedCpus", FIRES, "two_ranks_with_8_workers_on_8_cpus",
           lambda t: node(t) + rank(t, num_workers=8) + rank(t, rank_="1", num_workers=8),
           e({"instance": INSTANCE}, 16)),
        _s("DataLoaderWorkersExceedCpus", FIRES, "workers_found_by_proc_scan_without_hook",
           lambda t: node(t) + process(t, workers=12), e({"instance": INSTANCE}, 12)),
        _s("DataLoaderWorkersExceedCpus", NEAR_MISS, "two_ranks_with_4_workers_fill_8_cpus_exactly",
           lambda t: node(t) + rank(t, num_workers=4) + rank(t, rank_="1", num_workers=4)),
        _s("DataLoaderWorkersExceedCpus", NOT_YET, "ranks_started_recently",
           lambda t: node(t) + rank(t, num_workers=8) + rank(t, rank_="1", num_workers=8),
           e({"instance": INSTANCE}, 16)),
        _s("ContextSwitchStorm", FIRES, "30k_switches_per_cpu_second",
           lambda t: node(t, ctx_per_cpu=30000) + process(t), e(NODE1, 30000), severity="info"),
        _s("ContextSwitchStorm", NEAR_MISS, "15k_switches_per_cpu_second",
           lambda t: node(t, ctx_per_cpu=15000) + process(t), severity="info"),
        _s("ContextSwitchStorm", NEAR_MISS, "storm_on_a_node_where_no_job_trains",
           lambda t: node(t, ctx_per_cpu=30000), severity="info"),
        _s("ContextSwitchStorm", NOT_YET, "storm_began_recently",
           lambda t: node(t, ctx_per_cpu=40000, before={"ctx_per_cpu": 2000}) + process(t), e(NODE1), severity="info"),
        # -- memory -----------------------------------------------------------------------------------
        _s("MemoryPressure", FIRES, "8pct_of_ram_available", lambda t: node(t, mem_available=0.08) + process(t),
           e(NODE1, 0.08)),
        _s("MemoryPressure", FIRES, "psi_memory_stalls_15pct_with_30pct_of_ram_available",
           lambda t: node(t, mem_available=0.3, memory_pressure=0.15) + process(t), e(NODE1, 0.3)),
        _s("MemoryPressure", NEAR_MISS, "12pct_of_ram_available", lambda t: node(t, mem_available=0.12) + process(t)),
        _s("MemoryPressure", NEAR_MISS, "psi_memory_stalls_5pct",
           lambda t: node(t, mem_available=0.3, memory_pressure=0.05) + process(t)),
        _s("MemoryPressure", NEAR_MISS, "8pct_of_ram_available_but_no_job_trains_on_the_node",
           lambda t: node(t, mem_available=0.08)),
        _s("MemoryPressure", NOT_YET, "memory_filled_recently",
           lambda t: node(t, mem_available=0.08, before={"mem_available": 0.5}) + process(t), e(NODE1, 0.08)),
        _s("MemoryPressure", FIRES, "3pct_of_ram_available_oom_close",
           lambda t: node(t, mem_available=0.03) + process(t), e(NODE1, 0.03), severity="critical"),
        _s("MemoryPressure", FIRES, "psi_memory_stalls_40pct",
           lambda t: node(t, mem_available=0.3, memory_pressure=0.4) + process(t), e(NODE1, 0.3),
           severity="critical"),
        _s("MemoryPressure", NEAR_MISS, "6pct_of_ram_available_is_only_a_warning",
           lambda t: node(t, mem_available=0.06) + process(t), severity="critical"),
        _s("MemoryPressure", NEAR_MISS, "psi_memory_stalls_15pct_is_only_a_warning",
           lambda t: node(t, mem_available=0.3, memory_pressure=0.15) + process(t), severity="critical"),
        _s("MemoryPressure", NOT_YET, "memory_exhausted_recently",
           lambda t: node(t, mem_available=0.03, before={"mem_available": 0.5}) + process(t), e(NODE1, 0.03),
           severity="critical"),
        _s("Swapping", FIRES, "200_pages_per_second_swapped", lambda t: node(t, swap=200) + process(t),
           e(NODE1, 200)),
        _s("Swapping", NEAR_MISS, "80_pages_per_second_swapped", lambda t: node(t, swap=80) + process(t)),
        _s("Swapping", NEAR_MISS, "swapping_on_a_node_where_no_job_trains", lambda t: node(t, swap=200)),
        _s("Swapping", NOT_YET, "swapping_began_recently",
           lambda t: node(t, swap=500, before={"swap": 0}) + process(t), e(NODE1)),
        # -- GPU memory and launch ---------------------------------------------------------------------
        _s("GpuMemoryUnderused", FIRES, "batch_too_small_20pct_memory_40pct_util",
           lambda t: gpu(t, mem=0.2, util=0.4) + rank(t) + node(t), e(GPU0, 0.2), severity="info"),
        _s("GpuMemoryUnderused", NEAR_MISS, "spare_gpu_not_used_by_the_job",
           lambda t: gpu(t, mem=0.01, util=0.0) + rank(t) + node(t), severity="info"),
        _s("GpuMemoryUnderused", NEAR_MISS, "small_batch_but_gpu_85pct_busy",
           lambda t: gpu(t, mem=0.2, util=0.85) + rank(t) + node(t), severity="info"),
        _s("GpuMemoryUnderused", NOT_YET, "training_started_recently",
           lambda t: gpu(t, mem=0.2, util=0.4, before={"mem": 0.0, "util": 0.0}) + rank(t) + node(t),
           e(GPU0, 0.2), severity="info"),
        _s("GpuMemoryNearlyFull", FIRES, "97pct_of_gpu_memory_used", lambda t: gpu(t, mem=0.97), e(GPU0, 0.97)),
        _s("GpuMemoryNearlyFull", NEAR_MISS, "94pct_of_gpu_memory_used", lambda t: gpu(t, mem=0.94)),
        _s("GpuMemoryNearlyFull", NOT_YET, "batch_size_raised_recently",
           lambda t: gpu(t, mem=0.97, before={"mem": 0.6}), e(GPU0, 0.97)),
        _s("LaunchBound", FIRES, "tiny_kernels_gpu_35pct_busy_no_data_wait",
           lambda t: rank(t, data_wait=0.01) + gpu(t, util=0.35) + node(t, busy=0.4),
           e(RANK0, 0.35), severity="info"),
        _s("LaunchBound", NEAR_MISS, "gpu_55pct_busy", lambda t: rank(t, data_wait=0.01) + gpu(t, util=0.55) + node(t),
           severity="info"),
        _s("LaunchBound", NEAR_MISS, "cpu_saturated_explains_the_idle_gpu",
           lambda t: rank(t, data_wait=0.01) + gpu(t, util=0.35) + node(t, busy=0.95, iowait=0.0), severity="info"),
        _s("LaunchBound", NEAR_MISS, "cpu_training_job_next_to_idle_gpus",
           lambda t: rank(t, data_wait=0.01, device="cpu") + gpu(t, util=0.0) + node(t), severity="info"),
        _s("LaunchBound", NOT_YET, "job_started_recently",
           lambda t: rank(t, data_wait=0.01) + gpu(t, util=0.35) + node(t), e(RANK0, 0.35), severity="info"),
        # -- GPU health -------------------------------------------------------------------------------
        _s("GpuThrottled", FIRES, "hw_thermal_slowdown_active_all_the_time", lambda t: gpu(t, thermal=1.0),
           e(GPU0, 1.0)),
        _s("GpuThrottled", NEAR_MISS, "thermal_slowdown_flickers_one_scrape_in_six_power_cap_benign",
           lambda t: gpu(t, thermal=1 / 6)),
        _s("GpuThrottled", NOT_YET, "fan_failed_recently", lambda t: gpu(t, thermal=1.0, before={"thermal": 0.0}),
           e(GPU0)),
        _s("GpuTooHot", FIRES, "88c_with_slowdown_at_90c", lambda t: gpu(t, temp=88), e(GPU0, 88)),
        _s("GpuTooHot", NEAR_MISS, "84c_with_slowdown_at_90c", lambda t: gpu(t, temp=84)),
        _s("GpuTooHot", NOT_YET, "temperature_rose_recently", lambda t: gpu(t, temp=89, before={"temp": 70}),
           e(GPU0, 89)),
        _s("PcieDegraded", FIRES, "x16_card_running_x8_under_load", lambda t: gpu(t, width=8, util=0.9),
           e(GPU0, 0.5)),
        _s("PcieDegraded", NEAR_MISS, "idle_gpu_link_drops_to_gen1_by_design", lambda t: gpu(t, gen=1, util=0.0)),
        _s("PcieDegraded", NOT_YET, "link_retrained_to_x4_recently",
           lambda t: gpu(t, width=4, util=0.9, before={"width": 16}), e(GPU0, 0.25)),
        # -- cross-node -------------------------------------------------------------------------------
        _s("GpuImbalance", FIRES, "rank_on_second_node_gpu_30pct_busy_vs_90pct",
           lambda t: rank(t, gpu_busy=0.9) + rank(t, rank_="1", instance=INSTANCE_2, gpu_busy=0.3),
           e({"training_job": TRAIN_JOB}, 0.6)),
        _s("GpuImbalance", NEAR_MISS, "ranks_90pct_and_60pct_busy",
           lambda t: rank(t, gpu_busy=0.9) + rank(t, rank_="1", instance=INSTANCE_2, gpu_busy=0.6)),
        _s("GpuImbalance", NOT_YET, "imbalanced_job_started_recently",
           lambda t: rank(t, gpu_busy=0.9) + rank(t, rank_="1", instance=INSTANCE_2, gpu_busy=0.3),
           e({"training_job": TRAIN_JOB}, 0.6)),
        _s("StragglerRank", FIRES, "ddp_rank_3_slow_loader_shows_in_own_work_not_step_time",
           lambda t: ddp_job(t, slow_rank_data_wait=0.4),
           e(straggler(INSTANCE_2, "3", "data_wait", NO_CAUSE), 0.65 / 0.45)),
        _s("StragglerRank", FIRES, "independent_rank_1_steps_1_5x_slower",
           lambda t: [s for r in range(4) for s in rank(t, rank_=str(r), instance=INSTANCE if r != 1 else INSTANCE_2,
                                                       step=1.5 if r == 1 else 1.0, data_wait=0.1, forward=0.3,
                                                       optimizer=0.1)],
           e(straggler(INSTANCE_2, "1", "backward", NO_CAUSE), 1.5)),
        _s("StragglerRank", FIRES, "gloo_rank_0_logs_between_steps_while_its_peers_wait_in_backward",
           lambda t: gloo_job(t, rank0_between=0.3), e(straggler(INSTANCE, "0", "between_phases", NO_CAUSE), 2.0)),
        _s("StragglerRank", FIRES, "rank_reporting_collective_waits_least_its_gpu_throttled",
           lambda t: [s for r in range(3) for s in rank(
               t, rank_=str(r), instance=INSTANCE_2 if r == 2 else INSTANCE, step=1.0, data_wait=0.05,
               forward=0.45 if r == 2 else 0.25, optimizer=0.05, collective=0.05 if r == 2 else 0.25)]
           + gpu(t, instance=INSTANCE_2, thermal=1.0),
           e(straggler(INSTANCE_2, "2", "forward", "a GPU of its node is throttled (thermal, HW slowdown or power "
                       "brake)"), 0.95 / 0.75), needs=("bottleneck_gpu_clock_event_active",)),
        _s("StragglerRank", NEAR_MISS, "rank_3_own_work_1_1x_median",
           lambda t: ddp_job(t, slow_rank_data_wait=0.25)),
        _s("StragglerRank", NEAR_MISS, "gloo_rank_0_logs_0_05s_between_steps",
           lambda t: gloo_job(t, rank0_between=0.05)),
        _s("StragglerRank", NOT_YET, "straggler_job_started_recently",
           lambda t: ddp_job(t, slow_rank_data_wait=0.4),
           e(straggler(INSTANCE_2, "3", "data_wait", NO_CAUSE), 0.65 / 0.45)),
        _s("NetworkBound", FIRES, "eth0_receives_at_95pct_of_10gbe", lambda t: node(t, nic=0.95) + process(t),
           e({**NODE1, "device": "eth0"}, 0.95)),
        _s("NetworkBound", NEAR_MISS, "eth0_at_85pct", lambda t: node(t, nic=0.85) + process(t)),
        _s("NetworkBound", NEAR_MISS, "backup_fills_eth0_on_a_node_where_no_job_trains", lambda t: node(t, nic=0.95)),
        _s("NetworkBound", NOT_YET, "remote_dataset_read_began_recently",
           lambda t: node(t, nic=0.97, before={"nic": 0.1}) + process(t), e({**NODE1, "device": "eth0"})),
        _s("CommunicationBound", FIRES, "big_model_tiny_batch_allreduce_in_flight_70pct_of_the_step",
           lambda t: rank(t, step=1.0, data_wait=0.02, forward=0.1, optimizer=0.03, collective=0.7),
           e(RANK0, 0.7)),
        _s("CommunicationBound", NEAR_MISS, "allreduce_hidden_behind_backward_45pct_of_the_step",
           lambda t: rank(t, step=1.0, data_wait=0.02, forward=0.2, optimizer=0.03, collective=0.45)),
        _s("CommunicationBound", NOT_YET, "communication_bound_job_started_recently",
           lambda t: rank(t, step=1.0, data_wait=0.02, forward=0.1, optimizer=0.03, collective=0.7),
           e(RANK0, 0.7)),
        # -- stalls -----------------------------------------------------------------------------------
        _s("TrainingStalled", FIRES, "hung_in_allreduce_9m_without_a_step",
           lambda t: rank(t, stall=(3, 10**6)) + process(t), e(RANK0, 9 * 60), eval_at=11),
        _s("TrainingStalled", NEAR_MISS, "4m_checkpoint_save_is_not_a_stall",
           lambda t: rank(t, stall=(3, 7)) + process(t), eval_at=12),
        _s("TrainingStalled", NEAR_MISS, "30s_steps_silent_8m_is_below_20_mean_steps",
           lambda t: rank(t, step=30.0, stall=(3, 10**6)) + process(t), eval_at=11),
        _s("TrainingStalled", NEAR_MISS, "process_exited_is_not_a_stall",
           lambda t: rank(t, stall=(3, 10**6)) + process(t, alive_until=3), eval_at=11),
        _s("TrainingStalled", NOT_YET, "stalled_just_past_the_threshold",
           lambda t: rank(t, stall=(t.start + 2, 10**6)) + process(t), e(RANK0)),
        _s("TrainingStalled", FIRES, "hung_34m_without_a_step", lambda t: rank(t, stall=(3, 10**6)) + process(t),
           e(RANK0, 34 * 60), severity="critical", eval_at=36),
        _s("TrainingStalled", NEAR_MISS, "stalled_20m_is_only_a_warning",
           lambda t: rank(t, stall=(3, 10**6)) + process(t), severity="critical", eval_at=23),
        _s("TrainingStalled", NEAR_MISS, "process_exited_is_not_a_critical_stall",
           lambda t: rank(t, stall=(3, 10**6)) + process(t, alive_until=3), severity="critical", eval_at=43),
        _s("TrainingStalled", NOT_YET, "stalled_just_past_the_critical_threshold",
           lambda t: rank(t, stall=(t.start + 2, 10**6)) + process(t), e(RANK0), severity="critical"),
        # -- hardware faults --------------------------------------------------------------------------
        _s("GpuLost", FIRES, "gpu_fell_off_the_bus", lambda t: gpu(t, up=0) + gpu(t, index="1"), e(GPU0, 0),
           severity="critical"),
        _s("GpuLost", NEAR_MISS, "one_failed_nvml_answer_then_back",
           lambda t: [*gpu(t, up=1), series("bottleneck_gpu_up", {**GPU0, "gpu": "1", "uuid": "GPU-5e1f7c3a-0001"},
                                            [0.0 if m == 4 else 1.0 for m in range(t.length + 1)])],
           severity="critical"),
        _s("GpuLost", NOT_YET, "gpu_lost_this_minute", lambda t: gpu(t, up=0, before={"up": 1}), e(GPU0, 0),
           severity="critical"),
        _s("GpuUncorrectableErrors", FIRES, "two_uncorrectable_ecc_errors",
           lambda t: gpu(t) + ecc_uncorrected(t, errors_at=[6]), e({**GPU0, "type": "uncorrected"}, 2),
           severity="critical"),
        _s("GpuUncorrectableErrors", NEAR_MISS, "corrected_errors_only", lambda t: gpu(t) + ecc_uncorrected(t, []),
           severity="critical"),
        _s("GpuUncorrectableErrors", NOT_YET, "errors_just_counted",
           lambda t: gpu(t) + ecc_uncorrected(t, errors_at=[t.start]), e({**GPU0, "type": "uncorrected"}),
           severity="critical"),
        _s("GpuXidFatal", FIRES, "xid_79_gpu_fell_off_the_bus", lambda t: gpu(t) + xid(t, "79", [5]),
           e({**GPU0, "xid": "79"}), severity="critical"),
        _s("GpuXidFatal", FIRES, "xid_48_double_bit_ecc_error", lambda t: gpu(t) + xid(t, "48", [4, 6]),
           e({**GPU0, "xid": "48"}), severity="critical"),
        _s("GpuXidFatal", NEAR_MISS, "xid_31_page_fault_is_the_jobs_not_the_gpus",
           lambda t: gpu(t) + xid(t, "31", [5]), severity="critical"),
        _s("GpuXidFatal", NOT_YET, "xid_95_uncontained_ecc_just_reported",
           lambda t: gpu(t) + xid(t, "95", [t.start]), e({**GPU0, "xid": "95"}), severity="critical"),
        _s("GpuXidApplication", FIRES, "xid_31_illegal_memory_access_in_a_job", lambda t: gpu(t) + xid(t, "31", [5]),
           e({**GPU0, "xid": "31"})),
        _s("GpuXidApplication", NEAR_MISS, "xid_79_is_a_fault_of_the_gpu_not_the_job",
           lambda t: gpu(t) + xid(t, "79", [5])),
        _s("GpuXidApplication", NOT_YET, "xid_13_engine_exception_just_reported",
           lambda t: gpu(t) + xid(t, "13", [t.start]), e({**GPU0, "xid": "13"})),
        # -- the monitoring itself --------------------------------------------------------------------
        _s("ExporterDown", FIRES, "exporter_unreachable_for_12m", lambda t: scrape_up(t, lambda m: True),
           e(NODE1, 0), severity="critical"),
        _s("ExporterDown", NEAR_MISS, "scrapes_failed_3m_then_recovered",
           lambda t: scrape_up(t, lambda m: 3 <= m < 6), severity="critical"),
        _s("ExporterDown", NEAR_MISS, "other_jobs_down_do_not_count",
           lambda t: scrape_up(t, lambda m: True, job="node-exporter") + scrape_up(t, lambda m: False),
           severity="critical"),
        _s("ExporterDown", NOT_YET, "exporter_stopped_recently",
           lambda t: scrape_up(t, lambda m: m >= t.start), e(NODE1, 0), severity="critical"),
        _s("ExporterAbsent", FIRES, "scrape_job_named_gpu_nodes_not_bottleneck_exporter",
           lambda t: scrape_up(t, lambda m: False, job="gpu-nodes"), e({"job": EXPORTER_JOB}, 1)),
        _s("ExporterAbsent", NEAR_MISS, "every_exporter_down_is_exporter_down_not_absent",
           lambda t: scrape_up(t, lambda m: True)),
        _s("ExporterAbsent", NOT_YET, "exporters_left_service_discovery_recently",
           lambda t: [series("up", {"instance": INSTANCE, "job": EXPORTER_JOB},
                             [None if m >= t.start else 1.0 for m in range(t.length + 1)])],
           e({"job": EXPORTER_JOB}, 1)),
        _s("CollectorFailing", FIRES, "gpu_collector_fails_every_scrape", lambda t: collectors(t, lambda m: True),
           e({**NODE1, "collector": "gpu"}, 0)),
        _s("CollectorFailing", NEAR_MISS, "gpu_collector_fails_every_other_minute",
           lambda t: collectors(t, lambda m: m % 2 == 0)),
        _s("CollectorFailing", NOT_YET, "gpu_collector_started_failing_recently",
           lambda t: collectors(t, lambda m: m >= t.start), e({**NODE1, "collector": "gpu"}, 0)),
    ]


SCENARIOS: tuple[Scenario, ...] = tuple(_cases())


def for_minutes(alert: str) -> int:
    for heuristic in HEURISTICS:
        if heuristic.name == alert:
            return int(parse_duration(heuristic.for_) // 60)
    raise KeyError(alert)


def store_of(all_series: Sequence[Series]) -> SeriesStore:
    store = SeriesStore()
    for s in all_series:
        store.add(dict(s.labels), s.points())
    return store
