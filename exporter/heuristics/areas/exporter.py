"""The exporter area: the monitoring itself (the scrape, the exporter's collectors).

Reads Prometheus' ``up`` of the exporters' scrape job (``${exporter_job}``) and the exporter's
``bottleneck_scrape_collector_success``. Exposes ``AREA``: the verdicts of the alert group
``bottleneck-exporter`` (exporter down, absent, a collector failing); it records nothing::

    ALERTS{alertname="BottleneckExporterDown",instance="gpu-node-1:9847",job="bottleneck-exporter"} 1

Its scenarios are in ``bottleneck_exporter.heuristics.scenarios.exporter``.
"""

from __future__ import annotations

from bottleneck_exporter.heuristics.model import Area, Heuristic, Tier

HEURISTICS: tuple[Heuristic, ...] = (
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

AREA = Area("exporter", heuristics=HEURISTICS)
