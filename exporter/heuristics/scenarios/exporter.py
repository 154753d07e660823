"""The scenarios of the exporter area's verdicts (``areas/exporter.py``): an exporter down or missing, a collector
failing.

Used at build time and by tests only: the daemon never imports it.
"""

from __future__ import annotations

from bottleneck_exporter.heuristics.scenarios.builders import collectors, scrape_up
from bottleneck_exporter.heuristics.scenarios.series import EXPORTER_JOB, INSTANCE, series
from bottleneck_exporter.heuristics.scenarios.table import FIRES, NEAR_MISS, NODE1, NOT_YET, Expect, Scenario, row

e = Expect  # one expected alert instance: e(labels, value)

SCENARIOS: tuple[Scenario, ...] = (
    # -- the monitoring itself -----------------------------------------------------------------------------------------
    row("ExporterDown", FIRES, "exporter_unreachable_for_12m", lambda t: scrape_up(t, lambda m: True),
        e(NODE1, 0), severity="critical"),
    row("ExporterDown", NEAR_MISS, "scrapes_failed_3m_then_recovered",
        lambda t: scrape_up(t, lambda m: 3 <= m < 6), severity="critical"),
    row("ExporterDown", NEAR_MISS, "other_jobs_down_do_not_count",
        lambda t: scrape_up(t, lambda m: True, job="node-exporter") + scrape_up(t, lambda m: False),
        severity="critical"),
    row("ExporterDown", NOT_YET, "exporter_stopped_recently",
        lambda t: scrape_up(t, lambda m: m >= t.start), e(NODE1, 0), severity="critical"),
    row("ExporterAbsent", FIRES, "scrape_job_named_gpu_nodes_not_bottleneck_exporter",
        lambda t: scrape_up(t, lambda m: False, job="gpu-nodes"), e({"job": EXPORTER_JOB}, 1)),
    row("ExporterAbsent", NEAR_MISS, "every_exporter_down_is_exporter_down_not_absent",
        lambda t: scrape_up(t, lambda m: True)),
    row("ExporterAbsent", NOT_YET, "exporters_left_service_discovery_recently",
        lambda t: [series("up", {"instance": INSTANCE, "job": EXPORTER_JOB},
                          [None if m >= t.start else 1.0 for m in range(t.length + 1)])],
        e({"job": EXPORTER_JOB}, 1)),
    row("CollectorFailing", FIRES, "gpu_collector_fails_every_scrape", lambda t: collectors(t, lambda m: True),
        e({**NODE1, "collector": "gpu"}, 0)),
    row("CollectorFailing", NEAR_MISS, "gpu_collector_fails_every_other_minute",
        lambda t: collectors(t, lambda m: m % 2 == 0)),
    row("CollectorFailing", NOT_YET, "gpu_collector_started_failing_recently",
        lambda t: collectors(t, lambda m: m >= t.start), e({**NODE1, "collector": "gpu"}, 0)),
)
