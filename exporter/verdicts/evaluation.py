"""The catalogue judged over sampled series: which alert conditions hold at the last sample, how long they held
within the samples, and which data nothing provided.

Reads a ``Samples`` (a series store labelled as Prometheus would, and the times it was sampled at; built by
``verdicts.sampling.Sampler`` or from the status page's recorder) and evaluates every alert expression of a
bundle with the Python evaluator (``bottleneck_exporter.heuristics.promql``), rate windows being the sampled
span. The expressions are evaluated again at every sample time, each over the samples up to it, so each finding
says how long its condition held up to the last sample (``Held``): throughout the time its subject was sampled,
partly (the last N seconds, at least half that time), or briefly (less: it may be noise). ``for:`` belongs to the
alerts: what a Prometheus would say after the same samples (pending, with the seconds it still needs, or
firing) is kept beside it::

    Finding(rule=<BottleneckInputBound warning>, labels={"instance": "node-1", "training_job": "resnet",
            "rank": "0"}, value=0.82, state="pending", needs_seconds=245.0,
            held=Held(state="throughout", seconds=55.0, seen_seconds=60.0, window_seconds=60.0))
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
# How long a condition held within the samples (``Held.state``). Only the first two weigh as verdicts: a
# condition that held for less than half the time its subject was sampled may be noise, and a false alarm costs
# the report its trust.
THROUGHOUT, PARTLY, BRIEFLY = "throughout", "partly", "briefly"
HELD_STATES = (THROUGHOUT, PARTLY, BRIEFLY)
# The labels that say whose series a finding is about: the samples of those series tell when its subject was
# first sampled (a training job started after the sampling did).
SUBJECT_LABELS = ("instance", "job", JOB_LABEL, "rank", "gpu", "uuid")
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


@dataclasses.dataclass(frozen=True)
class Held:
    """How long a finding's condition held within the samples, up to the last one.

    ``seconds``: since the first sample of its last unbroken run of samples where it held (as Prometheus counts
    toward ``for:``; 0 when it held at the last sample only). ``seen_seconds``: since its subject's series were
    first sampled (a job that started late is judged over the time it ran). ``state``: THROUGHOUT when it held at
    every sample since then (but the first: a rate needs two), PARTLY when it held at least half that time,
    BRIEFLY otherwise."""

    state: str
    seconds: float
    seen_seconds: float
    window_seconds: float

    @property
    def weighs(self) -> bool:
        """Whether it counts as a verdict (THROUGHOUT or PARTLY), not as a condition that held briefly."""
        return self.state != BRIEFLY

    def as_dict(self) -> dict[str, Any]:
        return {"state": self.state, "held_seconds": self.seconds, "seen_seconds": self.seen_seconds,
                "window_seconds": self.window_seconds}


@dataclasses.dataclass
class Finding:
    rule: AlertRule
    labels: dict[str, str]
    value: float
    # The alert's state: Prometheus' (its ALERTS series), or what a Prometheus would give after the same samples:
    # firing once the condition held for its for:, pending before.
    state: str | None = None
    needs_seconds: float | None = None  # pending, from the samples: how much longer the condition must hold
    held: Held | None = None  # from the samples: how long the condition held within them

    @property
    def weighs(self) -> bool:
        """Whether it counts as a verdict: a sampled condition that held briefly does not."""
        return self.held is None or self.held.weighs

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
            "for": self.rule.for_, "for_seconds": parse_duration(self.rule.for_),
            "sampled": None if self.held is None else self.held.as_dict(),
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
    samples: Samples | None = None  # what was evaluated (the report reads the step breakdown from it)
    # Alerts not judged: trends the sampled span is too short for (Heuristic.sampled_over), with the seconds each needs.
    too_short: list[tuple[str, float]] = dataclasses.field(default_factory=list)


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
    in seconds (default: the sampled span, so that a rate covers every sample). ``hold_for``: judge over the
    sample times how long each finding held (``held``) and its alert's ``for:`` (firing or pending); without it
    both are unknown (None). Raises ValueError without samples, CatalogueError for a bad override."""
    if not samples.times:
        raise ValueError("no samples to evaluate")
    rate_window = max(1, math.ceil(samples.span) + 1) if window is None else max(1, math.ceil(window))
    catalogue = resolve({**(overrides or {}), "rate_window": f"{rate_window}s"}, bundle=bundle)
    catalogue, too_short = judged_over(catalogue, samples.span, samples.store)
    at = samples.times[-1]
    findings, errors = findings_at(catalogue, samples.store, at)
    if hold_for:
        hold_states(catalogue, samples.store, samples.times, findings)
    return Evaluation(catalogue, at, samples.span, findings, errors, missing_in(samples.store), samples, too_short)


def judged_over(catalogue: Catalogue, span: float, store: SeriesStore) -> tuple[Catalogue, list[tuple[str, float]]]:
    """``catalogue`` without the alerts whose trend ``span`` seconds of samples cannot tell, and those of them
    whose series ``store`` has (the others could not hold anyway), with the span each needs."""
    short = {rule.alert: (rule, seconds) for rule in catalogue.alerts
             if rule.heuristic.sampled_over and span < (seconds := parse_duration(rule.heuristic.sampled_over))}
    # Only where a trend is left out: reading every series' name is not free at every evaluation (status page).
    present = {labels["__name__"] for labels, _, _ in store.series()} if short else set()
    said = sorted((alert, seconds) for alert, (rule, seconds) in short.items()
                  if set(catalogue.reads.get(rule.heuristic.name, ())) <= present)
    kept = tuple(rule for rule in catalogue.alerts if rule.alert not in short)
    return dataclasses.replace(catalogue, alerts=kept), said


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
    """Set how long each finding held within ``times`` (``held``) and its alert's state as Prometheus' ``for:``
    would give it, evaluating every expression at every sample time: firing when its condition held at every
    sample for at least its ``for:``, else pending with the seconds it still needs."""
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
    first_seen = _first_seen(store)
    for finding in findings:
        key = (finding.rule.alert, finding.rule.severity)
        labels = tuple(sorted(finding.labels.items()))
        since = len(times) - 1
        for index, held in reversed(list(enumerate(active.get(key, [])))):
            if labels not in held:
                break
            since = index
        seen = _seen_index(times, first_seen, finding.labels)
        finding.held = _held(times, since, seen)
        missing = parse_duration(finding.rule.for_) - finding.held.seconds
        finding.state = "firing" if missing <= 0 else "pending"
        finding.needs_seconds = None if missing <= 0 else missing


def _held(times: Sequence[float], since: int, seen: int) -> Held:
    """Held from ``times[since]`` to the last sample, its subject sampled from ``times[seen]``."""
    last = times[-1]
    seconds, seen_seconds = last - times[since], last - times[min(seen, since)]
    if seconds > 0 and since <= seen + 1:
        state = THROUGHOUT
    elif seconds > 0 and seconds >= seen_seconds / 2:
        state = PARTLY
    else:
        state = BRIEFLY
    return Held(state, seconds, seen_seconds, last - times[0])


def _first_seen(store: SeriesStore) -> list[tuple[dict[str, str], float]]:
    """Each series' subject labels and its first sample time."""
    return [({k: v for k, v in labels.items() if k in SUBJECT_LABELS}, series_times[0])
            for labels, series_times, _ in store.series() if series_times]


def _seen_index(times: Sequence[float], first_seen: Iterable[tuple[dict[str, str], float]],
                labels: Mapping[str, str]) -> int:
    """The index of the first sample time at which a series of the finding's subject was sampled (0 when no
    series carries its labels: an aggregate's, or a label a rule made)."""
    subject = {k: v for k, v in labels.items() if k in SUBJECT_LABELS}
    earliest = min((at for series, at in first_seen if subject.items() <= series.items()), default=times[0])
    return next((index for index, at in enumerate(times) if at >= earliest), 0)


def missing_in(store: SeriesStore) -> list[str]:
    names = {labels["__name__"] for labels, _, _ in store.series()}
    return [hint for families, hint in DATA_HINTS if not names.intersection(families)]
