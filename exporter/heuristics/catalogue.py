"""The heuristics catalogue: every area's verdicts put together, and resolved into concrete rules.

The verdicts live one area per module (``areas/``: training, node, GPU, the exporter itself), each with the
recording rules of its alert group and the signals only dashboards draw; ``parameters`` holds every
threshold. This module assembles them (``HEURISTICS``, ``RECORDS``, ``SIGNALS``) and derives everything else
from them: the recording rules (``prometheus/recording-rules.yml``), the alert rules
(``alerts/alert-rules.yml``), ``docs/runbook.md``, the promtool tests (``tests/rules/``), the dashboards'
panels and ``bottleneck-exporter diagnose``.

:func:`resolve` fills in the templates (``${name}`` a parameter, ``<<key>>`` a recording rule; parameters may
be overridden) for one bundle of sources and returns concrete rules::

    alert: BottleneckInputBound
    expr: job_rank:bottleneck_train_data_wait:ratio_rate5m > 0.5 unless on (cluster, instance) (...)
    labels: {severity: warning}

Every rule keeps the cluster label (parameter ``cluster_label``) in each ``by`` and ``on`` (:func:`clustered`), and
says where it can run (:func:`reach`: node-local, or cross-node when it combines several nodes' series).
:func:`signal` spells a signal out for a dashboard; :func:`validate` checks that the catalogue holds together.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

from bottleneck_exporter.heuristics.areas import AREAS
from bottleneck_exporter.heuristics.gotemplate import check
from bottleneck_exporter.heuristics.model import (
    CROSS_NODE,
    GROUPS,
    NODE_LABEL,
    NODE_LOCAL,
    PARAM,
    RECORD_REF,
    SEVERITIES,
    CatalogueError,
    Heuristic,
    MissingSignal,
    Record,
    Signal,
)
from bottleneck_exporter.heuristics.parameters import PARAMETERS, format_value, parse_parameter
from bottleneck_exporter.heuristics.promql import (
    Aggregate,
    Binary,
    Call,
    Negate,
    Node,
    PromQLError,
    Selector,
    crosses,
    keep_label,
    parse,
    parse_duration,
    transform,
    unparse,
)
from bottleneck_exporter.heuristics.sources import BUNDLES, DEFAULT_BUNDLE, Unreadable

# The order a person reads the verdicts in (the runbook, the verdict dashboards, the bundles' promtool tests). A
# verdict not named here comes after these, in its area's order.
READING_ORDER = (
    "InputBound", "TooFewLoaderWorkers", "LoaderSaturated", "IoBound", "GpuSawtooth", "PageableCopies",  # input
    # the CPUs that feed it
    "TrainerCpuThrottled", "CpuSaturated", "CpuOverloaded", "DataLoaderWorkersExceedCpus", "ContextSwitchStorm",
    "MemoryPressure", "Swapping",  # memory
    "GpuMemoryUnderused", "GpuMemoryNearlyFull", "LaunchBound",  # GPU memory and kernel launches
    "GpuThrottled", "GpuTooHot", "PcieDegraded",  # GPU health
    "GpuHeldIdle", "RankOnFarSocket",  # GPUs held for nothing, ranks far from their GPU
    "GpuImbalance", "StragglerRank", "NetworkBound", "CommunicationBound",  # the job across its ranks
    "TrainingStalled",  # stalls
    "GpuLost", "GpuUncorrectableErrors", "GpuXidFatal", "GpuXidApplication",  # hardware faults
    "ExporterDown", "ExporterAbsent", "CollectorFailing",  # the monitoring itself
)


def first_holding(parts: list[str], label: str = "cause") -> str:
    """A record's parts (Record.parts) joined so that each instance keeps one of them, each part evaluated once:
    ``topk by (instance) (1, p1 or on (instance, label) p2 or on (instance, label) ...)``. Parts that name
    themselves in ``label`` carry their rank as their value, the first the highest (the node's slowdown cause),
    so that topk keeps the first that holds; parts that share their labels meet in ``or``, which keeps the
    first present.

    Not ``p1 or on (instance) p2``, though Prometheus answers the same: MetricsQL (vmalert) keeps a series that
    a comparison filtered out as NaN until the query's end, and its ``or`` fills a left-hand NaN with the
    matching right-hand value, so that ``p1`` would name the cause wherever a later part held
    (docs/rules.md, tests/test_e2e_victoriametrics.py). Matching on the label too, no part ever fills another,
    and topk passes a NaN over. Nor ``p1 or on (instance, label) ((p2 ...) unless on (instance) p1)``, which
    both engines answer alike too but which evaluates every part but the last twice (docs/rules.md, "What the
    rules cost on a fleet")."""
    if len(parts) == 1:
        return parts[0]
    joined = f"\nor on (instance, {label})\n".join(parts).replace("\n", "\n  ")
    return f"topk by (instance) (\n  1,\n  {joined}\n)"


def _in_reading_order(heuristics: list[Heuristic]) -> tuple[Heuristic, ...]:
    place = {name: i for i, name in enumerate(READING_ORDER)}
    return tuple(sorted(heuristics, key=lambda h: place.get(h.name, len(place))))


RECORDS: dict[str, Record] = {r.key: r for area in AREAS for r in area.records}
SIGNALS: dict[str, Signal] = {s.key: s for area in AREAS for s in area.signals}
HEURISTICS: tuple[Heuristic, ...] = _in_reading_order([h for area in AREAS for h in area.heuristics])


def parameters_read(heuristic: Heuristic) -> tuple[str, ...]:
    """Parameter names ``heuristic`` reads, including its records' and its tiers' thresholds."""
    names: list[str] = []
    texts = [heuristic.expr, heuristic.description, heuristic.summary, heuristic.advice, heuristic.meaning,
             heuristic.evidence]
    for key in records_used(heuristic.expr):
        texts.append(RECORDS[key].expr)
        texts.append(RECORDS[key].name)
        texts.extend(RECORDS[key].sources.values())
    for text in texts:
        for name in PARAM.findall(text):
            if name not in names:
                names.append(name)
    for tier in heuristic.tiers:
        for name in tier.overrides.values():
            if name not in names:
                names.append(name)
    return tuple(names)


@dataclasses.dataclass(frozen=True)
class RecordingRule:
    record: str
    expr: str
    group: str
    key: str = ""  # the catalogue's key (<<key>>)
    reach: str = NODE_LOCAL  # NODE_LOCAL or CROSS_NODE (model.REACHES): where its group can run
    inline_expr: str = ""  # the recording rules it reads spelled out: runs on a Prometheus without our rules


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
    reach: str = NODE_LOCAL  # NODE_LOCAL or CROSS_NODE (model.REACHES): where its group can run

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


def clustered(expr: str, params: Mapping[str, float | str]) -> str:
    """``expr`` keeping the cluster label (parameter ``cluster_label``) through every aggregation and join."""
    label = str(params["cluster_label"])
    try:
        return unparse(keep_label(parse(expr), label))
    except PromQLError as err:
        raise CatalogueError(f"cluster_label {label}: {err} in {' '.join(expr.split())[:80]!r}") from None


def reach(inline_expr: str) -> str:
    """Where a rule can run, from its expression with the recording rules it reads spelled out."""
    return CROSS_NODE if crosses(parse(inline_expr), NODE_LABEL) else NODE_LOCAL


def _with_records(expr: str, names: Mapping[str, str], inline: bool, params: Mapping[str, float | str],
                  chosen: Mapping[str, str]) -> str:
    def record(match: re.Match[str]) -> str:
        key = match.group(1)
        narrowing = match.group(0)[len(key) + 4:]  # <<key>>{...}: the series of the record that match
        if not inline:
            return names[key] + narrowing
        body = _with_records(_fill(chosen[key], params), names, True, params, chosen)
        if narrowing:
            body = _narrowed(key, body, narrowing)
        return "(" + " ".join(body.split()) + ")"

    return RECORD_REF.sub(record, expr)


def _narrowed(key: str, body: str, narrowing: str) -> str:
    """Record ``key`` (spelled out: ``body``) as ``<<key>>{narrowing}`` reads it: its selector with the matchers
    added. The same series only where the record is one function of one selector, which keeps every label (a rate
    per series): an aggregation or a join could drop or change the labels matched."""
    node, matchers = parse(body), parse(narrowing)
    if not (isinstance(matchers, Selector) and isinstance(node, Call) and len(node.args) == 1
            and isinstance(node.args[0], Selector)):
        raise CatalogueError(f"<<{key}>>{narrowing}: only a per-series record (a function of one selector) "
                             f"is narrowed, not {' '.join(body.split())[:60]!r}")
    inner = node.args[0]
    return unparse(dataclasses.replace(node, layout=None, args=(
        dataclasses.replace(inner, matchers=(*inner.matchers, *matchers.matchers), layout=None),)))


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
    series those parts need. A part over our series that reads no record is read through the bundle's peer
    twins where its sources lack ours (the busiest Tensor-Core activity from dcgm-exporter's), filled in with
    ``params``."""
    provides = BUNDLES[bundle].provides
    chosen: dict[str, str] = {}
    missing: dict[str, set[str]] = {}
    reduced: dict[str, set[str]] = {}

    def lacks(expr: str) -> set[str]:
        found = {m for m in series_read(expr, params) if not provides(m)}
        for key in RECORD_REF.findall(expr):
            found |= missing.get(key, set())
        return found

    def readable(part: str) -> str:
        """``part`` as the bundle can read it: itself, or over its sources' twins where that reads them all."""
        if not lacks(part) or RECORD_REF.search(part):
            return part
        try:
            twinned = BUNDLES[bundle].rewrite(_fill(part, params))
        except Unreadable:
            return part
        return part if lacks(twinned) else twinned

    for key, record in RECORDS.items():
        if record.parts:
            parts = [p for p in map(readable, record.parts) if not lacks(p)]
            if 0 < len(parts) < len(record.parts):
                reduced[key] = set().union(*(lacks(p) for p in record.parts))
            if parts:
                chosen[key] = first_holding(parts)
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
    params = {**defaults, "rate_window": window}
    chosen, missing, _ = choose_signals(bundle, params)
    if key in SIGNALS:
        expr = SIGNALS[key].expr
        lacking = set().union(*(missing[k] for k in RECORD_REF.findall(expr) if k in missing))
        if lacking:
            raise MissingSignal(f"bundle {bundle} has no signal {key!r} (needs {', '.join(sorted(lacking))})",
                                lacking)
    elif key in chosen:
        expr = chosen[key]
    else:
        lacking = missing.get(key, set())
        if key not in RECORDS:
            raise CatalogueError(f"no signal {key!r}; known: {', '.join(sorted([*RECORDS, *SIGNALS]))}")
        raise MissingSignal(f"bundle {bundle} has no signal {key!r}" + (
            f" (needs {', '.join(sorted(lacking))})" if lacking else ""), lacking)
    text = _with_records(_fill(expr, params), {}, True, params, chosen)
    if key in SIGNALS:  # written over our series: the bundle reads it from its sources (records are already theirs)
        try:
            text = BUNDLES[bundle].rewrite(text)
        except Unreadable as err:
            raise MissingSignal(f"bundle {bundle} has no signal {key!r} (needs {err})", err.names) from None
    narrowing = parse("{" + matchers + "}")
    if not isinstance(narrowing, Selector):
        raise CatalogueError(f"matchers {matchers!r}: not the matchers of a selector")

    def narrowed(node: Node) -> Node | None:
        """A selector of a raw series with the dashboard's matchers first."""
        if not isinstance(node, Selector):
            return None
        name = next((m for m in node.matchers if m.name == "__name__" and m.op == "="), None)
        if name is None:
            return None
        rest = tuple(m for m in node.matchers if m is not name)
        return Selector((name, *narrowing.matchers, *rest), node.range_seconds, node.range_variable)

    return " ".join(unparse(transform(parse(clustered(text, params)), narrowed)).split())


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
    records = []
    for key, expr in chosen.items():
        filled = _fill(expr, params)
        inline = _with_records(filled, names, True, params, chosen)
        records.append(RecordingRule(names[key], clustered(_with_records(filled, names, False, params, chosen), params),
                                     RECORDS[key].group, key, reach(inline), clustered(inline, params)))
    base = str(params["runbook_base_url"])
    alerts: list[AlertRule] = []
    left_out: dict[str, tuple[str, ...]] = {}
    reads: dict[str, tuple[str, ...]] = {}
    provides = BUNDLES[bundle].provides
    for heuristic in HEURISTICS:
        expr = heuristic.alert_expr
        lacking = {m for m in series_read(expr, params) if not provides(m)}
        for key in records_used(expr):
            lacking |= missing.get(key, set())
        if lacking:
            left_out[heuristic.name] = tuple(sorted(lacking))
            continue
        through = (series_read(chosen[key], params) for key in _closure(expr, chosen))
        reads[heuristic.name] = tuple(sorted(series_read(expr, params).union(*through)))
        for tier in heuristic.tiers:
            filled = _fill(expr, params, tier.overrides)
            thresholds = {tier.overrides.get(n, n): params[tier.overrides.get(n, n)]
                          for n in PARAM.findall(heuristic.expr)}
            inline = _with_records(filled, names, True, params, chosen)
            alerts.append(AlertRule(
                heuristic=heuristic,
                severity=tier.severity,
                expr=clustered(_with_records(filled, names, False, params, chosen), params),
                inline_expr=clustered(inline, params),
                for_=for_override or heuristic.for_,
                summary=_fill(heuristic.summary, params),
                description=_fill(heuristic.description, params),
                advice=_fill(heuristic.advice, params),
                meaning=_fill(heuristic.meaning, params),
                evidence=_fill(heuristic.evidence, params),
                runbook_url=f"{base}#{heuristic.anchor}",
                thresholds=thresholds,
                reach=reach(inline),
            ))
    return Catalogue(params, tuple(records), tuple(alerts), bundle, left_out,
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
    if tuple(area.name for area in AREAS) != GROUPS:
        raise CatalogueError(f"areas {[area.name for area in AREAS]} are not the alert groups {GROUPS}")
    for area in AREAS:
        for record in area.records:
            if record.group != area.name:
                raise CatalogueError(f"record {record.key} of area {area.name}: group {record.group!r}")
        for heuristic in area.heuristics:
            if heuristic.group != area.name:
                raise CatalogueError(f"heuristic {heuristic.name} of area {area.name}: group {heuristic.group!r}")
    if len(RECORDS) != sum(len(area.records) for area in AREAS):
        raise CatalogueError("a recording rule's key is defined in two areas")
    unknown = set(READING_ORDER) - {h.name for h in HEURISTICS}
    if unknown:
        raise CatalogueError(f"READING_ORDER names no heuristic {', '.join(sorted(unknown))}")
    seen: set[str] = set()
    for heuristic in HEURISTICS:
        where = f"heuristic {heuristic.name}"
        read = parameters_read(heuristic)
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
        if heuristic.sampled_over:
            parse_duration(heuristic.sampled_over)
        for text in (heuristic.summary, heuristic.description):
            check(text)
        for key in heuristic.compares:
            if f"<<{key}>>" not in heuristic.expr:
                raise CatalogueError(f"{where}: compares <<{key}>>, which its expression does not read")
        if heuristic.compares and heuristic.threshold not in read:
            try:
                float(heuristic.threshold)
            except ValueError:
                raise CatalogueError(f"{where}: threshold {heuristic.threshold!r} is neither a parameter it reads "
                                     "nor a number") from None
        for tier in heuristic.tiers:
            for used, replacement in tier.overrides.items():
                if used not in read or replacement not in PARAMETERS:
                    raise CatalogueError(f"{where}: tier {tier.severity} overrides unknown {used}→{replacement}")
    for bundle in BUNDLES:
        for rule in resolve(bundle=bundle).alerts:
            try:
                parse(rule.inline_expr)
            except PromQLError as err:
                raise CatalogueError(f"alert {rule.alert} (bundle {bundle}): {err}") from None
