"""The catalogue judged over sampled series: which alert conditions hold at the last sample, since when, and which
data nothing provided.

Reads a ``Samples`` (a series store labelled as Prometheus would, and the times it was sampled at; built by
``verdicts.sampling.Sampler`` or from the status page's recorder) and evaluates every alert expression of a
bundle with the Python evaluator (``bottleneck_exporter.heuristics.promql``), rate windows being the sampled
span. ``for:`` is respected as far as the samples allow: the expressions are evaluated at every sample time, and
a verdict whose condition has not held for its ``for:`` is pending, with the seconds it still needs::

    Finding(rule=<BottleneckInputBound warning>, labels={"instance": "node-1", "training_job": "resnet",
            "rank": "0"}, value=0.82, state="pending", needs_seconds=120.0)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from bottleneck_exporter.heuristics import (
    DCGM_TWINS,
    DEFAULT_BUNDLE,
    NODE_EXPORTER,
    NODE_EXPORTER_TWINS,
    SEVERITIES,
    AlertRule,
    Catalogue,
    gotemplate,
    resolve,
)
from bottleneck_exporter.heuristics.promql import PromQLError, SeriesStore, parse, parse_duration
from bottleneck_exporter.heuristics.promql import evaluate as evaluate_expression
from bottleneck_exporter.verdicts.peers import URL_FLAGS
from bottleneck_exporter.wire.schema import JOB_LABEL

SEVERITY_RANK = {severity: rank for rank, severity in enumerate(SEVERITIES)}
# What each family tells (ours, or its twin from node_exporter or dcgm-exporter); shown when none of them is
# there, because the rules that need it cannot fire then.
DATA_HINTS = (
    (("bottleneck_train_steps_total",), "training telemetry: no process instrumented with the hook pushed to "
                                        "the exporter (docs/hook.md)"),
    (("bottleneck_gpu_up", DCGM_TWINS["bottleneck_gpu_utilization_ratio"][0].series),
     "GPU metrics: no NVML GPU (or the gpu collector is off), no dcgm-exporter series"),
    (("bottleneck_training_process_info",), "training processes: none found on the node(s)"),
    (("bottleneck_cpu_seconds_total", NODE_EXPORTER_TWINS["bottleneck_cpu_seconds_total"][0].series),
     "host CPU metrics: the cpu collector is off and no node_exporter series (beside node_exporter: "
     f"{URL_FLAGS[NODE_EXPORTER]}, docs/coexistence.md)"),
)


@dataclasses.dataclass
class Finding:
    rule: AlertRule
    labels: dict[str, str]
    value: float
    state: str | None = None  # firing / pending (Prometheus' ALERTS, or from the samples)
    needs_seconds: float | None = None  # pending, from the samples: how much longer the condition must hold

    @property
    def evidence(self) -> str:
        return gotemplate.render(self.rule.description, self.labels, self.value)

    @property
    def subject(self) -> str:
        """Where the verdict belongs: a training job for per-rank and per-job verdicts, the scrape job for a
        verdict about it as a whole (no exporter scraped), else a node."""
        scope = self.rule.heuristic.scope
        if JOB_LABEL in scope:
            return f"job {self.labels.get(JOB_LABEL, '?')}"
        if "job" in scope and "instance" not in scope:
            return f"scrape job {self.labels.get('job', '?')}"
        return f"node {self.labels.get('instance', '?')}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "alert": self.rule.alert, "heuristic": self.rule.heuristic.name, "verdict": self.rule.heuristic.verdict,
            "severity": self.rule.severity, "subject": self.subject, "labels": self.labels,
            "value": None if math.isnan(self.value) else self.value, "unit": self.rule.heuristic.unit,
            "evidence": self.evidence, "advice": self.rule.advice, "runbook_url": self.rule.runbook_url,
            "state": self.state, "needs_seconds": self.needs_seconds,
        }


@dataclasses.dataclass
class Samples:
    """Sampled series, labelled as a Prometheus scrape labels them, and when our exporter was sampled."""

    store: SeriesStore
    times: list[float]  # oldest first

    @property
    def span(self) -> float:
        return self.times[-1] - self.times[0] if self.times else 0.0


@dataclasses.dataclass
class Evaluation:
    catalogue: Catalogue  # resolved with the rate window the samples allow
    at: float  # the last sample time: where every expression was evaluated
    window_seconds: float  # the sampled span
    findings: list[Finding]
    errors: list[tuple[str, str]]  # (alert, message)
    missing: list[str]  # DATA_HINTS whose series nothing provided


def labels_of(metric: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in metric.items() if k != "__name__"}


def ordered(findings: Iterable[Finding]) -> list[Finding]:
    """Ordered by subject and severity; a warning whose critical twin holds is left out, as Alertmanager's
    inhibition (alerts/alertmanager.yml) leaves it out."""
    findings = list(findings)
    critical = {(f.rule.alert, tuple(sorted(f.labels.items()))) for f in findings if f.rule.severity == "critical"}
    findings = [f for f in findings
                if f.rule.severity != "warning" or (f.rule.alert, tuple(sorted(f.labels.items()))) not in critical]
    return sorted(findings, key=lambda f: (f.subject, SEVERITY_RANK[f.rule.severity], f.rule.alert,
                                           sorted(f.labels.items())))


def exporter_job(overrides: Mapping[str, object] | None = None) -> str:
    """The scrape job our exporter's samples belong to (the catalogue's ``exporter_job``)."""
    return str(resolve(overrides).parameters["exporter_job"])


def evaluate(samples: Samples, bundle: str = DEFAULT_BUNDLE, overrides: Mapping[str, object] | None = None,
             window: float | None = None, hold_for: bool = True) -> Evaluation:
    """Every alert of ``bundle`` (parameters ``overrides``) at the last sample time. ``window``: the rate window
    in seconds (default: the sampled span, so that a rate covers every sample). ``hold_for``: judge each
    finding's ``for:`` over the sample times (firing or pending); without it a finding's state is unknown
    (None). Raises ValueError without samples, CatalogueError for a bad override."""
    if not samples.times:
        raise ValueError("no samples to evaluate")
    rate_window = max(1, math.ceil(samples.span) + 1) if window is None else max(1, math.ceil(window))
    catalogue = resolve({**(overrides or {}), "rate_window": f"{rate_window}s"}, bundle=bundle)
    at = samples.times[-1]
    findings, errors = findings_at(catalogue, samples.store, at)
    if hold_for:
        hold_states(catalogue, samples.store, samples.times, findings)
    return Evaluation(catalogue, at, samples.span, findings, errors, missing_in(samples.store))


def findings_at(catalogue: Catalogue, store: SeriesStore, at: float) -> tuple[list[Finding], list[tuple[str, str]]]:
    """Evaluate every alert expression of ``catalogue`` over ``store`` at ``at``: (findings, (alert, error))."""
    findings: list[Finding] = []
    errors: list[tuple[str, str]] = []
    for rule in catalogue.alerts:
        try:
            result = evaluate_expression(parse(rule.inline_expr), store, at)
        except PromQLError as err:
            errors.append((rule.alert, str(err)))
            continue
        if isinstance(result, float):
            errors.append((rule.alert, "expression returned a scalar"))
            continue
        findings.extend(Finding(rule, labels_of(s.labels), s.value) for s in result)
    return ordered(findings), errors


def hold_states(catalogue: Catalogue, store: SeriesStore, times: Sequence[float], findings: list[Finding]) -> None:
    """Set each finding's state as Prometheus' ``for:`` would, evaluating at every sample time: firing when its
    condition held at every sample for at least its ``for:``, else pending with the seconds it still needs."""
    if not times:
        return
    active: dict[tuple[str, str], list[set[tuple[tuple[str, str], ...]]]] = {}
    parsed = {(rule.alert, rule.severity): parse(rule.inline_expr) for rule in catalogue.alerts}
    for at in times:
        for key, node in parsed.items():
            try:
                result = evaluate_expression(node, store, at)
            except PromQLError:
                result = []
            held = {tuple(sorted(labels_of(s.labels).items())) for s in result} if isinstance(result, list) else set()
            active.setdefault(key, []).append(held)
    for finding in findings:
        key = (finding.rule.alert, finding.rule.severity)
        labels = tuple(sorted(finding.labels.items()))
        since = times[-1]
        for at, held in zip(reversed(times), reversed(active.get(key, [])), strict=False):
            if labels not in held:
                break
            since = at
        missing = parse_duration(finding.rule.for_) - (times[-1] - since)
        finding.state = "firing" if missing <= 0 else "pending"
        finding.needs_seconds = None if missing <= 0 else missing


def missing_in(store: SeriesStore) -> list[str]:
    names = {labels["__name__"] for labels, _, _ in store.series()}
    return [hint for families, hint in DATA_HINTS if not names.intersection(families)]
