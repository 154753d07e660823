"""The heuristics catalogue: every bottleneck verdict, once, with its PromQL, thresholds and advice.

Everything else is derived from this module: the recording rules (``prometheus/recording-rules.yml``),
the alert rules (``alerts/alert-rules.yml``), ``docs/runbook.md``, the promtool tests (``tests/rules/``),
the dashboards' verdict panels and ``bottleneck-exporter diagnose``.

Templates: ``${name}`` is a parameter (``${name:pct}`` renders 0.5 as 50% in texts), ``<<key>>`` a
recording rule. :func:`resolve` fills them in (parameters may be overridden) and returns concrete rules::

    alert: BottleneckInputBound
    expr: job_rank:bottleneck_train_data_wait:ratio_rate5m > 0.5 unless on (instance) (...)
    labels: {severity: warning}

Label conventions the expressions rely on: per-rank series carry ``training_job`` (the training job's name,
``bottleneck_exporter.push.schema.JOB_LABEL``; never Prometheus' own ``job``, so any ``honor_labels`` setting keeps it)
and ``rank``; every series carries ``instance``; ``job`` is Prometheus' scrape job, read only by the
exporter's own alerts; cross-kind joins (a rank with its node or GPU) match ``on (instance)`` only.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence

from bottleneck_exporter.heuristics import gotemplate
from bottleneck_exporter.heuristics.promql import (
    Aggregate,
    Binary,
    Call,
    Negate,
    Node,
    PromQLError,
    Selector,
    parse,
    parse_duration,
)
from bottleneck_exporter.heuristics.sources import (
    BUNDLES,
    DCGM,
    DEFAULT_BUNDLE,
    NODE_EXPORTER,
    Unreadable,
    dcgm_as_ours,
)

PREFIX = "Bottleneck"
SEVERITIES = ("critical", "warning", "info")
GROUPS = ("training", "node", "gpu", "exporter")


class CatalogueError(ValueError):
    """A bad parameter override or an inconsistent catalogue; the message names the key."""


@dataclasses.dataclass(frozen=True)
class Parameter:
    name: str
    default: float | str
    sentence: str
    kind: str = "number"  # number | duration | regex | text


@dataclasses.dataclass(frozen=True)
class Record:
    """A recording rule: ``key`` is how expressions refer to it (``<<key>>``); ``name`` is a template.

    A record that reads raw series is a *signal*: ``expr`` reads our own collectors, ``sources`` the same
    signal from another exporter (source name → PromQL, same labels and unit as ``expr``). A bundle records
    the first of them whose series its sources provide, always under ``name``. ``parts`` (alternatives
    joined by ``or``) keep only the parts a bundle can read."""

    key: str
    name: str
    expr: str
    group: str
    sources: Mapping[str, str] = dataclasses.field(default_factory=dict)
    parts: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Signal:
    """A quantity the dashboards draw that no rule records (per-core busy, swap activity, GPU power...).

    ``expr`` reads our own series (``${rate_window}`` is its window, ``<<key>>`` a record). A bundle reads it
    through its sources: ``Bundle.rewrite`` swaps each of our series its sources lack for the peer's twin
    (exporter/collectors/coexistence.py), so no peer's metric name is written here; a bundle whose sources
    have no twin has no such signal, and its dashboards say which source it needs."""

    key: str
    expr: str


class MissingSignal(CatalogueError):
    """A bundle cannot draw a signal: ``names`` are the raw series its sources lack."""

    def __init__(self, message: str, names: set[str]) -> None:
        super().__init__(message)
        self.names = names


@dataclasses.dataclass(frozen=True)
class Tier:
    """One severity of a heuristic. ``overrides`` maps a parameter of the expression to the one this
    tier uses instead (a critical twin reads ``memory_available_ratio_critical``)."""

    severity: str
    overrides: Mapping[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Heuristic:
    name: str  # CamelCase, the alert is PREFIX + name
    verdict: str  # what a person reads in a table: "input-bound (data loading)"
    expr: str
    for_: str
    summary: str
    description: str  # Prometheus template; $value is the evidence in ``unit``
    advice: str
    meaning: str  # runbook: what it means and why it matters
    evidence: str  # runbook: what to look at to confirm it
    scope: tuple[str, ...]  # labels that name the subject: ("instance", "training_job", "rank")
    unit: str  # Grafana unit of $value: percentunit, s, celsius, short
    group: str
    tiers: tuple[Tier, ...] = (Tier("warning"),)
    # What the dashboards draw: the recording rules (keys) the alert compares against ``threshold`` (a
    # parameter's name, or a number); none: the dashboards show the alert's state.
    compares: tuple[str, ...] = ()
    threshold: str = ""

    @property
    def alert(self) -> str:
        return PREFIX + self.name

    @property
    def anchor(self) -> str:
        return self.alert.lower()

    @property
    def parameters(self) -> tuple[str, ...]:
        """Parameter names this heuristic reads, including its records' and its tiers' thresholds."""
        names: list[str] = []
        texts = [self.expr, self.description, self.summary, self.advice, self.meaning, self.evidence]
        for key in records_used(self.expr):
            texts.append(RECORDS[key].expr)
            texts.append(RECORDS[key].name)
            texts.extend(RECORDS[key].sources.values())
        for text in texts:
            for name in PARAM.findall(text):
                if name not in names:
                    names.append(name)
        for tier in self.tiers:
            for name in tier.overrides.values():
                if name not in names:
                    names.append(name)
        return tuple(names)


PARAM = re.compile(r"\$\{([a-z0-9_]+)(?::pct)?\}")
RECORD_REF = re.compile(r"<<([a-z0-9_]+)>>")


def _parameters(*params: Parameter) -> dict[str, Parameter]:
    return {p.name: p for p in params}


PARAMETERS: dict[str, Parameter] = _parameters(
    Parameter("rate_window", "5m", "Window of every rate and average. Longer is steadier, shorter reacts "
              "faster; keep it at least four scrape intervals. Recording-rule names end in it.", "duration"),
    Parameter("exporter_job", "bottleneck-exporter", "Prometheus `job` of the scrape config that scrapes "
              "the exporters (BottleneckExporterDown watches `up` of this job).", "text"),
    Parameter("runbook_base_url",
              "https://github.com/bottleneck-exporter/bottleneck-exporter/blob/main/docs/runbook.md",
              "Where docs/runbook.md is published; every alert's runbook_url is this plus `#<alert name in "
              "lower case>`.", "text"),
    Parameter("data_wait_ratio", 0.5, "Share of the step a rank spends waiting for the next batch above "
              "which training is input-bound (the PyTorch profiler already suggests more workers at 5%)."),
    Parameter("loader_busy_ratio", 0.9, "Share of one core above which a loader thread counts as busy: a "
              "DataLoader worker, or the trainer's main thread when it has no workers (num_workers=0)."),
    Parameter("loader_gpu_util_max", 0.3, "GPU-Util below which a node's GPUs count as starved while a "
              "loader thread is busy (BottleneckLoaderSaturated, which needs no hook)."),
    Parameter("io_pressure_ratio", 0.3, "Share of time some task on the node stalls on IO (PSI io some) "
              "above which storage counts as the bottleneck."),
    Parameter("disk_busy_ratio", 0.9, "Share of time a block device is busy (io_time, iostat %util) above "
              "which it counts as saturated."),
    Parameter("sawtooth_idle_le", "0.05", "Upper bound of the GPU-Util sample bucket counted as idle; must "
              "be one of the gpu collector's bucket bounds, written as it appears in `le`.", "text"),
    Parameter("sawtooth_busy_le", "0.8", "Upper bound of the bucket below which samples are not busy; "
              "samples above it count as busy. Must be a bucket bound of the gpu collector.", "text"),
    Parameter("sawtooth_idle_share", 0.25, "Share of GPU-Util samples at or below 5% (the idle bucket) needed "
              "for a sawtooth."),
    Parameter("sawtooth_busy_share", 0.25, "Share of GPU-Util samples above 80% needed for a sawtooth; with "
              "the idle share it tells bursts from a flat low line."),
    Parameter("cpu_busy_ratio", 0.9, "Share of all CPU time that is busy (not idle, not iowait) above "
              "which the node's CPUs are saturated."),
    Parameter("cpu_starved_gpu_util", 0.5, "GPU-Util below which a GPU that holds a job's memory counts as "
              "underfed: with saturated CPUs, the CPUs are then the bottleneck (BottleneckCpuSaturated)."),
    Parameter("cpu_starved_data_wait", 0.2, "Data-wait share of a rank above which saturated CPUs count as "
              "starving its input pipeline (BottleneckCpuSaturated)."),
    Parameter("runqueue_wait_per_cpu", 0.25, "Seconds per second, per CPU, that runnable tasks wait for a "
              "core (/proc/schedstat) above which tasks queue for the CPUs."),
    Parameter("cpu_pressure_ratio", 0.5, "Share of time at least one task waits for a CPU (PSI cpu some) "
              "above which tasks queue for the cores. A job that keeps exactly one thread per core stays well "
              "below it; twice as many runnable threads as cores read near 100%."),
    Parameter("loader_cpu_share", 0.5, "Share of the node's busy CPU time that DataLoader workers must use "
              "for saturated cores to count as the loaders' own (not other processes starving them)."),
    Parameter("load_per_cpu", 1.5, "Load average (1 min) per CPU above which runnable tasks queue for "
              "the cores."),
    Parameter("workers_per_cpu", 1.0, "DataLoader workers (summed over the ranks on a node) per CPU above "
              "which the node is oversubscribed."),
    Parameter("context_switches_per_cpu", 20000, "Context switches per second per CPU above which the "
              "node thrashes between too many threads."),
    Parameter("memory_available_ratio", 0.1, "MemAvailable share of RAM below which the node is short of "
              "memory (warning)."),
    Parameter("memory_available_ratio_critical", 0.05, "MemAvailable share of RAM below which the OOM "
              "killer is close (critical)."),
    Parameter("memory_pressure_ratio", 0.1, "Share of time at least one task stalls on memory (PSI memory "
              "some: reclaim, swap-in, thrashing) above which the node is short of memory (warning), whatever "
              "MemAvailable says. Kernels without PSI leave this condition out."),
    Parameter("memory_pressure_ratio_critical", 0.3, "PSI memory some share above which the memory "
              "shortage is critical."),
    Parameter("swap_pages_per_second", 100, "Pages swapped in plus out per second above which swapping "
              "slows training (4 KiB pages: 100/s is 400 KiB/s of random IO)."),
    Parameter("gpu_memory_underused_ratio", 0.5, "GPU memory share below which a training GPU has room "
              "for a bigger batch."),
    Parameter("gpu_memory_underused_util", 0.7, "GPU-Util below which a GPU with unused memory counts as "
              "underused (a busy GPU with spare memory is fine)."),
    Parameter("gpu_memory_in_use_ratio", 0.02, "GPU memory share below which a GPU counts as not used by "
              "any training process (so idle spare GPUs do not raise BottleneckGpuMemoryUnderused)."),
    Parameter("gpu_memory_full_ratio", 0.95, "GPU memory share above which an out-of-memory error is "
              "close. PyTorch's caching allocator keeps freed blocks, so compare with the hook's peak."),
    Parameter("launch_bound_gpu_util", 0.5, "GPU-Util below which a GPU is underfed although data arrives "
              "in time (small kernels, launch overhead)."),
    Parameter("launch_bound_data_wait", 0.1, "Data-wait share below which input is not the problem."),
    Parameter("throttle_reasons", "sw_thermal_slowdown|hw_thermal_slowdown|hw_slowdown|hw_power_brake_slowdown",
              "Clock-event reasons that cost speed (regex over `reason`). gpu_idle, applications_clocks_setting "
              "and display_clock_setting are benign; sw_power_cap is normal at full load.", "regex"),
    Parameter("throttle_active_ratio", 0.2, "Share of scrapes with a harmful clock-event reason active above "
              "which a GPU counts as throttled."),
    Parameter("gpu_temperature_margin_celsius", 5, "Degrees below the GPU's own slowdown temperature at "
              "which BottleneckGpuTooHot fires."),
    Parameter("pcie_busy_util", 0.5, "GPU-Util above which a PCIe link below its maximum is a fault (links "
              "drop to Gen1 when idle by design)."),
    Parameter("gpu_imbalance_spread", 0.4, "Difference in GPU busy share between the busiest and the "
              "idlest rank of one job above which the job is imbalanced."),
    Parameter("straggler_factor", 1.2, "A rank whose step time, or whose own work per step (the step minus "
              "the time it waits in collectives), exceeds this many times the job's median is a straggler."),
    Parameter("network_saturation_ratio", 0.9, "Share of the link speed above which a NIC is saturated."),
    Parameter("xid_window", "1h", "How long an XID error keeps its alert firing: an XID is one event, "
              "and the GPU stays suspect until someone has looked.", "duration"),
    Parameter("xid_fatal", "48|63|64|74|79|92|94|95|119|120", "XID codes that mean a broken GPU, a GPU off "
              "the bus or one that needs a reset (regex over `xid`); see the runbook of BottleneckGpuXidFatal.",
              "regex"),
    Parameter("xid_application", "13|31|43", "XID codes that mean a job crashed on the GPU (illegal memory "
              "access, engine exception, channel reset): usually the application, sometimes the GPU.",
              "regex"),
    Parameter("collective_ratio", 0.5, "Share of the step a rank has a collective in flight (DDP's gradient "
              "all-reduce, FSDP's all-gather and reduce-scatter, from launch to completion) above which it is "
              "communication-bound. Gradient collectives overlap backward, and backward is about two thirds "
              "of a step's compute: below this share the backward can still hide it."),
    Parameter("stall_factor", 20, "A rank with no finished step for this many times its mean step time is "
              "stalled (warning)."),
    Parameter("stall_min_seconds", 300, "...and for at least this many seconds, so that checkpoints and "
              "evaluation passes do not count as stalls (warning). The push receiver keeps a silent rank's "
              "series while its process runs, if it pushes over the Unix socket; over UDP it forgets the "
              "rank after --push.job-expiry (10m): there keep this plus the alert's for: below that."),
    Parameter("stall_factor_critical", 60, "Step-time multiple without a finished step for the critical "
              "stall alert."),
    Parameter("stall_min_seconds_critical", 1800, "Minimum silence, in seconds, for the critical stall alert: "
              "a hang this long is not a slow checkpoint and holds the job's GPUs for nothing. Needs the Unix "
              "socket (a UDP rank is forgotten after --push.job-expiry)."),
)

W = "${rate_window}"
NODE_CAUSE_JOIN = "\nor on (instance)\n"


def _cpu_busy(metric: str) -> str:
    return (f'1 - (\n  sum without (cpu, mode) (rate({metric}{{mode=~"idle|iowait"}}[{W}]))\n'
            f"  /\n  sum without (cpu, mode) (rate({metric}[{W}]))\n)")


def _cpu_cores(metric: str, op: str) -> str:
    return f'sum without (cpu, mode) (rate({metric}{{mode{op}"idle|iowait"}}[{W}]))'


def _psi(resource: str) -> str:
    return (f'sum without (resource, kind) (rate(bottleneck_pressure_seconds_total{{resource="{resource}", '
            f'kind="some"}}[{W}]))')


def _nic(rx: str, tx: str, speed: str) -> str:
    return f"(\n  rate({rx}[{W}])\n    > rate({tx}[{W}])\n  or rate({tx}[{W}])\n)\n/ ({speed} > 0)"


RECORDS: dict[str, Record] = {r.key: r for r in (
    # Per rank, from the hook's push receiver.
    Record("data_wait", f"job_rank:bottleneck_train_data_wait:ratio_rate{W}",
           f'sum without (phase) (rate(bottleneck_train_phase_seconds_total{{phase="data_wait"}}[{W}]))\n'
           f'/\nsum without (phase) (rate(bottleneck_train_phase_seconds_total{{phase="step"}}[{W}]))',
           "training"),
    Record("step_mean", f"job_rank:bottleneck_train_step_seconds:mean{W}",
           f"rate(bottleneck_train_step_duration_seconds_sum[{W}])\n"
           f"/\nrate(bottleneck_train_step_duration_seconds_count[{W}])", "training"),
    # Host seconds per step this rank waits in its collectives: the hook's collective phase where the rank
    # reports it, else backward (DDP's all-reduce wait sits inside backward, so backward is the proxy).
    Record("collective_wait", f"job_rank:bottleneck_train_collective_wait_seconds:mean{W}",
           f'(\n  sum without (phase) (rate(bottleneck_train_phase_seconds_total{{phase="collective"}}[{W}]))\n'
           f'  or\n  sum without (phase) (rate(bottleneck_train_phase_seconds_total{{phase="backward"}}[{W}]))\n)'
           f"\n/\nrate(bottleneck_train_steps_total[{W}])", "training"),
    Record("gpu_busy", f"job_rank:bottleneck_train_gpu_busy:ratio_rate{W}",
           f"rate(bottleneck_train_gpu_busy_seconds_total[{W}])\n/\n"
           f"(rate(bottleneck_train_gpu_busy_seconds_total[{W}]) + rate(bottleneck_train_gpu_idle_seconds_total[{W}]))",
           "training"),
    Record("step_vs_median", f"job_rank:bottleneck_train_step_seconds:ratio_to_job_median{W}",
           "<<step_mean>>\n/ on (training_job) group_left ()\nquantile by (training_job) (0.5, <<step_mean>>)",
           "training"),
    # In a synchronous job every rank's step is as long as the slowest rank's; what differs is how long
    # each waits for the others. The step minus that wait is the rank's own work, wherever it is spent
    # (in a phase or between phases): the rank the others wait for is the one with the most.
    Record("own_work", f"job_rank:bottleneck_train_own_work_seconds:mean{W}", "<<step_mean>> - <<collective_wait>>",
           "training"),
    Record("own_vs_median", f"job_rank:bottleneck_train_own_work_seconds:ratio_to_job_median{W}",
           "<<own_work>>\n/ on (training_job) group_left ()\nquantile by (training_job) (0.5, <<own_work>>)",
           "training"),
    # Seconds per step in each place a rank's time can go: the named phases (backward without the
    # collective wait where the rank reports it) and between_phases (its own code outside them).
    Record("phase_per_step", f"job_rank_phase:bottleneck_train_phase_seconds:per_step_rate{W}",
           f'rate(bottleneck_train_phase_seconds_total{{phase=~"data_wait|forward|optimizer"}}[{W}])\n'
           f"/ ignoring (phase) group_left ()\nrate(bottleneck_train_steps_total[{W}])\nor\nlabel_replace(\n"
           f'  (\n    rate(bottleneck_train_phase_seconds_total{{phase="backward"}}[{W}])\n'
           f'    - ignoring (phase)\n    rate(bottleneck_train_phase_seconds_total{{phase="collective"}}[{W}])\n  )\n'
           f'  / rate(bottleneck_train_steps_total[{W}]),\n  "phase", "backward", "phase", ".*"\n)\nor\n'
           f'rate(bottleneck_train_phase_seconds_total{{phase="backward"}}[{W}])\n'
           f"/ ignoring (phase) group_left ()\nrate(bottleneck_train_steps_total[{W}])\nor\nlabel_replace(\n"
           f'  (\n    sum without (phase) (rate(bottleneck_train_phase_seconds_total{{phase="step"}}[{W}]))\n'
           f'    - sum without (phase) (rate(bottleneck_train_phase_seconds_total{{phase=~"data_wait|forward|'
           f'backward|optimizer"}}[{W}]))\n  )\n  / rate(bottleneck_train_steps_total[{W}]),\n'
           '  "phase", "between_phases", "phase", ".*"\n)', "training"),
    # Each place's seconds per step above the job's median for it, plus a nanosecond-scale priority per
    # place, so that equal excesses (all zero on a rank like its peers) still have exactly one largest.
    Record("phase_excess", f"job_rank_phase:bottleneck_train_phase_seconds:excess_over_job_median_rate{W}",
           "<<phase_per_step>>\n- on (training_job, phase) group_left ()\n"
           "quantile by (training_job, phase) (0.5, <<phase_per_step>>)"
           "\n+ on (phase) group_left ()\n(\n" + "\n  or ".join(
               f'  label_replace(vector({priority}e-09), "phase", "{place}", "phase", ".*")'.lstrip(" ") if i else
               f'  label_replace(vector({priority}e-09), "phase", "{place}", "phase", ".*")'
               for i, (priority, place) in enumerate(((5, "between_phases"), (4, "data_wait"), (3, "forward"),
                                                      (2, "backward"), (1, "optimizer")))) + "\n)", "training"),
    # Where each rank's time goes beyond its peers': the place with the largest excess (label phase).
    Record("slow_phase", f"job_rank:bottleneck_train_slow_phase:excess_seconds_rate{W}",
           "<<phase_excess>>\n== on (instance, training_job, rank) group_left ()\n"
           "max by (instance, training_job, rank) (<<phase_excess>>)", "training"),
    Record("collective", f"job_rank:bottleneck_train_collective:ratio_rate{W}",
           f'sum without (phase) (rate(bottleneck_train_phase_seconds_total{{phase="collective"}}[{W}]))\n'
           f'/\nsum without (phase) (rate(bottleneck_train_phase_seconds_total{{phase="step"}}[{W}]))',
           "training"),
    # Per node.
    Record("cpu_busy", f"instance:bottleneck_cpu_busy:ratio_rate{W}", _cpu_busy("bottleneck_cpu_seconds_total"), "node",
           {NODE_EXPORTER: _cpu_busy("node_cpu_seconds_total")}),
    Record("cpu_busy_cores", f"instance:bottleneck_cpu_busy_cores:rate{W}",
           _cpu_cores("bottleneck_cpu_seconds_total", "!~"), "node",
           {NODE_EXPORTER: _cpu_cores("node_cpu_seconds_total", "!~")}),
    Record("cpu_free_cores", f"instance:bottleneck_cpu_free_cores:rate{W}",
           _cpu_cores("bottleneck_cpu_seconds_total", "=~"), "node",
           {NODE_EXPORTER: _cpu_cores("node_cpu_seconds_total", "=~")}),
    # node_exporter has no CPU count: it has one idle counter per CPU.
    Record("cpus", "instance:bottleneck_cpus:count", "bottleneck_cpus", "node",
           {NODE_EXPORTER: 'count without (cpu, mode) (node_cpu_seconds_total{mode="idle"})'}),
    Record("cpu_pressure", f"instance:bottleneck_cpu_pressure_some:ratio_rate{W}", _psi("cpu"), "node",
           {NODE_EXPORTER: f"rate(node_pressure_cpu_waiting_seconds_total[{W}])"}),
    Record("memory_pressure", f"instance:bottleneck_memory_pressure_some:ratio_rate{W}", _psi("memory"), "node",
           {NODE_EXPORTER: f"rate(node_pressure_memory_waiting_seconds_total[{W}])"}),
    Record("runqueue_wait", f"instance:bottleneck_cpu_runqueue_wait_per_cpu:ratio_rate{W}",
           f"sum without (cpu) (rate(bottleneck_cpu_runqueue_wait_seconds_total[{W}]))\n/\n<<cpus>>", "node",
           {NODE_EXPORTER: f"sum without (cpu) (rate(node_schedstat_waiting_seconds_total[{W}]))\n/\n<<cpus>>"}),
    Record("load_per_cpu", "instance:bottleneck_load1_per_cpu:ratio", "bottleneck_load1 / <<cpus>>", "node",
           {NODE_EXPORTER: "node_load1 / <<cpus>>"}),
    Record("ctx_per_cpu", f"instance:bottleneck_context_switches_per_cpu:rate{W}",
           f"rate(bottleneck_context_switches_total[{W}]) / <<cpus>>", "node",
           {NODE_EXPORTER: f"rate(node_context_switches_total[{W}]) / <<cpus>>"}),
    Record("mem_available", "instance:bottleneck_memory_available:ratio",
           "bottleneck_memory_available_bytes / bottleneck_memory_total_bytes", "node",
           {NODE_EXPORTER: "node_memory_MemAvailable_bytes / node_memory_MemTotal_bytes"}),
    Record("swap_io", f"instance:bottleneck_memory_swap_io_pages:rate{W}",
           f"rate(bottleneck_memory_swapped_in_pages_total[{W}])\n+\n"
           f"rate(bottleneck_memory_swapped_out_pages_total[{W}])", "node",
           {NODE_EXPORTER: f"rate(node_vmstat_pswpin[{W}])\n+\nrate(node_vmstat_pswpout[{W}])"}),
    Record("io_pressure", f"instance:bottleneck_io_pressure_some:ratio_rate{W}", _psi("io"), "node",
           {NODE_EXPORTER: f"rate(node_pressure_io_waiting_seconds_total[{W}])"}),
    Record("disk_busy", f"instance_device:bottleneck_disk_io_time:ratio_rate{W}",
           f"rate(bottleneck_disk_io_time_seconds_total[{W}])", "node",
           {NODE_EXPORTER: f"rate(node_disk_io_time_seconds_total[{W}])"}),
    Record("net_util", f"instance_device:bottleneck_network_throughput:ratio_rate{W}",
           _nic("bottleneck_network_receive_bytes_total", "bottleneck_network_transmit_bytes_total",
                "bottleneck_network_speed_bytes"), "node",
           {NODE_EXPORTER: _nic("node_network_receive_bytes_total", "node_network_transmit_bytes_total",
                                "node_network_speed_bytes")}),
    # The busiest-thread gauge covers one scrape interval: averaged over the window, so that one scrape in
    # which a pegged loader blocked on a lock does not restart the alerts' for: clock.
    Record("loader_busiest", f"instance_process:bottleneck_training_loader_busiest_thread:ratio_avg{W}",
           'max without (role) (avg_over_time(bottleneck_training_busiest_thread_cpu_ratio{role="data_worker"}'
           f'[{W}]))\nor\nmax without (role) (\n  avg_over_time(bottleneck_training_busiest_thread_cpu_ratio'
           f'{{role="main"}}[{W}])\n'
           "  and on (instance, process, local_rank) (bottleneck_training_dataloader_workers_found == 0)\n)",
           "node"),
    # DataLoader workers' CPU (cores) per training process, and the share of the CPU they could get that
    # they use: their own plus what is left idle. Workers that share saturated cores are each below a full
    # core, yet together they take all there is.
    Record("loader_cpu", f"instance_process:bottleneck_training_loader_cpu:rate{W}",
           'sum without (role, mode) (rate(bottleneck_training_cpu_seconds_total{role="data_worker"}'
           f"[{W}]))", "node"),
    Record("loader_cpu_of_available", f"instance_process:bottleneck_training_loader_cpu:ratio_of_available_rate{W}",
           "<<loader_cpu>>\n/\n(<<loader_cpu>> + on (instance) group_left () <<cpu_free_cores>>)", "node"),
    Record("training_processes", "instance:bottleneck_training_processes:count",
           "count by (instance) (bottleneck_train_info)\nor\ncount by (instance) (bottleneck_training_process_info)",
           "node"),
    # Per GPU.
    Record("gpu_util", f"instance_gpu:bottleneck_gpu_utilization:avg{W}",
           f"avg_over_time(bottleneck_gpu_utilization_ratio[{W}])", "gpu",
           {DCGM: dcgm_as_ours(f"avg_over_time(DCGM_FI_DEV_GPU_UTIL[{W}]) / 100")}),
    Record("gpu_temp", "instance_gpu:bottleneck_gpu_temperature:celsius", "bottleneck_gpu_temperature_celsius", "gpu",
           {DCGM: dcgm_as_ours("DCGM_FI_DEV_GPU_TEMP")}),
    # NVML's total is dcgm-exporter's used + free + reserved (FB_RESERVED is missing before dcgm-exporter 3.3).
    Record("gpu_mem", "instance_gpu:bottleneck_gpu_memory_used:ratio",
           "bottleneck_gpu_memory_used_bytes / bottleneck_gpu_memory_total_bytes", "gpu",
           {DCGM: dcgm_as_ours("DCGM_FI_DEV_FB_USED\n/\n(DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE + "
                        "(DCGM_FI_DEV_FB_RESERVED or 0 * DCGM_FI_DEV_FB_FREE))")}),
    Record("gpu_idle_samples", f"instance_gpu:bottleneck_gpu_utilization_samples_idle:ratio_rate{W}",
           'sum without (le) (rate(bottleneck_gpu_utilization_samples_bucket{le="${sawtooth_idle_le}"}'
           f"[{W}]))\n/\nrate(bottleneck_gpu_utilization_samples_count[{W}])", "gpu"),
    Record("gpu_busy_samples", f"instance_gpu:bottleneck_gpu_utilization_samples_busy:ratio_rate{W}",
           '1 - (\n  sum without (le) (rate(bottleneck_gpu_utilization_samples_bucket{le="${sawtooth_busy_le}"}'
           f"[{W}]))\n  /\n  rate(bottleneck_gpu_utilization_samples_count[{W}])\n)", "gpu"),
    Record("pcie", "instance_gpu:bottleneck_gpu_pcie_link:ratio_of_max",
           "(bottleneck_gpu_pcie_link_generation / bottleneck_gpu_pcie_link_max_generation)\n"
           "*\n(bottleneck_gpu_pcie_link_width / bottleneck_gpu_pcie_link_max_width)", "gpu"),
    Record("throttle", f"instance_gpu:bottleneck_gpu_harmful_clock_events:ratio_avg{W}",
           'max without (reason) (avg_over_time(bottleneck_gpu_clock_event_active{reason=~"${throttle_reasons}"}'
           f"[{W}]))", "gpu"),
    # What a node shows that would slow a rank on it, the first that holds in this order (label cause).
    # Kept in the last recording group: it reads the node and GPU records of the same evaluation.
    # A bundle without a source keeps the other causes (dcgm-exporter's default counters: no XID counter,
    # no clock-event reasons, no PCIe link state).
    Record("node_cause", "instance:bottleneck_node_slowdown_cause:info", "", "gpu", parts=tuple(
        f'label_replace(\n  {condition},\n  "cause", "{cause}", "instance", ".*"\n)' for condition, cause in (
            ("max by (instance) (increase(bottleneck_gpu_xid_errors_total[${xid_window}])) > 0",
             "XID errors on a GPU of its node"),
            ("max by (instance) (<<throttle>>) > ${throttle_active_ratio}",
             "a GPU of its node is throttled (thermal, HW slowdown or power brake)"),
            ("max by (instance) (<<pcie>> < 1 and on (instance, gpu) <<gpu_util>> > ${pcie_busy_util})",
             "a GPU of its node runs on a degraded PCIe link"),
            ("max by (instance) (<<loader_busiest>> or <<loader_cpu_of_available>>) >= ${loader_busy_ratio}",
             "its node's DataLoader workers use all the CPU they can get"),
            ("max by (instance) (<<cpu_pressure>>) > ${cpu_pressure_ratio}",
             "tasks on its node queue for the CPUs (PSI cpu)"),
            ("max by (instance) (<<memory_pressure>>) > ${memory_pressure_ratio}",
             "its node stalls on memory (PSI memory)"),
            ("count by (instance) (bottleneck_train_info)",
             "none of its node's signals stands out: work only this rank does"),
        ))),
)}


def _signals(*signals: tuple[str, str]) -> dict[str, Signal]:
    return {key: Signal(key, expr) for key, expr in signals}


# What the dashboards draw beyond the records, over our own series; every bundle reads them through its sources.
SIGNALS: dict[str, Signal] = _signals(
    # GPUs
    ("gpu_up", "bottleneck_gpu_up"),
    ("gpu_util_samples", f"increase(bottleneck_gpu_utilization_samples_bucket[{W}])"),
    ("gpu_sm_activity", "bottleneck_gpu_sm_activity_ratio"),
    ("gpu_tensor_activity", "bottleneck_gpu_tensor_activity_ratio"),
    ("gpu_slowdown_temp", "bottleneck_gpu_slowdown_temperature_celsius"),
    ("gpu_power", "bottleneck_gpu_power_watts"),
    ("gpu_power_limit", "bottleneck_gpu_power_limit_watts"),
    ("gpu_sm_clock_of_max", 'bottleneck_gpu_clock_hertz{clock="sm"} / bottleneck_gpu_clock_max_hertz{clock="sm"}'),
    ("gpu_clock_events", 'bottleneck_gpu_clock_event_active{reason=~"${throttle_reasons}"}'),
    ("gpu_throttled", f"rate(bottleneck_gpu_throttled_seconds_total[{W}])"),
    ("gpu_pcie_generation", "bottleneck_gpu_pcie_link_generation"),
    ("gpu_pcie_max_generation", "bottleneck_gpu_pcie_link_max_generation"),
    ("gpu_pcie_width", "bottleneck_gpu_pcie_link_width"),
    ("gpu_pcie_max_width", "bottleneck_gpu_pcie_link_max_width"),
    ("gpu_pcie_rx", 'bottleneck_gpu_pcie_throughput_bytes_per_second{direction="rx"}'),
    ("gpu_pcie_tx", 'bottleneck_gpu_pcie_throughput_bytes_per_second{direction="tx"}'),
    ("gpu_ecc_uncorrected", f'increase(bottleneck_gpu_ecc_errors_total{{type="uncorrected"}}[{W}])'),
    ("gpu_pcie_replays", f"increase(bottleneck_gpu_pcie_replays_total[{W}])"),
    ("gpu_process_memory", "bottleneck_gpu_process_memory_used_bytes"),
    # CPUs
    ("cpu_core_busy", f'1 - rate(bottleneck_cpu_seconds_total{{mode="idle"}}[{W}])'),
    ("cpu_mode", f'rate(bottleneck_cpu_seconds_total{{mode!="idle"}}[{W}])'),
    ("load5_per_cpu", "bottleneck_load5 / <<cpus>>"),
    ("runqueue_wait_per_core", f"rate(bottleneck_cpu_runqueue_wait_seconds_total[{W}])"),
    ("context_switches", f"rate(bottleneck_context_switches_total[{W}])"),
    ("procs_running", "bottleneck_procs_running"),
    ("procs_blocked", "bottleneck_procs_blocked"),
    # Memory
    ("swap_in", f"rate(bottleneck_memory_swapped_in_pages_total[{W}])"),
    ("swap_out", f"rate(bottleneck_memory_swapped_out_pages_total[{W}])"),
    ("major_faults", f"rate(bottleneck_memory_major_faults_total[{W}])"),
    ("swap_used", "bottleneck_memory_swap_total_bytes - bottleneck_memory_swap_free_bytes"),
    ("oom_kills", f"increase(bottleneck_memory_oom_kills_total[{W}])"),
    # Disks
    ("disk_read_bytes", f"rate(bottleneck_disk_read_bytes_total[{W}])"),
    ("disk_written_bytes", f"rate(bottleneck_disk_written_bytes_total[{W}])"),
    ("disk_queue", f"rate(bottleneck_disk_io_time_weighted_seconds_total[{W}])"),
    ("disk_read_latency", f"rate(bottleneck_disk_read_time_seconds_total[{W}])\n/\n"
                          f"rate(bottleneck_disk_reads_completed_total[{W}])"),
    # Network
    ("net_rx", f'rate(bottleneck_network_receive_bytes_total{{device!="lo"}}[{W}])'),
    ("net_tx", f'rate(bottleneck_network_transmit_bytes_total{{device!="lo"}}[{W}])'),
    ("ib_rx", f"rate(bottleneck_infiniband_port_received_bytes_total[{W}])"),
    ("ib_tx", f"rate(bottleneck_infiniband_port_transmitted_bytes_total[{W}])"),
    ("net_rx_util", f"rate(bottleneck_network_receive_bytes_total[{W}])\n/ (bottleneck_network_speed_bytes > 0)"),
    ("net_tx_util", f"rate(bottleneck_network_transmit_bytes_total[{W}])\n/ (bottleneck_network_speed_bytes > 0)"),
    ("net_errors", f"rate(bottleneck_network_receive_errors_total[{W}])\n+\n"
                   f"rate(bottleneck_network_transmit_errors_total[{W}])"),
    ("net_drops", f"rate(bottleneck_network_receive_drop_total[{W}])\n+\n"
                  f"rate(bottleneck_network_transmit_drop_total[{W}])"),
)

# The node's storage holds the input back and the loaders are not what is busy.
IO_BLOCKED = (
    "(\n    <<io_pressure>> > ${io_pressure_ratio}\n"
    "    or on (instance) max by (instance) (<<disk_busy>>) > ${disk_busy_ratio}\n  )\n"
    "  unless on (instance) max by (instance) (<<loader_busiest>>) >= ${loader_busy_ratio}"
)
# Node verdicts hold only where a job trains: a saturated CPU or NIC on a node without training is no
# training bottleneck.
TRAINING = "\nand on (instance) <<training_processes>>"
# What each XID the alerts watch means, and what to do (NVIDIA's Xid catalogue, docs.nvidia.com/deploy/xid-errors).
XID_MEANINGS: dict[int, tuple[str, str]] = {
    13: ("Graphics Engine Exception: the job ran an illegal instruction or accessed memory out of range",
         "fix or restart the job; if it recurs with healthy code, run the GPU's diagnostics (dcgmi diag)"),
    31: ("GPU memory page fault: the job accessed an address it does not own (a bug, a bad kernel, or "
         "corrupted memory)", "restart the job; run compute-sanitizer on it; if it recurs across jobs, test "
         "the GPU"),
    43: ("GPU stopped processing: the job's channel hit a fault and was reset (the job crashed or was killed)",
         "restart the job; the GPU itself is fine unless other XIDs come with it"),
    48: ("Double-bit ECC error: memory corruption the GPU could not correct",
         "drain the node, reset the GPU; replace the card if it recurs"),
    63: ("Row remapping event (ECC page retirement): a memory row was marked for remapping",
         "reset the GPU when its jobs end, so the remapping takes effect"),
    64: ("Row remapping or page retirement failed", "drain the node and reset the GPU; the card may need RMA"),
    74: ("NVLink error: a link between GPUs failed", "drain the node, reset the GPUs, check the NVLink bridges "
         "or NVSwitch fabric"),
    79: ("GPU has fallen off the bus: the driver lost contact over PCIe",
         "drain the node and reboot; check the slot, riser, power cables and temperatures"),
    92: ("High single-bit ECC error rate", "watch the ECC counters; plan a replacement if it persists"),
    94: ("Contained ECC error: the affected job was stopped, others go on",
         "restart the job; reset the GPU when it is idle"),
    95: ("Uncontained ECC error: every job on the GPU is affected", "drain the node and reset the GPU"),
    119: ("GSP RPC timeout: the GPU's system processor stopped answering",
          "drain the node, reset the GPU or reboot; update the driver"),
    120: ("GSP error: the GPU's system processor failed", "drain the node, reset the GPU; update the driver"),
}


def _xid_runbook(codes: str) -> str:
    """One line per XID for the runbook: what it means; what to do."""
    return "\n\n" + "\n".join(f"- XID {code}: {XID_MEANINGS[int(code)][0]}. Do: {XID_MEANINGS[int(code)][1]}."
                               for code in codes.split("|"))


RANK = ("instance", "training_job", "rank")
NODE = ("instance",)
GPU = ("instance", "gpu", "uuid")

HEURISTICS: tuple[Heuristic, ...] = (
    Heuristic(
        name="InputBound",
        verdict="input-bound (data loading)",
        expr="<<data_wait>> > ${data_wait_ratio}\nunless on (instance) (\n  " + IO_BLOCKED + "\n)",
        for_="5m",
        summary="Training job {{ $labels.training_job }} is input-bound: the GPU waits for the DataLoader.",
        description="Rank {{ $labels.rank }} of job {{ $labels.training_job }} on {{ $labels.instance }} waits for the "
        "next batch {{ $value | humanizePercentage }} of every step (threshold ${data_wait_ratio:pct}).",
        advice="Raise DataLoader num_workers (4, 8, 16; not above the free cores), set pin_memory=True, "
        "persistent_workers=True and a prefetch_factor; make transforms cheaper or move augmentation to "
        "the GPU.",
        meaning="The training loop spends most of each step inside the DataLoader iterator: the model is "
        "fed slower than it computes. The classic cause is num_workers=0, where the trainer's main thread "
        "decodes and augments every batch itself while the GPU sits idle.",
        evidence="`bottleneck_train_phase_seconds_total{phase=\"data_wait\"}` against `phase=\"step\"` per "
        "rank; the DataLoader settings in `bottleneck_train_dataloader_num_workers` and "
        "`..._pin_memory`; the loader threads' CPU in `bottleneck_training_busiest_thread_cpu_ratio`. When "
        "the node's storage is the cause, BottleneckIoBound fires instead.",
        compares=('data_wait',), threshold="data_wait_ratio",
        scope=RANK, unit="percentunit", group="training",
    ),
    Heuristic(
        name="LoaderSaturated",
        verdict="input-bound (data loading)",
        expr="(\n  <<loader_busiest>> >= ${loader_busy_ratio}\n  or\n"
        "  <<loader_cpu_of_available>> >= ${loader_busy_ratio}\n"
        "  and on (instance) sum by (instance) (<<loader_cpu>>) / on (instance) <<cpu_busy_cores>> "
        ">= ${loader_cpu_share}\n)\nand on (instance)\nmax by (instance) (<<gpu_util>>) < ${loader_gpu_util_max}",
        for_="5m",
        summary="The DataLoader of {{ $labels.process }} on {{ $labels.instance }} uses all the CPU it can get "
        "while the GPUs idle.",
        description="GPU-Util is under ${loader_gpu_util_max:pct} on {{ $labels.instance }} while the loaders of "
        "{{ $labels.process }} (local rank {{ $labels.local_rank }}) use all the CPU they can get: "
        "{{ $value | humanizePercentage }} of a core for the busiest loader thread, or, where the workers "
        "share the cores, of the CPU the node leaves them.",
        advice="Raise DataLoader num_workers (num_workers=0 makes the main thread the loader), set "
        "pin_memory=True and persistent_workers=True; make transforms cheaper or move them to the GPU.",
        meaning="Seen from outside the training process (no hook needed): the GPUs are mostly idle while the "
        "loaders use all the CPU they can get. Either one loader thread is at a full core (a DataLoader worker, "
        "`pt_data_worker`, or the trainer's main thread when no workers exist), or the workers share "
        "saturated cores, each below a full core, taking together at least ${loader_busy_ratio:pct} of the CPU "
        "not used by others and at least ${loader_cpu_share:pct} of the node's busy CPU time.",
        evidence="`bottleneck_training_busiest_thread_cpu_ratio` by role, "
        "`bottleneck_training_cpu_seconds_total{role=\"data_worker\"}` against `bottleneck_cpu_seconds_total`, "
        "`bottleneck_training_dataloader_workers_found`, `bottleneck_gpu_utilization_ratio`.",
        compares=('loader_busiest', 'loader_cpu_of_available'), threshold="loader_busy_ratio",
        scope=("instance", "process", "local_rank"), unit="percentunit", group="node",
    ),
    Heuristic(
        name="IoBound",
        verdict="IO-bound (input blocked on storage)",
        expr="<<data_wait>> > ${data_wait_ratio}\nand on (instance) (\n  " + IO_BLOCKED + "\n)",
        for_="5m",
        summary="Training job {{ $labels.training_job }} waits for storage, not for CPU.",
        description="Rank {{ $labels.rank }} of job {{ $labels.training_job }} on {{ $labels.instance }} waits for the "
        "next batch {{ $value | humanizePercentage }} of every step while its loader threads are not busy "
        "and the node stalls on IO (PSI io above ${io_pressure_ratio:pct} or a disk busy above "
        "${disk_busy_ratio:pct}).",
        advice="Use faster storage (local NVMe instead of network or spinning disks), pack small files into "
        "large shards (WebDataset, TFRecord, HDF5), cache the dataset in RAM, read in parallel.",
        meaning="The input pipeline is blocked, not busy: loaders sleep in reads while the disk or the "
        "network filesystem is saturated. More workers help only up to what the storage delivers.",
        evidence="`bottleneck_pressure_seconds_total{resource=\"io\"}`, "
        "`bottleneck_disk_io_time_seconds_total` per device, `bottleneck_disk_read_bytes_total`, the "
        "loaders' CPU in `bottleneck_training_busiest_thread_cpu_ratio`.",
        compares=('data_wait',), threshold="data_wait_ratio",
        scope=RANK, unit="percentunit", group="training",
    ),
    Heuristic(
        name="GpuSawtooth",
        verdict="GPU waits in bursts (sawtooth utilisation)",
        expr="<<gpu_idle_samples>> > ${sawtooth_idle_share}\nand\n<<gpu_busy_samples>> > ${sawtooth_busy_share}",
        for_="10m",
        summary="GPU {{ $labels.gpu }} on {{ $labels.instance }} alternates between busy and idle.",
        description="{{ $value | humanizePercentage }} of the GPU-Util samples of GPU {{ $labels.gpu }} on "
        "{{ $labels.instance }} are near 0% while more than ${sawtooth_busy_share:pct} are above 80%: the "
        "GPU computes a batch, then waits for the next one.",
        advice="Overlap loading with compute: more DataLoader workers, pin_memory=True with "
        "non_blocking copies, prefetch_factor; see BottleneckInputBound.",
        meaning="A sawtooth (up to ~100%, down to ~0%, repeat) means the GPU is starved between batches; a "
        "15 s average would show a harmless-looking 50%. The sub-second NVML samples reveal the shape.",
        evidence="`bottleneck_gpu_utilization_samples_bucket` (the NVML sub-second samples as a histogram).",
        compares=('gpu_idle_samples',), threshold="sawtooth_idle_share",
        scope=GPU, unit="percentunit", group="gpu", tiers=(Tier("info"),),
    ),
    Heuristic(
        name="CpuSaturated",
        verdict="CPU saturated",
        # Busy CPUs alone are a healthy CPU-only job; they are a bottleneck when something starves for them.
        expr="<<cpu_busy>> > ${cpu_busy_ratio}\nand on (instance) (\n"
        "  max by (instance) (<<gpu_util>> < ${cpu_starved_gpu_util} and <<gpu_mem>> > ${gpu_memory_in_use_ratio})\n"
        "  or max by (instance) (<<data_wait>>) > ${cpu_starved_data_wait}\n"
        "  or max by (instance) (<<runqueue_wait>>) > ${runqueue_wait_per_cpu}\n"
        "  or max by (instance) (<<cpu_pressure>>) > ${cpu_pressure_ratio}\n)" + TRAINING,
        for_="10m",
        summary="The CPUs of {{ $labels.instance }} are saturated and training starves for them.",
        description="{{ $labels.instance }} is {{ $value | humanizePercentage }} busy across all its CPUs "
        "(threshold ${cpu_busy_ratio:pct}) while something starves: a GPU holding a job's memory under "
        "${cpu_starved_gpu_util:pct} busy, a rank waiting for data over ${cpu_starved_data_wait:pct} of its "
        "steps, or tasks queueing for a core (run-queue wait or PSI cpu).",
        advice="Stop competing processes, keep num_workers at or below the free cores, set torch threads "
        "per rank (OMP_NUM_THREADS), move preprocessing to the GPU.",
        meaning="No core is left for the trainer, its loaders or the CUDA driver threads; everything on the "
        "node slows down together. Busy cores alone are no verdict: a CPU-only job that uses every core for "
        "its own compute is healthy. The rule fires only on a node where a job trains and something starves: "
        "underfed GPUs, a rank waiting for data, or tasks queueing for a core (`/proc/schedstat` run-queue "
        "wait, or PSI cpu where the kernel has it).",
        evidence="`bottleneck_cpu_seconds_total` by mode, `bottleneck_training_cpu_seconds_total` by role, "
        "`bottleneck_pressure_seconds_total{resource=\"cpu\"}`, `bottleneck_cpu_runqueue_wait_seconds_total`, "
        "`bottleneck_gpu_utilization_ratio`, the ranks' data wait.",
        compares=('cpu_busy',), threshold="cpu_busy_ratio",
        scope=NODE, unit="percentunit", group="node",
    ),
    Heuristic(
        name="CpuOverloaded",
        verdict="CPU saturated (run queue longer than the cores)",
        expr="<<load_per_cpu>> > ${load_per_cpu}" + TRAINING,
        for_="10m",
        summary="More tasks want to run on {{ $labels.instance }} than it has CPUs.",
        description="The 1-minute load average of {{ $labels.instance }} is {{ $value | humanize }} per CPU "
        "(threshold ${load_per_cpu}).",
        advice="Run fewer processes or threads: lower num_workers and torch threads per rank, move other "
        "jobs off the node.",
        meaning="Runnable (and uninterruptible) tasks queue for the cores; each waits its turn, and the "
        "trainer's step time grows with the queue.",
        evidence="`bottleneck_load1`, `bottleneck_cpus`, `bottleneck_procs_running`, "
        "`bottleneck_cpu_runqueue_wait_seconds_total`.",
        compares=('load_per_cpu',), threshold="load_per_cpu",
        scope=NODE, unit="short", group="node",
    ),
    Heuristic(
        name="DataLoaderWorkersExceedCpus",
        verdict="oversubscribed (more DataLoader workers than CPUs)",
        expr="(\n  sum by (instance) (bottleneck_train_dataloader_num_workers)\n"
        "  or sum by (instance) (bottleneck_training_dataloader_workers_found)\n)\n"
        "> on (instance) ${workers_per_cpu} * max by (instance) (<<cpus>>)",
        for_="10m",
        summary="{{ $labels.instance }} runs more DataLoader workers than it has CPUs.",
        description="{{ $value | humanize }} DataLoader workers run on {{ $labels.instance }} (all ranks "
        "together), more than ${workers_per_cpu} per CPU.",
        advice="Lower num_workers per rank so that workers x ranks on the node stay at or below the cores; "
        "set torch threads per rank accordingly.",
        meaning="Every rank starts num_workers processes; with several ranks per node they multiply and "
        "fight for the cores, so adding workers makes loading slower, not faster.",
        evidence="`bottleneck_train_dataloader_num_workers` per rank, "
        "`bottleneck_training_dataloader_workers_found`, `bottleneck_cpus`.",
        scope=NODE, unit="short", group="node",
    ),
    Heuristic(
        name="ContextSwitchStorm",
        verdict="oversubscribed (context-switch storm)",
        expr="<<ctx_per_cpu>> > ${context_switches_per_cpu}" + TRAINING,
        for_="15m",
        summary="{{ $labels.instance }} switches between threads very often.",
        description="{{ $labels.instance }} makes {{ $value | humanize }} context switches per second per CPU "
        "(threshold ${context_switches_per_cpu}).",
        advice="Fewer threads: lower num_workers, set OMP_NUM_THREADS / torch.set_num_threads per rank so "
        "that ranks x threads fit the cores.",
        meaning="Too many runnable threads share the cores (often intra-op thread pools of every rank and "
        "every worker); time goes to switching and cache misses.",
        evidence="`bottleneck_context_switches_total`, `bottleneck_training_context_switches_total` by "
        "process, `bottleneck_training_threads`.",
        compares=('ctx_per_cpu',), threshold="context_switches_per_cpu",
        scope=NODE, unit="short", group="node", tiers=(Tier("info"),),
    ),
    Heuristic(
        name="MemoryPressure",
        verdict="memory pressure",
        expr="(\n  <<mem_available>> < ${memory_available_ratio}\n  or on (instance)\n"
        "  <<mem_available>> and on (instance) max by (instance) (<<memory_pressure>>) > ${memory_pressure_ratio}"
        "\n)" + TRAINING,
        for_="5m",
        summary="{{ $labels.instance }} is running out of memory.",
        description="Only {{ $value | humanizePercentage }} of the RAM of {{ $labels.instance }} is available "
        "(threshold ${memory_available_ratio:pct}; critical below ${memory_available_ratio_critical:pct}), or "
        "tasks stall on memory more than ${memory_pressure_ratio:pct} of the time (PSI memory; critical above "
        "${memory_pressure_ratio_critical:pct}).",
        advice="Smaller batch, fewer DataLoader workers or a lower prefetch_factor (every worker holds "
        "prefetched batches), share the dataset instead of copying it per worker, add RAM.",
        meaning="The page cache is gone and the kernel reclaims memory from the training processes; next "
        "come swapping and the OOM killer.",
        evidence="`bottleneck_memory_available_bytes`, `bottleneck_pressure_seconds_total{resource=\"memory\"}` "
        "(PSI, where the kernel has it), `bottleneck_training_resident_memory_bytes` per process, "
        "`bottleneck_memory_oom_kills_total`.",
        compares=('mem_available',), threshold="memory_available_ratio",
        scope=NODE, unit="percentunit", group="node",
        tiers=(Tier("warning"), Tier("critical", {"memory_available_ratio": "memory_available_ratio_critical",
                                                  "memory_pressure_ratio": "memory_pressure_ratio_critical"})),
    ),
    Heuristic(
        name="Swapping",
        verdict="memory pressure (swapping)",
        expr="<<swap_io>> > ${swap_pages_per_second}" + TRAINING,
        for_="10m",
        summary="{{ $labels.instance }} is swapping.",
        description="{{ $labels.instance }} swaps {{ $value | humanize }} pages per second in and out "
        "(threshold ${swap_pages_per_second}).",
        advice="Reduce memory use (batch size, num_workers, prefetch_factor, in-RAM caches) or add RAM; "
        "sustained swapping during training is always a bottleneck.",
        meaning="Pages of running processes go to disk and come back: every touch of a swapped page is a "
        "disk read on the training's critical path.",
        evidence="`bottleneck_memory_swapped_in_pages_total`, `bottleneck_memory_swapped_out_pages_total`, "
        "`bottleneck_memory_major_faults_total`.",
        compares=('swap_io',), threshold="swap_pages_per_second",
        scope=NODE, unit="short", group="node",
    ),
    Heuristic(
        name="GpuMemoryUnderused",
        verdict="GPU memory underused",
        expr="<<gpu_mem>> < ${gpu_memory_underused_ratio}\nand <<gpu_mem>> > ${gpu_memory_in_use_ratio}\n"
        "and <<gpu_util>> < ${gpu_memory_underused_util}\nand on (instance) <<training_processes>>",
        for_="15m",
        summary="GPU {{ $labels.gpu }} on {{ $labels.instance }} has room for a bigger batch.",
        description="GPU {{ $labels.gpu }} on {{ $labels.instance }} uses only {{ $value | humanizePercentage }} "
        "of its memory and is less than ${gpu_memory_underused_util:pct} busy while training runs on the "
        "node.",
        advice="Raise the batch size (memory grows about linearly with it; scale the learning rate), or "
        "train a larger model per GPU.",
        meaning="A small batch leaves both memory and compute unused: the GPU finishes each batch quickly "
        "and spends its time on launch overhead and synchronisation.",
        evidence="`bottleneck_gpu_memory_used_bytes` / `..._total_bytes`, `bottleneck_gpu_utilization_ratio`, "
        "`bottleneck_train_dataloader_batch_size`.",
        compares=('gpu_mem',), threshold="gpu_memory_underused_ratio",
        scope=GPU, unit="percentunit", group="gpu", tiers=(Tier("info"),),
    ),
    Heuristic(
        name="GpuMemoryNearlyFull",
        verdict="GPU memory nearly full",
        expr="<<gpu_mem>> > ${gpu_memory_full_ratio}",
        for_="10m",
        summary="GPU {{ $labels.gpu }} on {{ $labels.instance }} is close to running out of memory.",
        description="GPU {{ $labels.gpu }} on {{ $labels.instance }} uses {{ $value | humanizePercentage }} "
        "of its memory (threshold ${gpu_memory_full_ratio:pct}).",
        advice="Risk of CUDA out-of-memory: smaller batch, mixed precision (AMP), activation checkpointing; "
        "check the hook's peak allocation before acting (PyTorch caches freed memory).",
        meaning="The next larger batch, a longer sequence or fragmentation will fail with CUDA OOM. NVML "
        "counts PyTorch's cached blocks as used, so this can also be a full cache with room inside.",
        evidence="`bottleneck_gpu_memory_used_bytes`, `bottleneck_train_cuda_memory_peak_bytes`, "
        "`bottleneck_train_cuda_memory_reserved_bytes`, `bottleneck_gpu_process_memory_used_bytes`.",
        compares=('gpu_mem',), threshold="gpu_memory_full_ratio",
        scope=GPU, unit="percentunit", group="gpu",
    ),
    Heuristic(
        name="LaunchBound",
        verdict="small kernels / launch-bound",
        # Only ranks that train on a GPU: a CPU job next to idle GPUs is not launch-bound.
        expr="0 * (<<data_wait>> < ${launch_bound_data_wait})\n+ on (instance) group_left ()\n"
        "(max by (instance) (<<gpu_util>>) < ${launch_bound_gpu_util})\n"
        "unless on (instance) <<cpu_busy>> > ${cpu_busy_ratio}\n"
        'and on (instance, training_job, rank) bottleneck_train_info{device=~"cuda.*"}',
        for_="15m",
        summary="Job {{ $labels.training_job }} underuses its GPU although data arrives in time.",
        description="No GPU on {{ $labels.instance }} is more than {{ $value | humanizePercentage }} busy while "
        "rank {{ $labels.rank }} of job {{ $labels.training_job }} waits for data less than "
        "${launch_bound_data_wait:pct} of its steps and the CPUs are not saturated.",
        advice="Give the GPU bigger pieces of work: larger batch, CUDA graphs, torch.compile, fused "
        "optimizers; avoid per-step host synchronisation (.item(), .cpu()).",
        meaning="The GPU runs many tiny kernels and spends the gaps waiting for the CPU to launch the next "
        "one: neither input nor CPU is the limit, the launch path is.",
        evidence="`bottleneck_gpu_utilization_ratio`, `bottleneck_gpu_sm_activity_ratio` (Hopper+), the "
        "hook's `bottleneck_train_gpu_busy_seconds_total` and phase times.",
        scope=RANK, unit="percentunit", group="training", tiers=(Tier("info"),),
    ),
    Heuristic(
        name="GpuThrottled",
        verdict="thermal / power throttling",
        expr="<<throttle>> > ${throttle_active_ratio}",
        for_="10m",
        summary="GPU {{ $labels.gpu }} on {{ $labels.instance }} is throttled.",
        description="A harmful clock-event reason (thermal, HW slowdown or power brake) was active on GPU "
        "{{ $labels.gpu }} of {{ $labels.instance }} in {{ $value | humanizePercentage }} of the scrapes.",
        advice="Check cooling and airflow (fans, blocked intakes, ambient temperature), the power supply and "
        "power limits; compare with the node's other GPUs.",
        meaning="The GPU lowers its clocks to protect itself: every kernel runs slower, and in a "
        "data-parallel job the whole job waits for this GPU.",
        evidence="`bottleneck_gpu_clock_event_active` by reason, `bottleneck_gpu_throttled_seconds_total`, "
        "`bottleneck_gpu_temperature_celsius`, `bottleneck_gpu_clock_hertz`.",
        compares=('throttle',), threshold="throttle_active_ratio",
        scope=GPU, unit="percentunit", group="gpu",
    ),
    Heuristic(
        name="GpuTooHot",
        verdict="thermal throttling (GPU at its slowdown temperature)",
        # The slowdown temperature is ours alone; the temperature may come from dcgm-exporter (another job).
        expr="<<gpu_temp>>\n>= on (instance, gpu) group_left ()\nbottleneck_gpu_slowdown_temperature_celsius - "
        "${gpu_temperature_margin_celsius}",
        for_="5m",
        summary="GPU {{ $labels.gpu }} on {{ $labels.instance }} is at its slowdown temperature.",
        description="GPU {{ $labels.gpu }} on {{ $labels.instance }} is at {{ $value | humanize }} °C, within "
        "${gpu_temperature_margin_celsius} °C of the temperature at which it slows its clocks down.",
        advice="Improve cooling: fans, airflow, ambient temperature, blocked intakes; spread jobs over "
        "cooler GPUs.",
        meaning="Above the slowdown temperature the GPU throttles its clocks; near it, any extra load tips "
        "it over.",
        evidence="`bottleneck_gpu_temperature_celsius`, `bottleneck_gpu_slowdown_temperature_celsius`, "
        "`bottleneck_gpu_fan_ratio`, `bottleneck_gpu_power_watts`.",
        scope=GPU, unit="celsius", group="gpu",
    ),
    Heuristic(
        name="PcieDegraded",
        verdict="PCIe link degraded",
        # on (instance, gpu): the link state and the utilization may come from different exporters (jobs).
        expr="<<pcie>> < 1\nand on (instance, gpu) <<gpu_util>> > ${pcie_busy_util}",
        for_="10m",
        summary="GPU {{ $labels.gpu }} on {{ $labels.instance }} runs on a degraded PCIe link.",
        description="The PCIe link of GPU {{ $labels.gpu }} on {{ $labels.instance }} runs at "
        "{{ $value | humanizePercentage }} of its maximum (generation x width) while the GPU is busy.",
        advice="Re-seat the card, check the slot (x16, not x4) and the riser, update the BIOS; compare "
        "with the node's other GPUs.",
        meaning="Links drop to a low generation when idle by design; a link still below its maximum "
        "generation or width under load points at the slot, the riser or the card.",
        evidence="`bottleneck_gpu_pcie_link_generation` / `..._max_generation`, `bottleneck_gpu_pcie_link_width` "
        "/ `..._max_width`, `bottleneck_gpu_pcie_replays_total`.",
        compares=('pcie',), threshold="1",
        scope=GPU, unit="percentunit", group="gpu",
    ),
    Heuristic(
        name="GpuImbalance",
        verdict="GPU imbalance in a job",
        expr="max by (training_job) (<<gpu_busy>>) - min by (training_job) (<<gpu_busy>>)\n> ${gpu_imbalance_spread}",
        for_="10m",
        summary="The GPUs of job {{ $labels.training_job }} are unevenly loaded.",
        description="The busiest and the idlest rank of job {{ $labels.training_job }} differ by "
        "{{ $value | humanizePercentage }} in GPU busy time (threshold ${gpu_imbalance_spread:pct}).",
        advice="Balance the work: parallel strategy (pipeline stages, tensor-parallel split), uneven "
        "sharding or sequence lengths, a slow input pipeline on some ranks.",
        meaning="Some ranks' GPUs compute while others wait; the job runs at the pace of the busiest. Each "
        "rank's GPU busy share comes from its own CUDA events, so no rank-to-GPU mapping is needed and "
        "ranks on different nodes compare directly.",
        evidence="`bottleneck_train_gpu_busy_seconds_total` / `..._idle_seconds_total` per rank, "
        "`bottleneck_train_info` (device per rank).",
        scope=("training_job",), unit="percentunit", group="training",
    ),
    Heuristic(
        name="StragglerRank",
        verdict="straggler rank",
        # The joins add two labels: phase (where the rank's extra time goes) and cause (what its node shows).
        expr="(\n<<step_vs_median>> > ${straggler_factor}\nor\n<<own_vs_median>> > ${straggler_factor}\n)\n"
        "+ on (instance, training_job, rank) group_left (phase) (0 * <<slow_phase>>)\n"
        "+ on (instance) group_left (cause) (0 * <<node_cause>>)",
        for_="10m",
        summary="Rank {{ $labels.rank }} of job {{ $labels.training_job }} is a straggler.",
        description="Rank {{ $labels.rank }} of job {{ $labels.training_job }} on {{ $labels.instance }} is "
        "{{ $value | humanize }} times the job's median in step time or, where the collectives even step "
        "times out, in own work per step (the step minus its wait in collectives; threshold "
        "${straggler_factor}). Its extra time goes to {{ $labels.phase }} (between_phases: its own code "
        "outside forward, backward and optimizer, such as logging, evaluation or checkpoints). Likely cause: "
        "{{ $labels.cause }}.",
        advice="Look at the cause the alert names: its node's GPU (throttling, PCIe link, XID errors), its "
        "loaders' CPU, the node's CPU or memory pressure; with none, the work only this rank does (rank-0 "
        "logging, evaluation, checkpoints: move it off the critical path or spread it over the ranks). If "
        "the slow rank rotates, the input pipeline is the cause.",
        meaning="One rank is slower than its peers and synchronous training waits for it at every "
        "collective. That wait evens out whole-step times, so the rule also compares each rank's own work "
        "per step: its step time minus the time it waits in collectives. The rank the others wait for is "
        "the one that waits least. The wait is the hook's `collective` phase where the rank reports it, "
        "else backward (DDP's all-reduce wait sits inside backward; backward is then no place of its own "
        "work). The label phase names where the rank's time goes beyond its peers' (the place with the "
        "largest excess over the job's median per step, between_phases included); the label cause is the "
        "first of these its node shows: XID errors, a throttled GPU, a degraded PCIe link under load, "
        "loaders using all the CPU they can get, PSI cpu, PSI memory, else nothing.",
        evidence="`bottleneck_train_phase_seconds_total` per rank and phase (collective, backward, step), "
        "the recorded `job_rank_phase:bottleneck_train_phase_seconds:excess_over_job_median_rate${rate_window}`, "
        "`instance:bottleneck_node_slowdown_cause:info`, the node alerts of the straggler's instance.",
        compares=('step_vs_median', 'own_vs_median'), threshold="straggler_factor",
        scope=RANK, unit="short", group="training",
    ),
    Heuristic(
        name="NetworkBound",
        verdict="network-bound",
        expr="<<net_util>> > ${network_saturation_ratio}" + TRAINING,
        for_="10m",
        summary="NIC {{ $labels.device }} of {{ $labels.instance }} is saturated.",
        description="{{ $labels.device }} on {{ $labels.instance }} carries {{ $value | humanizePercentage }} "
        "of its link speed (threshold ${network_saturation_ratio:pct}).",
        advice="Bigger DDP buckets, gradient accumulation or compression, overlap communication with "
        "backward; for remote data, cache locally; a faster interconnect (InfiniBand, more NICs).",
        meaning="All-reduce traffic or remote data reads fill the link; every step waits for the network.",
        evidence="`bottleneck_network_receive_bytes_total`, `..._transmit_bytes_total`, "
        "`bottleneck_network_speed_bytes`, `bottleneck_infiniband_port_received_bytes_total`.",
        compares=('net_util',), threshold="network_saturation_ratio",
        scope=("instance", "device"), unit="percentunit", group="node",
    ),
    Heuristic(
        name="CommunicationBound",
        verdict="communication-bound (distributed)",
        expr="<<collective>> > ${collective_ratio}",
        for_="10m",
        summary="Rank {{ $labels.rank }} of job {{ $labels.training_job }} spends most of its step in collectives.",
        description="Rank {{ $labels.rank }} of job {{ $labels.training_job }} on {{ $labels.instance }} has a "
        "collective (DDP's all-reduce, FSDP's all-gather or reduce-scatter) in flight "
        "{{ $value | humanizePercentage }} of every step (threshold "
        "${collective_ratio:pct}).",
        advice="Communicate less or hide it: larger DDP buckets (bucket_cap_mb=100 or more) so fewer, bigger "
        "all-reduces overlap backward; gradient accumulation (no_sync() on the micro-batches) or a larger "
        "batch per rank; gradient compression (fp16/bf16 comm hooks); with FSDP, fewer and larger fully_shard "
        "units, reshard_after_forward=False where memory allows (no all-gather again in backward), HSDP "
        "(shard within a node, replicate across nodes); a faster network (InfiniBand/RoCE, more "
        "NICs). Check that NCCL uses the right interface and transport: NCCL_SOCKET_IFNAME, NCCL_IB_HCA, "
        "NCCL_IB_DISABLE=0, NCCL_DEBUG=INFO shows what it picked.",
        meaning="The rank spends more of each step waiting for its collectives than the forward and backward "
        "passes can hide: the model's parameters and gradients are large for the network (a big model, a "
        "small batch per rank), the buckets too small to overlap, or the interconnect slow. A rank that "
        "waits much less than its peers is the one they wait for (BottleneckStragglerRank).",
        evidence="`bottleneck_train_phase_seconds_total{phase=\"collective\"}` against `phase=\"step\"` and "
        "`phase=\"backward\"` per rank (the collective phase overlaps backward and is no part of the step's "
        "sum of phases); the NICs' `bottleneck_network_transmit_bytes_total` against "
        "`bottleneck_network_speed_bytes`; the other ranks of the job.",
        compares=("collective",), threshold="collective_ratio",
        scope=RANK, unit="percentunit", group="training",
    ),
    Heuristic(
        name="TrainingStalled",
        verdict="training stalled",
        expr="(time() - bottleneck_train_last_step_timestamp_seconds)\n"
        "> ${stall_factor}\n"
        "  * (bottleneck_train_step_duration_seconds_sum / bottleneck_train_step_duration_seconds_count)\n"
        "and (time() - bottleneck_train_last_step_timestamp_seconds) > ${stall_min_seconds}\n"
        "and on (instance, training_job) count by (instance, training_job) (bottleneck_training_process_info)",
        for_="2m",
        summary="Rank {{ $labels.rank }} of job {{ $labels.training_job }} has stopped making progress.",
        description="Rank {{ $labels.rank }} of job {{ $labels.training_job }} on {{ $labels.instance }} finished "
        "no step for {{ $value | humanizeDuration }}, more than ${stall_factor} times its mean step time, while its "
        "process is alive (critical after ${stall_factor_critical} times and ${stall_min_seconds_critical} s).",
        advice="Probably a hang: dump the Python stacks (py-spy dump --pid PID), check NCCL (NCCL_DEBUG=INFO, "
        "TORCH_NCCL_ASYNC_ERROR_HANDLING), look for a dead peer rank or a full disk.",
        meaning="The process is alive but no optimizer step finishes: a deadlock in a collective, a dead "
        "peer, a stuck DataLoader worker or a filesystem that stopped answering. A hung rank sends nothing; "
        "the push receiver keeps its series while its process runs (Unix socket), so the alert holds until "
        "the process exits. Critical once the hang has lasted long enough to rule out a slow checkpoint.",
        evidence="`bottleneck_train_last_step_timestamp_seconds`, `bottleneck_train_step_duration_seconds`, "
        "`bottleneck_training_process_info`, the other ranks of the job.",
        scope=RANK, unit="s", group="training",
        tiers=(Tier("warning"), Tier("critical", {"stall_factor": "stall_factor_critical",
                                                  "stall_min_seconds": "stall_min_seconds_critical"})),
    ),
    Heuristic(
        name="GpuLost",
        verdict="hardware fault (GPU lost)",
        expr="bottleneck_gpu_up == 0",
        for_="1m",
        summary="GPU {{ $labels.gpu }} on {{ $labels.instance }} fell off the bus.",
        description="GPU {{ $labels.gpu }} ({{ $labels.uuid }}) on {{ $labels.instance }} no longer answers "
        "NVML (GPU is lost); the other GPUs are still reported.",
        advice="Drain the node: the GPU needs a reset or a reboot; check dmesg for Xid errors, then the "
        "card, its power and the slot.",
        meaning="NVML reported GPU_IS_LOST: the driver lost contact with the card. Every job on it has "
        "failed or hangs.",
        evidence="`bottleneck_gpu_up`, the kernel log (Xid 79), `bottleneck_gpu_info`.",
        scope=GPU, unit="short", group="gpu", tiers=(Tier("critical"),),
    ),
    Heuristic(
        name="GpuUncorrectableErrors",
        verdict="hardware fault (uncorrectable ECC errors)",
        expr='increase(bottleneck_gpu_ecc_errors_total{type="uncorrected"}[${rate_window}]) > 0',
        for_="1m",
        summary="GPU {{ $labels.gpu }} on {{ $labels.instance }} reports uncorrectable memory errors.",
        description="GPU {{ $labels.gpu }} ({{ $labels.uuid }}) on {{ $labels.instance }} counted "
        "{{ $value | humanize }} uncorrectable ECC errors in the last ${rate_window}.",
        advice="Drain the node and reset the GPU; if errors return or row remapping failed, replace the "
        "card.",
        meaning="Uncorrectable ECC errors corrupt results or kill the process using the memory; pending "
        "or failed row remapping means the card needs attention.",
        evidence="`bottleneck_gpu_ecc_errors_total{type=\"uncorrected\"}`, `bottleneck_gpu_remapped_rows_pending`, "
        "`bottleneck_gpu_remapped_rows_failed`.",
        scope=GPU, unit="short", group="gpu", tiers=(Tier("critical"),),
    ),
    Heuristic(
        name="GpuXidFatal",
        verdict="hardware fault (XID error)",
        expr='increase(bottleneck_gpu_xid_errors_total{xid=~"${xid_fatal}"}[${xid_window}]) > 0',
        for_="1m",
        summary="GPU {{ $labels.gpu }} on {{ $labels.instance }} reported XID {{ $labels.xid }}.",
        description="GPU {{ $labels.gpu }} ({{ $labels.uuid }}) on {{ $labels.instance }} reported XID "
        "{{ $labels.xid }} ({{ $value | humanize }} in the last ${xid_window}): a broken GPU, a GPU off the "
        "bus, or one that needs a reset.",
        advice="Drain the node (no new jobs on it), read the runbook's line for this XID, reset the GPU or "
        "reboot; replace the card if the XID returns.",
        meaning="NVML reported an XID event (the driver's error report, also in the kernel log as "
        "`NVRM: Xid`). These codes mean the hardware or its firmware failed; jobs on the GPU crashed or "
        "compute wrong results. The alert holds for ${xid_window} after the last one. Per XID (default list):"
        + _xid_runbook("48|63|64|74|79|92|94|95|119|120"),
        evidence="`bottleneck_gpu_xid_errors_total` by xid, `bottleneck_gpu_up`, "
        "`bottleneck_gpu_ecc_errors_total`, `bottleneck_gpu_remapped_rows_pending`, the kernel log "
        "(`dmesg | grep Xid`).",
        scope=("instance", "gpu", "uuid", "xid"), unit="short", group="gpu", tiers=(Tier("critical"),),
    ),
    Heuristic(
        name="GpuXidApplication",
        verdict="job crashed on the GPU (XID error)",
        expr='increase(bottleneck_gpu_xid_errors_total{xid=~"${xid_application}"}[${xid_window}]) > 0',
        for_="1m",
        summary="A job on GPU {{ $labels.gpu }} of {{ $labels.instance }} crashed (XID {{ $labels.xid }}).",
        description="GPU {{ $labels.gpu }} ({{ $labels.uuid }}) on {{ $labels.instance }} reported XID "
        "{{ $labels.xid }} ({{ $value | humanize }} in the last ${xid_window}): a job on it hit a GPU "
        "exception.",
        advice="Look at the job that ran on this GPU (its log ends with a CUDA error); fix or restart it. "
        "If the same XID hits different jobs on this GPU only, test the GPU.",
        meaning="These XIDs usually come from the application (illegal memory access, an out-of-range "
        "instruction, a killed kernel), rarely from the GPU. Per XID (default list):" + _xid_runbook("13|31|43"),
        evidence="`bottleneck_gpu_xid_errors_total` by xid, the job's log, the kernel log "
        "(`dmesg | grep Xid`).",
        scope=("instance", "gpu", "uuid", "xid"), unit="short", group="gpu",
    ),
    Heuristic(
        name="ExporterDown",
        verdict="exporter down (node not monitored)",
        expr='up{job="${exporter_job}"} == 0',
        for_="5m",
        summary="bottleneck-exporter on {{ $labels.instance }} is down.",
        description="Prometheus cannot scrape job {{ $labels.job }} on {{ $labels.instance }}: the node or "
        "its exporter is down, so no verdict about it is possible.",
        advice="Check the node and the service (systemctl status bottleneck-exporter, or the DaemonSet "
        "pod); other alerts for this instance are inhibited meanwhile.",
        meaning="Without scrapes every other rule for this node is blind; Alertmanager inhibits the node's "
        "other alerts while this one fires.",
        evidence="`up`, the exporter's log, `scrape_duration_seconds`.",
        scope=("instance", "job"), unit="short", group="exporter", tiers=(Tier("critical"),),
    ),
    Heuristic(
        name="ExporterAbsent",
        verdict="no exporter scraped (every verdict blind)",
        expr='absent(up{job="${exporter_job}"})',
        for_="15m",
        summary="Prometheus scrapes no bottleneck-exporter (job ${exporter_job}).",
        description="Prometheus has no target in job {{ $labels.job }}: no node is monitored, and "
        "BottleneckExporterDown cannot fire either. The scrape job is missing, named differently from the "
        "rules' exporter_job, or every exporter left service discovery.",
        advice="Check the scrape config (job_name ${exporter_job}, or the ServiceMonitor's job label) and "
        "Prometheus' targets page; if the job has another name, regenerate the rules with "
        "--set exporter_job=NAME.",
        meaning="Every other rule reads series from this scrape job; with no target at all they all stay "
        "silent, which looks like a healthy fleet. BottleneckExporterDown watches targets that exist; this "
        "alert watches for the job itself.",
        evidence="`up{job=\"${exporter_job}\"}` (absent), Prometheus' /targets page, the DaemonSet's pods.",
        scope=("job",), unit="short", group="exporter",
    ),
    Heuristic(
        name="CollectorFailing",
        verdict="collector failing",
        expr="bottleneck_scrape_collector_success == 0",
        for_="10m",
        summary="Collector {{ $labels.collector }} on {{ $labels.instance }} fails.",
        description="The {{ $labels.collector }} collector of the exporter on {{ $labels.instance }} fails on "
        "every scrape; its series are missing, the other collectors still work.",
        advice="Read the exporter's log for the collector's error (permissions on /proc or /sys, NVML "
        "driver mismatch); disable it with --no-collector.<name> if the node does not have it.",
        meaning="Rules that need this collector's series are blind on this node.",
        evidence="`bottleneck_scrape_collector_success`, `bottleneck_scrape_collector_duration_seconds`, "
        "the exporter's log.",
        scope=("instance", "collector"), unit="short", group="exporter",
    ),
)


# ---------------------------------------------------------------------------------------------- resolution


@dataclasses.dataclass(frozen=True)
class RecordingRule:
    record: str
    expr: str
    group: str
    key: str = ""  # the catalogue's key (<<key>>)


@dataclasses.dataclass(frozen=True)
class AlertRule:
    """One generated alert rule (one severity tier of a heuristic), every template filled in."""

    heuristic: Heuristic
    severity: str
    expr: str  # refers to recording rules by name: what alerts/alert-rules.yml contains
    inline_expr: str  # the recording rules spelled out: runs on a Prometheus without our rules
    for_: str
    summary: str
    description: str  # still a Prometheus template ($value, $labels)
    advice: str
    meaning: str  # runbook text, parameters filled in
    evidence: str
    runbook_url: str
    thresholds: dict[str, float | str]  # parameter → value this tier uses

    @property
    def alert(self) -> str:
        return self.heuristic.alert

    @property
    def labels(self) -> dict[str, str]:
        return {"severity": self.severity}

    @property
    def annotations(self) -> dict[str, str]:
        return {
            "summary": self.summary,
            "description": self.description,
            "verdict": self.heuristic.verdict,
            "advice": self.advice,
            "runbook_url": self.runbook_url,
        }


@dataclasses.dataclass(frozen=True)
class Catalogue:
    parameters: dict[str, float | str]
    records: tuple[RecordingRule, ...]
    alerts: tuple[AlertRule, ...]
    bundle: str = DEFAULT_BUNDLE
    # heuristic → the raw series its bundle's sources lack
    left_out: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    # recording rule → the raw series of the parts it is recorded without (node_cause without GPU causes)
    reduced: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    # heuristic → the raw series it reads in this bundle, through its recording rules
    reads: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)

    @property
    def reduced_for(self) -> dict[str, dict[str, tuple[str, ...]]]:
        """heuristic → the reduced recording rules it reads, each with the raw series of its missing parts."""
        names = {r.key: r.record for r in self.records}
        found: dict[str, dict[str, tuple[str, ...]]] = {}
        for rule in self.alerts:
            for key in records_used(rule.heuristic.expr):
                if names.get(key) in self.reduced:
                    found.setdefault(rule.heuristic.name, {})[names[key]] = self.reduced[names[key]]
        return found

    def alert(self, name: str, severity: str | None = None) -> AlertRule:
        for rule in self.alerts:
            if name in (rule.alert, rule.heuristic.name) and severity in (None, rule.severity):
                return rule
        raise KeyError(f"no alert {name!r}" + (f" with severity {severity}" if severity else ""))


def format_value(value: float | str) -> str:
    if isinstance(value, str):
        return value
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _percent(value: float | str) -> str:
    return f"{float(value) * 100:g}%"


def _fill(text: str, params: Mapping[str, float | str], renames: Mapping[str, str] | None = None) -> str:
    renames = renames or {}

    def parameter(match: re.Match[str]) -> str:
        name = renames.get(match.group(1), match.group(1))
        if name not in params:
            raise CatalogueError(f"unknown parameter ${{{name}}} in {text[:60]!r}")
        return _percent(params[name]) if match.group(0).endswith(":pct}") else format_value(params[name])

    return PARAM.sub(parameter, text)


def records_used(expr: str) -> list[str]:
    """Record keys ``expr`` needs, dependencies first."""
    ordered: list[str] = []
    for key in RECORD_REF.findall(expr):
        if key not in RECORDS:
            raise CatalogueError(f"unknown recording rule <<{key}>>")
        for dependency in records_used(RECORDS[key].expr):
            if dependency not in ordered:
                ordered.append(dependency)
        if key not in ordered:
            ordered.append(key)
    return ordered


def _with_records(expr: str, names: Mapping[str, str], inline: bool, params: Mapping[str, float | str],
                  chosen: Mapping[str, str]) -> str:
    def record(match: re.Match[str]) -> str:
        key = match.group(1)
        if not inline:
            return names[key]
        body = _with_records(_fill(chosen[key], params), names, True, params, chosen)
        return "(" + " ".join(body.split()) + ")"

    return RECORD_REF.sub(record, expr)


def selector_names(node: Node) -> set[str]:
    """Series names the selectors of a parsed expression name (``__name__=...``)."""
    if isinstance(node, Selector):
        return {m.value for m in node.matchers if m.name == "__name__" and m.op == "="}
    if isinstance(node, Call):
        return set().union(*(selector_names(a) for a in node.args))
    if isinstance(node, Aggregate):
        return selector_names(node.expr)
    if isinstance(node, Binary):
        return selector_names(node.lhs) | selector_names(node.rhs)
    if isinstance(node, Negate):
        return selector_names(node.expr)
    return set()


def series_read(expr: str, params: Mapping[str, float | str]) -> set[str]:
    """Raw series names ``expr`` reads itself (not through the recording rules it refers to)."""
    return selector_names(parse(RECORD_REF.sub("vector(0)", _fill(expr, params))))


def choose_signals(bundle: str, params: Mapping[str, float | str]
                   ) -> tuple[dict[str, str], dict[str, set[str]], dict[str, set[str]]]:
    """Per record key, the expression ``bundle`` records (the first its sources can read); for the records
    it cannot record, the raw series it lacks; for records it records without some of their parts, the raw
    series those parts need."""
    provides = BUNDLES[bundle].provides
    chosen: dict[str, str] = {}
    missing: dict[str, set[str]] = {}
    reduced: dict[str, set[str]] = {}

    def lacks(expr: str) -> set[str]:
        found = {m for m in series_read(expr, params) if not provides(m)}
        for key in RECORD_REF.findall(expr):
            found |= missing.get(key, set())
        return found

    for key, record in RECORDS.items():
        if record.parts:
            parts = [p for p in record.parts if not lacks(p)]
            if 0 < len(parts) < len(record.parts):
                reduced[key] = set().union(*(lacks(p) for p in record.parts))
            if parts:
                chosen[key] = NODE_CAUSE_JOIN.join(parts)
            else:
                missing[key] = set().union(*(lacks(p) for p in record.parts))
            continue
        candidates = (record.expr, *record.sources.values())
        usable = [c for c in candidates if not lacks(c)]
        if usable:
            chosen[key] = usable[0]
        else:
            missing[key] = lacks(record.expr)
    return chosen, missing, reduced


def signal(key: str, matchers: str, bundle: str = DEFAULT_BUNDLE, window: str = "$__rate_interval") -> str:
    """Signal ``key`` (a record or one of SIGNALS) as ``bundle`` reads it, spelled out for a dashboard: windows
    ``window`` (Grafana's ``$__rate_interval``), every raw selector narrowed by ``matchers``
    (``instance=~"$instance"``), the records it reads inlined. A dashboard draws this instead of typing the
    signal's PromQL again. MissingSignal names the raw series the bundle's sources lack."""
    defaults = {name: p.default for name, p in PARAMETERS.items()}
    chosen, missing, _ = choose_signals(bundle, defaults)
    params = {**defaults, "rate_window": window}
    if key in SIGNALS:
        try:
            expr = BUNDLES[bundle].rewrite(SIGNALS[key].expr)
        except Unreadable as err:
            raise MissingSignal(f"bundle {bundle} has no signal {key!r} (needs {err})", err.names) from None
        lacking = set().union(*(missing[k] for k in RECORD_REF.findall(expr) if k in missing))
        if lacking:
            raise MissingSignal(f"bundle {bundle} has no signal {key!r} (needs {', '.join(sorted(lacking))})",
                                lacking)
        reads = [expr, *(chosen[k] for k in _closure(expr, chosen))]
    elif key in chosen:
        expr = chosen[key]
        reads = [chosen[k] for k in [key, *_closure(expr, chosen)]]
    else:
        lacking = missing.get(key, set())
        if key not in RECORDS:
            raise CatalogueError(f"no signal {key!r}; known: {', '.join(sorted([*RECORDS, *SIGNALS]))}")
        raise MissingSignal(f"bundle {bundle} has no signal {key!r}" + (
            f" (needs {', '.join(sorted(lacking))})" if lacking else ""), lacking)
    text = _with_records(_fill(expr, params), {}, True, params, chosen)
    names = set().union(*(series_read(e, defaults) for e in reads))
    for name in sorted(names, key=len, reverse=True):
        text = re.sub(rf"\b{name}\{{", f"{name}{{{matchers}, ", text)
        text = re.sub(rf"\b{name}\b(?![{{\w])", f"{name}{{{matchers}}}", text)
    return " ".join(text.split())


def parse_parameter(name: str, raw: object) -> float | str:
    """Parse an override for parameter ``name``; raises CatalogueError naming it."""
    if name not in PARAMETERS:
        raise CatalogueError(f"unknown parameter {name!r}; known: {', '.join(sorted(PARAMETERS))}")
    param = PARAMETERS[name]
    if param.kind == "number":
        try:
            number = float(raw)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise CatalogueError(f"parameter {name}: expected a number, got {raw!r}") from None
        if number != number or number in (float("inf"), float("-inf")):
            raise CatalogueError(f"parameter {name}: expected a finite number, got {raw!r}")
        return number
    text = str(raw)
    if param.kind == "duration":
        try:
            parse_duration(text)
        except PromQLError:
            raise CatalogueError(f"parameter {name}: expected a duration such as 5m or 30s, got {raw!r}") from None
    if param.kind == "regex":
        try:
            re.compile(text)
        except re.error as err:
            raise CatalogueError(f"parameter {name}: not a valid regular expression ({err}): {raw!r}") from None
    if not text:
        raise CatalogueError(f"parameter {name}: must not be empty")
    return text


def parse_sets(pairs: Sequence[str]) -> dict[str, str]:
    """``["data_wait_ratio=0.3", ...]`` (the ``--set`` flags) → overrides for :func:`resolve`."""
    overrides: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise CatalogueError(f"--set {pair!r}: expected NAME=VALUE")
        overrides[name.strip()] = value.strip()
    return overrides


def resolve(overrides: Mapping[str, object] | None = None, for_override: str | None = None,
            bundle: str = DEFAULT_BUNDLE) -> Catalogue:
    """Fill in parameters (defaults, then ``overrides``) and return the concrete rules of ``bundle``.

    ``for_override`` replaces every ``for:`` (tests use it to see alerts fire within a minute). A heuristic
    whose series ``bundle``'s sources lack is left out (``Catalogue.left_out`` names the series)."""
    if bundle not in BUNDLES:
        raise CatalogueError(f"unknown bundle {bundle!r}; known: {', '.join(BUNDLES)}")
    params: dict[str, float | str] = {name: p.default for name, p in PARAMETERS.items()}
    for name, raw in (overrides or {}).items():
        params[name] = parse_parameter(name, raw)
    if for_override is not None:
        try:
            parse_duration(for_override)
        except PromQLError:
            raise CatalogueError(f"for override: expected a duration such as 30s, got {for_override!r}") from None
    names = {key: _fill(record.name, params) for key, record in RECORDS.items()}
    chosen, missing, reduced = choose_signals(bundle, params)
    records = tuple(
        RecordingRule(names[key], _with_records(_fill(expr, params), names, False, params, chosen),
                      RECORDS[key].group, key)
        for key, expr in chosen.items()
    )
    base = str(params["runbook_base_url"])
    alerts: list[AlertRule] = []
    left_out: dict[str, tuple[str, ...]] = {}
    reads: dict[str, tuple[str, ...]] = {}
    provides = BUNDLES[bundle].provides
    for heuristic in HEURISTICS:
        lacking = {m for m in series_read(heuristic.expr, params) if not provides(m)}
        for key in records_used(heuristic.expr):
            lacking |= missing.get(key, set())
        if lacking:
            left_out[heuristic.name] = tuple(sorted(lacking))
            continue
        through = (series_read(chosen[key], params) for key in _closure(heuristic.expr, chosen))
        reads[heuristic.name] = tuple(sorted(series_read(heuristic.expr, params).union(*through)))
        for tier in heuristic.tiers:
            filled = _fill(heuristic.expr, params, tier.overrides)
            thresholds = {tier.overrides.get(n, n): params[tier.overrides.get(n, n)]
                          for n in PARAM.findall(heuristic.expr)}
            alerts.append(AlertRule(
                heuristic=heuristic,
                severity=tier.severity,
                expr=_with_records(filled, names, False, params, chosen),
                inline_expr=_with_records(filled, names, True, params, chosen),
                for_=for_override or heuristic.for_,
                summary=_fill(heuristic.summary, params),
                description=_fill(heuristic.description, params),
                advice=_fill(heuristic.advice, params),
                meaning=_fill(heuristic.meaning, params),
                evidence=_fill(heuristic.evidence, params),
                runbook_url=f"{base}#{heuristic.anchor}",
                thresholds=thresholds,
            ))
    return Catalogue(params, records, tuple(alerts), bundle, left_out,
                     {names[key]: tuple(sorted(lacking)) for key, lacking in reduced.items()}, reads)


def _closure(expr: str, chosen: Mapping[str, str]) -> list[str]:
    """Record keys ``expr`` reads as a bundle records them (its choice of expression per record), transitively."""
    found: list[str] = []
    for key in RECORD_REF.findall(expr):
        for dependency in [*_closure(chosen[key], chosen), key]:
            if dependency not in found:
                found.append(dependency)
    return found


def validate() -> None:
    """Check the catalogue's own consistency; raises CatalogueError naming the culprit."""
    seen: set[str] = set()
    for heuristic in HEURISTICS:
        where = f"heuristic {heuristic.name}"
        if heuristic.name in seen:
            raise CatalogueError(f"{where}: defined twice")
        seen.add(heuristic.name)
        if not re.fullmatch(r"[A-Z][A-Za-z0-9]+", heuristic.name):
            raise CatalogueError(f"{where}: name must be CamelCase")
        if heuristic.group not in GROUPS:
            raise CatalogueError(f"{where}: group {heuristic.group!r} not in {GROUPS}")
        severities = [t.severity for t in heuristic.tiers]
        if len(set(severities)) != len(severities) or any(s not in SEVERITIES for s in severities):
            raise CatalogueError(f"{where}: severities {severities} must be distinct values of {SEVERITIES}")
        parse_duration(heuristic.for_)
        for text in (heuristic.summary, heuristic.description):
            gotemplate.check(text)
        for key in heuristic.compares:
            if f"<<{key}>>" not in heuristic.expr:
                raise CatalogueError(f"{where}: compares <<{key}>>, which its expression does not read")
        if heuristic.compares and heuristic.threshold not in heuristic.parameters:
            try:
                float(heuristic.threshold)
            except ValueError:
                raise CatalogueError(f"{where}: threshold {heuristic.threshold!r} is neither a parameter it reads "
                                     "nor a number") from None
        for tier in heuristic.tiers:
            for used, replacement in tier.overrides.items():
                if used not in heuristic.parameters or replacement not in PARAMETERS:
                    raise CatalogueError(f"{where}: tier {tier.severity} overrides unknown {used}→{replacement}")
    for bundle in BUNDLES:
        for rule in resolve(bundle=bundle).alerts:
            try:
                parse(rule.inline_expr)
            except PromQLError as err:
                raise CatalogueError(f"alert {rule.alert} (bundle {bundle}): {err}") from None
