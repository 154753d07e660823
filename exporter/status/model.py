"""What the status page shows, as plain data: the JSON twin (``/status.json``) and the HTML page render it.

Built from the recorder's snapshots (the exporter's own recent collections) and the running parts, when the
page is asked for: each collector's success and duration, the GPUs NVML reports, the push receiver's socket,
each training job and rank with the age of its last step and the split of its recent steps into phases, and the
verdicts the catalogue gives over the recorded span.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from bottleneck_exporter.status.recorder import Snapshot
from bottleneck_exporter.status.verdicts import Verdicts, evaluate
from bottleneck_exporter.wire.schema import JOB_LABEL, STEP, STEP_PHASES

# Phases of a step as the hook partitions it (docs/hook.md); "other" is the rest of the step: your own code.
PHASES = (*STEP_PHASES, "other")
# Series the page reads besides those the catalogue reads (the recorder keeps both).
PAGE_NAMES = frozenset({
    "bottleneck_scrape_collector_success", "bottleneck_scrape_collector_duration_seconds",
    "bottleneck_gpu_up", "bottleneck_gpu_info", "bottleneck_gpu_utilization_ratio",
    "bottleneck_gpu_memory_used_bytes", "bottleneck_gpu_memory_total_bytes",
    "bottleneck_push_datagrams_total", "bottleneck_push_rejected_total", "bottleneck_push_jobs",
    "bottleneck_train_steps_total", "bottleneck_train_phase_seconds_total",
    "bottleneck_train_last_step_timestamp_seconds", "bottleneck_train_dataloader_num_workers",
})


def build(snapshots: Sequence[Snapshot], parts: Mapping[str, Any], facts: Mapping[str, Any],
          now: float | None = None, verdicts: Verdicts | None = None) -> dict[str, Any]:
    """The page's data. ``facts``: version, instance, listen_address, telemetry_path, started_at, ready;
    ``verdicts``: already evaluated over these snapshots, else evaluated here."""
    now = time.time() if now is None else now
    last = snapshots[-1] if snapshots else None
    if verdicts is None:
        verdicts = evaluate(snapshots, str(facts.get("instance", "")))
    return {
        "exporter": {**facts, "uptime_seconds": now - float(facts.get("started_at", now))},
        "collection": {"at": last.at if last else None, "age_seconds": now - last.at if last else None,
                       "snapshots": len(snapshots),
                       "span_seconds": snapshots[-1].at - snapshots[0].at if snapshots else 0.0},
        "collectors": _collectors(last),
        "gpu": _gpu(last, parts),
        "push": _push(last, parts),
        "jobs": _jobs(snapshots, now),
        "verdicts": {
            "window_seconds": verdicts.window_seconds, "snapshots": verdicts.snapshots,
            "findings": [finding.as_dict() for finding in verdicts.findings],
            "errors": [{"alert": alert, "error": error} for alert, error in verdicts.errors],
            "missing": verdicts.missing,
            "bundle": verdicts.bundle, "peers": verdicts.peers,
        },
    }


def _collectors(last: Snapshot | None) -> list[dict[str, Any]]:
    if last is None:
        return []
    durations = {labels["collector"]: value
                 for labels, value in last.values("bottleneck_scrape_collector_duration_seconds")}
    return [{"name": labels["collector"], "success": value == 1.0,
             "duration_seconds": durations.get(labels["collector"])}
            for labels, value in sorted(last.values("bottleneck_scrape_collector_success"),
                                        key=lambda item: item[0]["collector"])]


def _gpu(last: Snapshot | None, parts: Mapping[str, Any]) -> dict[str, Any]:
    collector = parts.get("gpu")
    if collector is None:
        return {"state": "off", "detail": "the gpu collector is off", "gpus": []}
    backend = getattr(collector, "backend", None)
    recorded = type(backend).__module__.endswith(".fake")
    if last is None:
        return {"state": "unknown", "detail": "no collection yet", "gpus": []}

    def per_gpu(name: str) -> dict[str, float]:
        return {labels["gpu"]: value for labels, value in last.values(name)}

    names = {labels["gpu"]: labels.get("name", "") for labels, _ in last.values("bottleneck_gpu_info")}
    util, used = per_gpu("bottleneck_gpu_utilization_ratio"), per_gpu("bottleneck_gpu_memory_used_bytes")
    total = per_gpu("bottleneck_gpu_memory_total_bytes")
    gpus = [{"gpu": labels["gpu"], "uuid": labels.get("uuid", ""), "name": names.get(labels["gpu"], ""),
             "up": value == 1.0, "utilization_ratio": util.get(labels["gpu"]),
             "memory_used_bytes": used.get(labels["gpu"]), "memory_total_bytes": total.get(labels["gpu"])}
            for labels, value in sorted(last.values("bottleneck_gpu_up"), key=lambda item: _gpu_order(item[0]))]
    if not gpus:
        return {"state": "unavailable", "gpus": [],
                "detail": "NVML not available (no NVIDIA driver, or no GPU): no GPU metrics; the log says why"}
    lost = sum(1 for gpu in gpus if not gpu["up"])
    source = "a recorded profile (--collector.gpu.profile)" if recorded else "NVML"
    detail = f"{len(gpus)} GPU(s) through {source}" + (f", {lost} lost (fell off the bus)" if lost else "")
    return {"state": "ok" if not lost else "degraded", "detail": detail, "recorded": recorded, "gpus": gpus}


def _gpu_order(labels: Mapping[str, str]) -> tuple[int, ...]:
    return tuple(int(part) if part.isdigit() else 0 for part in labels["gpu"].split("/"))


def _push(last: Snapshot | None, parts: Mapping[str, Any]) -> dict[str, Any]:
    receiver = parts.get("push")
    if receiver is None:
        return {"state": "off", "detail": "not running (--push.disable, or no usable socket: the log says which)"}
    udp = receiver.udp_address
    datagrams = rejected = jobs = 0.0
    if last is not None:
        datagrams = sum(value for _, value in last.values("bottleneck_push_datagrams_total"))
        rejected = sum(value for _, value in last.values("bottleneck_push_rejected_total"))
        jobs = sum(value for _, value in last.values("bottleneck_push_jobs"))
    return {"state": "listening", "unix_socket": receiver.unix_path,
            "udp": f"{udp[0]}:{udp[1]}" if udp else None,
            "datagrams": datagrams, "rejected": rejected, "jobs": jobs}


def _jobs(snapshots: Sequence[Snapshot], now: float) -> list[dict[str, Any]]:
    if not snapshots:
        return []
    last = snapshots[-1]
    ranks: dict[tuple[str, str], dict[str, Any]] = {}
    for labels, steps in last.values("bottleneck_train_steps_total"):
        key = _rank_key(labels)
        ranks[key] = {"job": key[0], "rank": key[1], "steps": steps}
    for labels, stamp in last.values("bottleneck_train_last_step_timestamp_seconds"):
        key = _rank_key(labels)
        if key in ranks:
            ranks[key]["last_step_age_seconds"] = max(0.0, now - stamp)
    for labels, workers in last.values("bottleneck_train_dataloader_num_workers"):
        key = _rank_key(labels)
        if key in ranks:
            ranks[key]["num_workers"] = int(workers)
    latest = _phase_totals(last)
    oldest = _oldest_totals(snapshots, set(latest))
    for key, rank in ranks.items():
        rank.update(_phases(latest.get(key), oldest.get(key)))
    jobs: dict[str, list[dict[str, Any]]] = {}
    for key in sorted(ranks, key=lambda k: (k[0], int(k[1]) if k[1].isdigit() else 0)):
        jobs.setdefault(key[0], []).append(ranks[key])
    return [{"job": job, "ranks": job_ranks} for job, job_ranks in jobs.items()]


def _rank_key(labels: Mapping[str, str]) -> tuple[str, str]:
    """(training job, rank) of a per-rank series."""
    return labels.get(JOB_LABEL, ""), labels.get("rank", "")


Totals = tuple[dict[str, float], float]  # a rank's phase seconds and its steps, as counted since it started


def _phase_totals(snapshot: Snapshot) -> dict[tuple[str, str], Totals]:
    """Each rank's totals in ``snapshot``, in one pass over its series: at the push bounds a snapshot holds
    thousands of series, and a pass per rank made the page cost more than the collection it shows."""
    phases: dict[tuple[str, str], dict[str, float]] = {}
    steps: dict[tuple[str, str], float] = {}
    for (name, labels), value in zip(snapshot.series, snapshot.numbers, strict=True):
        if name == "bottleneck_train_phase_seconds_total":
            found = dict(labels)
            phases.setdefault(_rank_key(found), {})[found.get("phase", "")] = value
        elif name == "bottleneck_train_steps_total":
            steps.setdefault(_rank_key(dict(labels)), value)
    return {key: (by_phase, steps[key]) for key, by_phase in phases.items() if STEP in by_phase and key in steps}


def _oldest_totals(snapshots: Sequence[Snapshot], wanted: set[tuple[str, str]]) -> dict[tuple[str, str], Totals]:
    """Each wanted rank's totals in the oldest snapshot that has them; usually the oldest of all, so the scan
    stops there."""
    found: dict[tuple[str, str], Totals] = {}
    for snapshot in snapshots:
        if not wanted:
            break
        totals = _phase_totals(snapshot)
        for key in wanted & totals.keys():
            found[key] = totals[key]
        wanted = wanted - totals.keys()
    return found


def _phases(latest: Totals | None, oldest: Totals | None) -> dict[str, Any]:
    """The split of the rank's recent steps: the oldest recorded totals against the latest (the whole run when
    no step finished in between), in seconds and as shares of the step."""
    if latest is None:
        return {"phase_seconds": {}, "phase_ratios": {}}
    phases, steps = latest
    since = "recent"
    if oldest is not None and steps - oldest[1] > 0 and phases[STEP] - oldest[0].get(STEP, 0.0) > 0:
        phases = {name: value - oldest[0].get(name, 0.0) for name, value in phases.items()}
        steps -= oldest[1]
    else:
        since = "start"
    step = phases[STEP]
    seconds = {name: max(0.0, phases.get(name, 0.0)) for name in PHASES[:-1]}
    seconds["other"] = max(0.0, step - sum(seconds.values()))
    ratios = {name: value / step if step > 0 else 0.0 for name, value in seconds.items()}
    return {"phase_seconds": seconds, "phase_ratios": ratios, "phases_over": since, "window_steps": steps,
            "step_seconds": step / steps if steps > 0 else None}
