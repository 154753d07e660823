"""What each bundle's rules cost a real Prometheus on a fleet of N nodes of 8 GPUs, beside a peer's node rules.

    .venv/bin/python benchmarks/fleet_rules.py --nodes 100 [--cpus-per-node 32] [--ranks-per-job 32]

Prints one line per bundle and one for the peer (details per rule group and series per node on stderr)::

    fleet nodes=100 gpus_per_node=8 bundle=bottleneck series=S recorded_series=R rule_groups_eval_seconds=T \
        interval_seconds=I   (on one line)
    fleet nodes=100 gpus_per_node=8 peer=node-mixin series=S ... (the same fields)

S: the raw series the bundle's exporters expose for the whole fleet (ours under the bundle's preset, plus
node_exporter's and dcgm-exporter's where the bundle reads them, plus ``up``); R: the series its recording rules
add; T: the sum over its rule groups of the median ``prometheus_rule_group_last_duration_seconds`` of
``--evaluations`` evaluations (the first one, on cold caches, left out); I: the shortest of its groups'
``prometheus_rule_group_interval_seconds`` (the bundle's own intervals, else the global evaluation_interval of the
Prometheus ``bundle write`` writes). The goal: T < I / 10 at 1,000 nodes.

How a node is built: from real scrapes. Our host, GPU and training-collector series are the golden scrapes of
tests/golden/ (fixture /proc trees, the recorded 4x H100 profile); the hook's series come from the real push
receiver fed one validated datagram per rank; node_exporter's are one scrape of Debian's real
prometheus-node-exporter with its default collectors on this machine; dcgm-exporter's are the recorded 4x H100
scrape. Per-CPU series are repeated for ``--cpus-per-node`` CPUs, and the recordings' busy healthy GPU for 8 GPUs;
every GPU runs one rank, and the ranks of a job (``--ranks-per-job``) fill consecutive nodes. Counters grow at
their template value per uptime (the host's since boot, a trainer's an hour), timing counters faster on a few
slow nodes (so some ranks straggle), gauges hold their template value, timestamps follow the clock: a mostly
healthy fleet, as most are most of the time (stderr says how many alerts were pending or firing).

Per bundle, the series its deployment ingests are written as OpenMetrics and turned into a block by ``promtool
tsdb create-blocks-from openmetrics``, one sample per scrape interval (the written prometheus.yml's), then a fresh
Prometheus opens the block and evaluates the bundle's rules alone. The data spans a rate window before the
first evaluation to the last one (a family some rule reads over a longer window, the GPUs' idle seconds over
30 minutes, the XID errors over an hour, that window, at most ``LONGEST_LEAD``), planned by when Prometheus will be
ready: the time the backfill takes is
estimated from this machine's speed (a small block, then each bundle's own), doubled, and a Prometheus ready
early waits for the plan; ``--backfill-cost`` sets the seconds per sample instead (a block of a million series
costs more per sample than the small one: pass it at 1,000 nodes). The block ends in the future when it is
built: samples ahead of now are fine for a query at now, and an out-of-order window lets the rules write their
records below the block's end. stderr says how much of each rate window the data covered. Only the families
some rule of the bundle reads are backfilled (the others cost ingestion, not evaluation; S counts them).

The peer: node-mixin's node-exporter recording rules and node alerts as kube-prometheus-stack ships them (its
``node-exporter.rules`` and ``node-exporter`` groups), written here from their definitions over node_exporter's
series, at kube-prometheus-stack's evaluation interval (prometheus-operator's default, 30 s). Its rules that join
kube-state-metrics (``node.rules``) are left out: no training node here runs it. The alerts' 6 h
``predict_linear`` windows read only the hour backfilled, so the peer's cost is if anything understated.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from bottleneck_exporter.bundle.layout import EXPORTER_JOB, committed_rules, prometheus_config
from bottleneck_exporter.heuristics.promql import parse_duration
from bottleneck_exporter.heuristics.sources import (
    BUNDLES,
    DCGM,
    DCGM_BESIDE_OURS,
    GPU,
    HOST,
    NODE_EXPORTER,
    OURS,
    PEER_JOB,
    TRAINING,
    gpu_unique,
)
from bottleneck_exporter.push.receiver import PushReceiver
from bottleneck_exporter.push.store import JobStore
from bottleneck_exporter.wire.encode import encode
from bottleneck_exporter.wire.schema import STEP_BUCKETS, validate

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden"
DCGM_SCRAPE = ROOT / "tests" / "fixtures" / "dcgm-exporter" / "hopper-4x-h100.prom"
NODE_EXPORTER_BINARY = "prometheus-node-exporter"
GPUS_PER_NODE = 8
UPTIME = 3600.0  # the age of a training process: its counters' template values are what they reached by then
# The template GPU (ours and dcgm-exporter's recordings alike): GPU 1 trains flat out, the others show faults.
TEMPLATE_GPU = "1"
PEER = "node-mixin"
PEER_INTERVAL = "30s"  # prometheus-operator's default evaluationInterval, which kube-prometheus-stack keeps
# Every 50th node is slow: its ranks take this much longer for the same work (stragglers for the job rules).
SLOW_EVERY, SLOW_FACTOR = 50, 1.5
WINDOW_SECONDS = 5 * 60  # the rate window of most rules (the catalogue's rate_window)
# A family read over a longer window is backfilled that far, but no further than this: a window the data does not
# fill reads fewer samples than a Prometheus that has run for hours would (node-mixin's 6 h predict_linear).
LONGEST_LEAD = 3600
RANGE = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)\s*(?:\{[^{}]*\})?\s*\[((?:\d+[smhdwy])+)\]")
STARTUP_SECONDS = 10  # a Prometheus opening the block
PESSIMISM = 2.0  # the backfill's estimated time over its measured rate (a block of many series costs more a sample)


@dataclasses.dataclass(frozen=True)
class Row:
    """One series of a template scrape: ``family`` is the source family (sources.TRAINING/HOST/GPU) for ours."""

    name: str
    labels: dict[str, str]
    value: float
    counter: bool


def _rows(text: str) -> list[Row]:
    rows = []
    for family in text_string_to_metric_families(text):
        counter = family.type in ("counter", "histogram", "summary")
        for sample in family.samples:
            if family.type == "histogram" and sample.name.endswith("_created"):
                continue
            rows.append(Row(sample.name, dict(sample.labels), float(sample.value), counter))
    return rows


def push_rows(step_seconds: float = 0.5) -> list[Row]:
    """What the real push receiver exports for one rank an hour into a steady data-parallel job (a validated
    datagram; ``training_job`` and ``rank`` are set per rank later)."""
    steps = int(UPTIME / step_seconds)
    share = {"data_wait": 0.1, "forward": 0.2, "backward": 0.5, "optimizer": 0.1}
    phases = {name: UPTIME * part for name, part in share.items()}
    buckets = [0] * (len(STEP_BUCKETS) + 1)
    buckets[next(i for i, bound in enumerate(STEP_BUCKETS) if bound >= step_seconds)] = steps
    payload: dict[str, Any] = {
        "v": 1, "job": "template", "rank": 0, "local_rank": 0, "world_size": 1, "device": "cuda:0", "pid": 4242,
        "seq": 1, "time": time.time(), "dropped": 0, "steps": steps, "samples": 32.0 * steps,
        "phase_seconds": {**phases, "step": UPTIME, "collective": UPTIME * 0.3}, "step_buckets": buckets,
        "loader": {"num_workers": 4, "pin_memory": True, "batch_size": 32, "prefetch_factor": 2,
                   "persistent_workers": True, "worker_pids": []},
        "gpu": {"phase_seconds": {"forward": UPTIME * 0.2, "backward": UPTIME * 0.45, "optimizer": UPTIME * 0.05},
                "busy_seconds": UPTIME * 0.7, "idle_seconds": UPTIME * 0.3, "memory_allocated_bytes": 6e10,
                "memory_reserved_bytes": 7e10, "memory_peak_bytes": 6.5e10},
    }
    receiver = PushReceiver(JobStore(max_jobs=1, max_ranks=1, expiry=600))
    receiver.store.accept(validate(encode(payload)))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(receiver)
    return _rows(generate_latest(registry).decode())


def node_exporter_rows(workdir: Path) -> list[Row]:
    """One scrape of Debian's real node_exporter, default collectors, on this machine."""
    binary = shutil.which(NODE_EXPORTER_BINARY)
    if binary is None:
        sys.exit(f"{NODE_EXPORTER_BINARY} is not installed: scripts/install-test-tools installs it")
    port = free_port()
    with (workdir / "node_exporter.log").open("wb") as log:
        proc = subprocess.Popen([binary, f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=log)
    try:
        text = fetch_text(f"http://127.0.0.1:{port}/metrics", wait=30)
    finally:
        proc.terminate()
        proc.wait(timeout=15)
    return _rows(text)


def booted_for(rows: list[Row], name: str) -> float:
    """How long the machine of a host template has run: CPU 0's seconds in all modes (its counters count from
    boot, not from a training process's start)."""
    return sum(r.value for r in rows if r.name == name and r.labels.get("cpu") == "0") or UPTIME


@dataclasses.dataclass
class Templates:
    """Per source, the series of one node: ours by family, node_exporter's, dcgm-exporter's."""

    ours: dict[str, list[Row]]
    node_exporter: list[Row]
    dcgm: list[Row]

    def uptime(self, source: str) -> float:
        """The seconds over which a counter of ``source`` reached its template value."""
        if source == f"ours:{HOST}":
            return booted_for(self.ours[HOST], "bottleneck_cpu_seconds_total")
        if source == NODE_EXPORTER:
            return booted_for(self.node_exporter, "node_cpu_seconds_total")
        return UPTIME

    @classmethod
    def load(cls, workdir: Path) -> Templates:
        training = [r for r in _rows((GOLDEN / "training.prom").read_text()) if r.labels.get("process") == "main.py"]
        return cls(ours={HOST: _rows((GOLDEN / "host.prom").read_text()),
                         GPU: _rows((GOLDEN / "gpu-hopper-4x-h100.prom").read_text()),
                         TRAINING: push_rows() + training},
                   node_exporter=node_exporter_rows(workdir), dcgm=_rows(DCGM_SCRAPE.read_text()))


@dataclasses.dataclass(frozen=True)
class Fleet:
    nodes: int
    cpus: int
    ranks_per_job: int

    def node(self, n: int) -> str:
        return f"node-{n:05d}"

    def rank(self, n: int, gpu: int) -> tuple[str, int]:
        """(training job, rank) of the rank on GPU ``gpu`` of node ``n``."""
        index = n * GPUS_PER_NODE + gpu
        return f"job-{index // self.ranks_per_job:04d}", index % self.ranks_per_job

    def slowness(self, n: int) -> float:
        return SLOW_FACTOR if n % SLOW_EVERY == SLOW_EVERY // 2 else 1.0 + 0.05 * ((n * 7919) % 11) / 11


def _per_cpu(rows: list[Row], cpus: int) -> Iterator[Row]:
    """Per-CPU series (CPU 0's of the template) for ``cpus`` CPUs; the others as they are, but for the count."""
    for row in rows:
        cpu = row.labels.get("cpu")
        if row.name == "bottleneck_cpus":
            yield dataclasses.replace(row, value=float(cpus))
        elif cpu is None:
            yield row
        elif cpu == "0":
            for c in range(cpus):
                yield dataclasses.replace(row, labels={**row.labels, "cpu": str(c)})


def _gpu_labels(labels: dict[str, str], gpu: int) -> dict[str, str]:
    """The template GPU's labels (ours or dcgm-exporter's) for GPU ``gpu``: index, UUID, PCI address, device node."""
    out = dict(labels)
    out["gpu"] = str(gpu)
    for key in ("uuid", "UUID"):
        if key in out:
            out[key] = f"GPU-{gpu:08d}-0000-0000-0000-{gpu:012d}"
    if "pci_bus_id" in out:
        out["pci_bus_id"] = f"00000000:{0x1B + 0x10 * gpu:02X}:00.0"
    if "device" in out:
        out["device"] = f"nvidia{gpu}"
    return out


def _per_gpu(rows: list[Row], fleet: Fleet, n: int) -> Iterator[Row]:
    for row in rows:
        if "gpu" not in row.labels:
            yield row
        elif row.labels["gpu"] == TEMPLATE_GPU:
            for g in range(GPUS_PER_NODE):
                labels = _gpu_labels(row.labels, g)
                if labels.get("pod"):
                    job, rank = fleet.rank(n, g)
                    labels["pod"] = f"{job}-worker-{rank // GPUS_PER_NODE}"
                yield dataclasses.replace(row, labels=labels)


def _per_rank(rows: list[Row], fleet: Fleet, n: int) -> Iterator[Row]:
    """The training series: the hook's and the training collector's per rank, the receiver's own once."""
    for row in rows:
        if "rank" not in row.labels and "local_rank" not in row.labels:
            yield row
            continue
        for g in range(GPUS_PER_NODE):
            job, rank = fleet.rank(n, g)
            labels = {**row.labels, "training_job": job}
            if "rank" in labels:
                labels["rank"] = str(rank)
            if "local_rank" in labels:
                labels["local_rank"] = str(g)
            if "world_size" in labels:
                labels["world_size"] = str(fleet.ranks_per_job)
            yield dataclasses.replace(row, labels=labels)


@dataclasses.dataclass(frozen=True)
class Series:
    name: str
    labels: dict[str, str]
    value: float
    rate: float  # per second; 0 for a gauge


def node_series(templates: Templates, fleet: Fleet, n: int) -> dict[str, list[Series]]:
    """Every series of node ``n``, by source (OURS, NODE_EXPORTER, DCGM; ours keyed by family as ``ours:host``)."""
    instance, slowness = fleet.node(n), fleet.slowness(n)

    def scraped(rows: Iterable[Row], job: str, source: str) -> list[Series]:
        out = [Series("up", {"job": job, "instance": instance}, 1.0, 0.0)]
        uptime = templates.uptime(source)
        for row in rows:
            rate = row.value / uptime if row.counter else 0.0
            if "seconds" in row.name and row.counter and row.name.startswith("bottleneck_train"):
                rate *= slowness
            out.append(Series(row.name, {**row.labels, "job": job, "instance": instance}, row.value, rate))
        return out

    ours = {family: scraped(rows, EXPORTER_JOB, f"ours:{family}")[1:] for family, rows in (
        (HOST, _per_cpu(templates.ours[HOST], fleet.cpus)),
        (GPU, _per_gpu(templates.ours[GPU], fleet, n)),
        (TRAINING, _per_rank(templates.ours[TRAINING], fleet, n)))}
    return {f"ours:{f}": s for f, s in ours.items()} | {
        "ours:up": [Series("up", {"job": EXPORTER_JOB, "instance": instance}, 1.0, 0.0)],
        NODE_EXPORTER: scraped(_per_cpu(templates.node_exporter, fleet.cpus), PEER_JOB[NODE_EXPORTER]["job"],
                               NODE_EXPORTER),
        DCGM: scraped(_per_gpu(templates.dcgm, fleet, n), PEER_JOB[DCGM]["job"], DCGM),
    }


def exposed(bundle: str, source: str, series: Series) -> bool:
    """Whether a deployment of ``bundle`` ingests ``series`` of ``source``: ours under the bundle's preset, and the
    peers whose families the bundle reads from them."""
    chosen = BUNDLES[bundle] if bundle != PEER else None
    if chosen is None:
        return source == NODE_EXPORTER
    if source == NODE_EXPORTER:
        return chosen.host == NODE_EXPORTER
    if source == DCGM:
        return chosen.gpu in (DCGM, DCGM_BESIDE_OURS)
    family = source.removeprefix("ours:")
    if family == HOST:
        return chosen.host == OURS
    if family == GPU:
        return chosen.gpu == OURS or (chosen.gpu == DCGM_BESIDE_OURS and gpu_unique(series.name))
    return True


def _labels(labels: dict[str, str]) -> str:
    return ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))


@dataclasses.dataclass(frozen=True)
class Sampled:
    head: str  # the series as OpenMetrics writes it, up to its value
    value: float  # at now
    rate: float


def write_openmetrics(path: Path, families: dict[str, list[Sampled]], start: int, end: int, step: int,
                      earlier: dict[str, int] | None = None) -> int:
    """Every series of ``families`` (name → its series on all nodes) sampled every ``step`` s from ``start`` (a
    family of ``earlier`` that many seconds before) to ``end``, grouped by family as OpenMetrics wants; the last
    sample at ``end``. Returns the samples written."""
    now = int(time.time())
    written = 0
    with path.open("w") as out:
        for name, series in families.items():
            lead = (earlier or {}).get(name, 0)
            times = range(start - lead + lead % step, end + 1, step)
            offsets = [t - now for t in times]
            for s in series:
                head = s.head
                if name.endswith("_timestamp_seconds"):
                    out.write("".join(f"{head}{t} {t}\n" for t in times))
                elif s.rate:
                    out.write("".join(f"{head}{max(0.0, s.value + s.rate * o):.10g} {t}\n"
                                      for o, t in zip(offsets, times, strict=True)))
                else:
                    value = f"{s.value:.10g}"
                    out.write("".join(f"{head}{value} {t}\n" for t in times))
                written += len(times)
        out.write("# EOF\n")
    return written


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def fetch_text(url: str, wait: float = 0.0) -> str:
    deadline = time.monotonic() + wait
    while True:
        try:
            with urllib.request.urlopen(url, timeout=60) as response:
                return str(response.read().decode())
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _query(base: str, params: dict[str, str]) -> dict[str, Any]:
    body = json.loads(fetch_text(f"{base}/api/v1/query?" + urllib.parse.urlencode(params)))
    if body.get("status") != "success":
        raise RuntimeError(f"query failed: {body.get('error')}: {params['query']}")
    return dict(body["data"])


def query(base: str, expr: str) -> list[dict[str, Any]]:
    return list(_query(base, {"query": expr})["result"])


def samples_read(base: str, groups: list[dict[str, Any]], data_end: float) -> dict[str, dict[str, int]]:
    """Rule group → rule → the samples its expression reads (``totalQueryableSamples``), queried again at the
    group's last evaluation, or at the data's end where that evaluation came after it (groups slower than their
    interval fall behind). Unlike its duration, this does not depend on how loaded the machine is."""
    out: dict[str, dict[str, int]] = {}
    for group in groups:
        last = datetime.datetime.fromisoformat(group["lastEvaluation"]).timestamp()
        at = f"{min(last, data_end):.3f}"
        for rule in group["rules"]:
            data = _query(base, {"query": rule["query"], "time": at, "stats": "all"})
            read = out.setdefault(group["name"], {})
            # An alert's severity tiers share its name: their samples add up.
            read[rule["name"]] = read.get(rule["name"], 0) + int(data["stats"]["samples"]["totalQueryableSamples"])
    return out


def peer_rules() -> dict[str, Any]:
    """node-mixin's node-exporter recording rules and node alerts, as kube-prometheus-stack runs them (selector
    ``job="node-exporter"``, its default disk device filter), written from their definitions."""
    sel = f'job="{PEER_JOB[NODE_EXPORTER]["job"]}"'
    disks = 'device=~"(/dev/)?(mmcblk.p.+|nvme.+|rbd.+|sd.+|vd.+|xvd.+|dm-.+|md.+|dasd.+)"'
    fs = f'{sel}, fstype!="", mountpoint!=""'
    records = {
        "instance:node_num_cpu:sum": f'count without (cpu, mode) (node_cpu_seconds_total{{{sel}, mode="idle"}})',
        "instance:node_cpu_utilisation:rate5m": (
            f'1 - avg without (cpu) (sum without (mode) (rate(node_cpu_seconds_total{{{sel}, '
            f'mode=~"idle|iowait|steal"}}[5m])))'),
        "instance:node_load1_per_cpu:ratio": f"node_load1{{{sel}}} / instance:node_num_cpu:sum{{{sel}}}",
        "instance:node_memory_utilisation:ratio": (
            f"1 - ((node_memory_MemAvailable_bytes{{{sel}}} or (node_memory_Buffers_bytes{{{sel}}} + "
            f"node_memory_Cached_bytes{{{sel}}} + node_memory_MemFree_bytes{{{sel}}} + "
            f"node_memory_Slab_bytes{{{sel}}})) / node_memory_MemTotal_bytes{{{sel}}})"),
        "instance:node_vmstat_pgmajfault:rate5m": f"rate(node_vmstat_pgmajfault{{{sel}}}[5m])",
        "instance_device:node_disk_io_time_seconds:rate5m": (
            f"rate(node_disk_io_time_seconds_total{{{sel}, {disks}}}[5m])"),
        "instance_device:node_disk_io_time_weighted_seconds:rate5m": (
            f"rate(node_disk_io_time_weighted_seconds_total{{{sel}, {disks}}}[5m])"),
    }
    for direction in ("receive", "transmit"):
        for what, series in (("bytes", f"node_network_{direction}_bytes_total"),
                             ("drop", f"node_network_{direction}_drop_total")):
            records[f"instance:node_network_{direction}_{what}_excluding_lo:rate5m"] = (
                f'sum without (device) (rate({series}{{{sel}, device!="lo"}}[5m]))')
    alerts = {
        "NodeFilesystemSpaceFillingUp": (
            f"(node_filesystem_avail_bytes{{{fs}}} / node_filesystem_size_bytes{{{fs}}} * 100 < 15 and "
            f"predict_linear(node_filesystem_avail_bytes{{{fs}}}[6h], 4*60*60) < 0 and "
            f"node_filesystem_readonly{{{fs}}} == 0)"),
        "NodeFilesystemAlmostOutOfSpace": (
            f"(node_filesystem_avail_bytes{{{fs}}} / node_filesystem_size_bytes{{{fs}}} * 100 < 5 and "
            f"node_filesystem_readonly{{{fs}}} == 0)"),
        "NodeFilesystemFilesFillingUp": (
            f"(node_filesystem_files_free{{{fs}}} / node_filesystem_files{{{fs}}} * 100 < 20 and "
            f"predict_linear(node_filesystem_files_free{{{fs}}}[6h], 4*60*60) < 0 and "
            f"node_filesystem_readonly{{{fs}}} == 0)"),
        "NodeNetworkReceiveErrs": (
            f"rate(node_network_receive_errs_total{{{sel}}}[2m]) / "
            f"rate(node_network_receive_packets_total{{{sel}}}[2m]) > 0.01"),
        "NodeNetworkTransmitErrs": (
            f"rate(node_network_transmit_errs_total{{{sel}}}[2m]) / "
            f"rate(node_network_transmit_packets_total{{{sel}}}[2m]) > 0.01"),
        "NodeHighNumberConntrackEntriesUsed": (
            f"(node_nf_conntrack_entries{{{sel}}} / node_nf_conntrack_entries_limit{{{sel}}}) > 0.75"),
        "NodeClockSkewDetected": (
            f"(node_timex_offset_seconds{{{sel}}} > 0.05 and deriv(node_timex_offset_seconds{{{sel}}}[5m]) >= 0) or "
            f"(node_timex_offset_seconds{{{sel}}} < -0.05 and deriv(node_timex_offset_seconds{{{sel}}}[5m]) <= 0)"),
        "NodeClockNotSynchronising": (
            f"min_over_time(node_timex_sync_status{{{sel}}}[5m]) == 0 and node_timex_maxerror_seconds{{{sel}}} >= 16"),
        "NodeFileDescriptorLimit": (
            f"(node_filefd_allocated{{{sel}}} * 100 / node_filefd_maximum{{{sel}}} > 70)"),
        "NodeCPUHighUsage": (
            f'sum without(mode) (avg without (cpu) (rate(node_cpu_seconds_total{{{sel}, mode!="idle"}}[2m]))) '
            "* 100 > 90"),
        "NodeSystemSaturation": (
            f"node_load1{{{sel}}} / count without (cpu, mode) (node_cpu_seconds_total{{{sel}, mode=\"idle\"}}) > 2"),
        "NodeMemoryMajorPagesFaults": f"rate(node_vmstat_pgmajfault{{{sel}}}[5m]) > 500",
        "NodeMemoryHighUtilization": (
            f"100 - (node_memory_MemAvailable_bytes{{{sel}}} / node_memory_MemTotal_bytes{{{sel}}} * 100) > 90"),
        "NodeDiskIOSaturation": f"rate(node_disk_io_time_weighted_seconds_total{{{sel}, {disks}}}[5m]) > 10",
    }
    return {"groups": [
        {"name": "node-exporter.rules", "rules": [{"record": k, "expr": v} for k, v in records.items()]},
        {"name": "node-exporter", "rules": [{"alert": k, "expr": v, "for": "15m", "labels": {"severity": "warning"}}
                                            for k, v in alerts.items()]},
    ]}


def rule_files(bundle: str, workdir: Path) -> list[Path]:
    if bundle == PEER:
        path = workdir / "peer-rules.yml"
        path.write_text(yaml.safe_dump(peer_rules(), sort_keys=False))
        return [path]
    recording, alerting, _ = committed_rules(bundle)
    return [ROOT / recording, ROOT / alerting]


def rules_of(paths: list[Path]) -> list[dict[str, Any]]:
    return [rule for path in paths for group in yaml.safe_load(path.read_text())["groups"] for rule in group["rules"]]


def longest_interval(paths: list[Path], default: str) -> str:
    """The longest ``interval`` of the groups in ``paths`` (``default``, the global one, for a group without):
    the data must last until the slowest group has been evaluated as often as measured."""
    groups = [group for path in paths for group in yaml.safe_load(path.read_text())["groups"]]
    intervals = [group.get("interval", default) for group in groups]
    return max(intervals or [default], key=seconds)


def windows_beyond_rate(paths: list[Path]) -> dict[str, int]:
    """Per family that a rule of ``paths`` reads over a window longer than WINDOW_SECONDS, how much longer (at most
    LONGEST_LEAD in all): how much earlier its data must start for that window to be full."""
    longest: dict[str, int] = {}
    for rule in rules_of(paths):
        for name, duration in RANGE.findall(rule["expr"]):
            window = min(LONGEST_LEAD, int(parse_duration(duration)))
            if window > WINDOW_SECONDS + longest.get(name, 0):
                longest[name] = window - WINDOW_SECONDS
    return longest


def read_names(paths: list[Path]) -> set[str]:
    """Every name a rule of ``paths`` mentions (a superset of the series they read)."""
    return {token for rule in rules_of(paths) for token in re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", rule["expr"])}


@dataclasses.dataclass
class Measured:
    durations: dict[str, list[float]]  # rule group → last_duration of each evaluation measured
    interval: float
    cpu_per_interval: float  # CPU seconds Prometheus spent per interval while measured (contention inflates
    # wall-clock durations on a shared machine, CPU time much less)
    recorded: int
    alerts: int
    fill: float  # the least share of a measured evaluation's rate window that the data covered
    costliest: list[tuple[float, str]]  # (seconds of its last evaluation, rule) of the ten slowest rules
    samples: dict[str, dict[str, int]]  # rule group → rule → samples its last evaluation read


def _own_metrics(base: str) -> tuple[dict[str, dict[str, float]], float]:
    """(rule group → {metric name: value} of Prometheus' own rule-group metrics, its CPU seconds so far)."""
    wanted = ("prometheus_rule_group_last_duration_seconds", "prometheus_rule_group_interval_seconds",
              "prometheus_rule_group_last_evaluation_timestamp_seconds")
    out: dict[str, dict[str, float]] = {}
    cpu = math.nan
    for family in text_string_to_metric_families(fetch_text(f"{base}/metrics")):
        for sample in family.samples:
            if sample.name in wanted:
                out.setdefault(sample.labels["rule_group"], {})[sample.name] = float(sample.value)
            elif sample.name == "process_cpu_seconds_total":
                cpu = float(sample.value)
    return out, cpu


def measure(name: str, paths: list[Path], block: Path, workdir: Path, evaluations: int, interval: str,
            data: tuple[int, int]) -> Measured:
    """Runs a Prometheus over a hard-linked copy of ``block`` with ``paths`` as its rules until every group has
    been evaluated ``evaluations`` + 1 times; the first is left out."""
    run = workdir / f"run-{name}"
    shutil.rmtree(run, ignore_errors=True)
    shutil.copytree(block, run / "data", copy_function=os.link)
    config = run / "prometheus.yml"
    config.write_text(yaml.safe_dump({
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        # The block reaches past now (see the module's docstring): records at now land below its end.
        "storage": {"tsdb": {"out_of_order_time_window": "2h"}},
        "rule_files": [str(p) for p in paths],
    }))
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with (run / "prometheus.log").open("wb") as log:
        proc = subprocess.Popen([shutil.which("prometheus") or "prometheus", f"--config.file={config}",
                                 f"--storage.tsdb.path={run / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
                                 "--storage.tsdb.retention.time=30d", "--log.level=warn"], stdout=log, stderr=log)
    try:
        fetch_text(f"{base}/-/ready", wait=600)
        seen: dict[str, float] = {}
        durations: dict[str, list[float]] = {}
        fill = 1.0
        cpu_from: tuple[float, float] | None = None  # (time, CPU seconds) at the first measured evaluation
        while True:
            groups, cpu = _own_metrics(base)
            for group, metrics in groups.items():
                last = metrics.get("prometheus_rule_group_last_evaluation_timestamp_seconds", 0.0)
                if last > 0 and last != seen.get(group):
                    if group in seen:  # not the first evaluation
                        cpu_from = cpu_from or (time.monotonic(), cpu)
                        durations.setdefault(group, []).append(metrics["prometheus_rule_group_last_duration_seconds"])
                        covered = min(last, data[1]) - max(last - WINDOW_SECONDS, data[0])
                        fill = min(fill, max(0.0, covered / WINDOW_SECONDS))
                    seen[group] = last
            if groups and all(len(durations.get(g, [])) >= evaluations for g in groups):
                break
            if proc.poll() is not None:
                raise RuntimeError(f"prometheus exited {proc.returncode}: {(run / 'prometheus.log').read_text()}")
            time.sleep(0.5)
        records = sorted({r["record"] for r in rules_of(paths) if "record" in r})
        pattern = "|".join(re.escape(r) for r in records)
        recorded = sum(int(s["value"][1]) for s in query(base, f'count by (__name__) ({{__name__=~"{pattern}"}})'))
        alerts = sum(int(s["value"][1]) for s in query(base, "count(ALERTS)"))
        rules = json.loads(fetch_text(f"{base}/api/v1/rules"))["data"]["groups"]
        costliest = sorted(((r["evaluationTime"], r["name"]) for g in rules for r in g["rules"]), reverse=True)[:10]
        shortest = min(m["prometheus_rule_group_interval_seconds"] for m in groups.values())
        assert cpu_from is not None
        cpu_rate = (cpu - cpu_from[1]) / (time.monotonic() - cpu_from[0])
        return Measured(durations, shortest, cpu_rate * shortest, recorded, alerts, fill, costliest,
                        samples_read(base, rules, data[1] - 1))
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        shutil.rmtree(run, ignore_errors=True)


def seconds(duration: str) -> int:
    match = re.fullmatch(r"(\d+)([smh])", duration)
    if match is None:
        raise ValueError(f"duration {duration!r}: expected <number>s, m or h")
    return int(match.group(1)) * {"s": 1, "m": 60, "h": 3600}[match.group(2)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--cpus-per-node", type=int, default=32)
    parser.add_argument("--ranks-per-job", type=int, default=32)
    parser.add_argument("--evaluations", type=int, default=3, help="evaluations measured per rule group")
    parser.add_argument("--bundles", nargs="*", default=[*BUNDLES, PEER], help=f"of {[*BUNDLES, PEER]}")
    parser.add_argument("--backfill-cost", type=float, default=None,
                        help="seconds to write and backfill one sample (default: measured on this machine, doubled)")
    parser.add_argument("--workdir", type=Path, default=None, help="where the block is built (default: a temp dir)")
    args = parser.parse_args(argv)
    for name in args.bundles:
        if name not in BUNDLES and name != PEER:
            parser.error(f"--bundles: unknown bundle {name!r}; known: {[*BUNDLES, PEER]}")
    if args.nodes < 1 or args.cpus_per_node < 1 or args.ranks_per_job < 1 or args.evaluations < 1:
        parser.error("--nodes, --cpus-per-node, --ranks-per-job and --evaluations must be at least 1")
    for tool in ("prometheus", "promtool"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is not installed: scripts/install-test-tools installs it")

    workdir = Path(tempfile.mkdtemp(prefix="fleet-rules-")) if args.workdir is None else args.workdir
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        return run(args, workdir)
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)


def collect(templates: Templates, fleet: Fleet, name: str,
            wanted: set[str]) -> tuple[dict[str, list[Sampled]], int, dict[str, int]]:
    """(the series of ``name``'s deployment that its rules read, by family; how many series it ingests in all;
    how many per node, by source)."""
    families: dict[str, list[Sampled]] = {}
    counted, per_node = 0, {}
    for n in range(fleet.nodes):
        for source, series in node_series(templates, fleet, n).items():
            for s in series:
                if not exposed(name, source, s):
                    continue
                counted += 1
                if n == 0:
                    per_node[source] = per_node.get(source, 0) + 1
                if s.name in wanted:
                    families.setdefault(s.name, []).append(Sampled(f"{s.name}{{{_labels(s.labels)}}} ", s.value,
                                                                   s.rate))
    return families, counted, per_node


def backfill(workdir: Path, families: dict[str, list[Sampled]], start: int, end: int, step: int,
             earlier: dict[str, int] | None = None) -> tuple[Path, int]:
    """A TSDB block of ``families`` from ``start`` (those of ``earlier`` that many seconds before) to ``end``,
    written by promtool: (its folder, samples)."""
    text = workdir / "fleet.om"
    samples = write_openmetrics(text, families, start - start % step, end - end % step, step, earlier)
    block = workdir / "block"
    shutil.rmtree(block, ignore_errors=True)
    subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", str(text), str(block)],
                   check=True, stdout=subprocess.DEVNULL)
    text.unlink()
    return block, samples


def calibrate(workdir: Path, step: int) -> float:
    """Seconds to write and backfill one sample on this machine now (a small block, thrown away)."""
    families = {"fleet_calibration_total": [Sampled(f'fleet_calibration_total{{instance="node-{i:05d}",cpu="{i}"}} ',
                                                    1000.0 + i, 0.5) for i in range(2000)]}
    now = int(time.time())
    began = time.monotonic()
    block, samples = backfill(workdir, families, now - 100 * step, now, step)
    shutil.rmtree(block)
    return (time.monotonic() - began) / samples


def run(args: argparse.Namespace, workdir: Path) -> int:
    shipped = yaml.safe_load(prometheus_config(next(iter(BUNDLES))))["global"]
    scrape, interval = seconds(shipped["scrape_interval"]), shipped["evaluation_interval"]
    fleet = Fleet(args.nodes, args.cpus_per_node, args.ranks_per_job)
    templates = Templates.load(workdir)
    first = node_series(templates, fleet, 0)
    print(f"# series per node of the peers' defaults ({fleet.cpus} CPUs, {GPUS_PER_NODE} GPUs): "
          f"{NODE_EXPORTER}={len(first[NODE_EXPORTER])} {DCGM}={len(first[DCGM])} "
          f"both={len(first[NODE_EXPORTER]) + len(first[DCGM])}", file=sys.stderr)
    # Seconds per sample to write and backfill: over-estimated on purpose, since a Prometheus ready early waits
    # for the data's planned start, while one ready late sees part-empty windows.
    cost = args.backfill_cost if args.backfill_cost is not None else PESSIMISM * calibrate(workdir, scrape)

    for name in args.bundles:
        paths = rule_files(name, workdir)
        families, counted, per_node = collect(templates, fleet, name, read_names(paths) | {"up"})
        print(f"# series per node, {name}: " + " ".join(f"{k}={v}" for k, v in sorted(per_node.items()))
              + f" total={sum(per_node.values())}", file=sys.stderr)
        evaluation = longest_interval(paths, PEER_INTERVAL if name == PEER else interval)
        # The data covers a rate window before the first evaluation and lasts to the last one: it starts
        # and ends by when Prometheus will be ready, after writing and backfilling (``cost`` per sample).
        measured = (args.evaluations + 1) * seconds(evaluation)
        earlier = windows_beyond_rate(paths)
        written = sum(len(s) for s in families.values())
        planned = sum(len(s) * ((WINDOW_SECONDS + earlier.get(f, 0) + measured) // scrape + 3)
                      for f, s in families.items())
        ready = int(time.time() + planned * cost + STARTUP_SECONDS)
        began = time.monotonic()
        block, samples = backfill(workdir, families, ready - WINDOW_SECONDS - 2 * scrape, ready + measured + scrape,
                                  scrape, earlier)
        took = time.monotonic() - began
        longer = ", ".join(f"{f} from ready - {WINDOW_SECONDS + lead + 2 * scrape} s" for f, lead in sorted(
            earlier.items()) if f in families)
        print(f"# {name}: {written} series backfilled ({samples} samples in {took:.0f} s, "
              f"{ready - STARTUP_SECONDS - time.time():.0f} s ahead of plan); "
              f"data from ready - {WINDOW_SECONDS + 2 * scrape} s to ready + {measured + scrape} s"
              + (f" ({longer}: the longer windows its rules read them over)" if longer else ""), file=sys.stderr)
        if args.backfill_cost is None:
            cost = PESSIMISM * took / samples  # the next bundle's: this machine, as loaded as it is now
        time.sleep(max(0.0, ready - STARTUP_SECONDS - time.time()))
        got = measure(name, paths, block, workdir, args.evaluations, evaluation,
                      (ready - WINDOW_SECONDS - 2 * scrape, ready + measured + scrape))
        shutil.rmtree(block)
        medians = {g: statistics.median(d) for g, d in got.durations.items()}
        for group, median in sorted(medians.items()):
            short = group.split(";", 1)[-1]
            print(f"# {name} group {short}: median {median:.4f} s of "
                  f"{' '.join(f'{d:.4f}' for d in got.durations[group])}; "
                  f"{sum(got.samples.get(short, {}).values())} samples read", file=sys.stderr)
        most = sorted(((n, rule) for rules in got.samples.values() for rule, n in rules.items()), reverse=True)
        print(f"# {name}: {sum(n for n, _ in most)} samples read per evaluation of every group; the most: "
              + ", ".join(f"{rule} {n}" for n, rule in most[:10]), file=sys.stderr)
        print(f"# {name}: {got.alerts} ALERTS series; Prometheus used {got.cpu_per_interval:.3f} CPU seconds per "
              f"{got.interval:g} s interval while measured; the rate windows were at least {got.fill:.0%} "
              "covered by data", file=sys.stderr)
        print(f"# {name}: slowest rules: " + ", ".join(f"{rule} {t:.3f} s" for t, rule in got.costliest),
              file=sys.stderr)
        if got.fill < 0.9:
            print(f"# {name}: windows part empty: the backfill took longer than planned (raise --backfill-cost)",
                  file=sys.stderr)
        key = "peer" if name == PEER else "bundle"
        print(f"fleet nodes={fleet.nodes} gpus_per_node={GPUS_PER_NODE} {key}={name} series={counted} "
              f"recorded_series={got.recorded} rule_groups_eval_seconds={sum(medians.values()):.4f} "
              f"interval_seconds={got.interval:g}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
