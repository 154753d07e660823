"""The report of a judgement: what was read, the verdicts with their evidence and advice, what could not be judged;
rendered as a terminal table or as JSON.

A ``Report`` comes from a Prometheus (``verdicts.prometheus.judge``) or from samples (``sampled``: an evaluation and
the sampler that took them). ``render_text`` groups the verdicts by subject::

    bottleneck-exporter diagnose: 1 verdict(s) from in-process node-1, 60s sampled; 30 rules evaluated, bundle ...

    job resnet
      WARNING   input-bound (data loading)  (BottleneckInputBound)  [firing]
                evidence: Rank 0 of job resnet on node-1 waits for the next batch 82% of every step ...
"""

from __future__ import annotations

import dataclasses
import json
import textwrap
from typing import Any

from bottleneck_exporter.heuristics import DEFAULT_BUNDLE, gotemplate
from bottleneck_exporter.verdicts.evaluation import SEVERITY_RANK, Evaluation, Finding
from bottleneck_exporter.verdicts.peers import unjudged
from bottleneck_exporter.verdicts.sampling import Sampler


@dataclasses.dataclass
class Report:
    source: str  # prometheus | exporter | in-process
    target: str
    evaluated_at: float
    rules: int
    findings: list[Finding]
    errors: list[tuple[str, str]]  # (alert, message)
    missing: list[str]
    window_seconds: float | None = None
    bundle: str = DEFAULT_BUNDLE
    # What was sampled: name, url, job, scrapes, failed, error (the first failure's), alerts it left unjudged
    # when it never answered.
    sources: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    @property
    def critical(self) -> bool:
        """A critical verdict that fires (or whose state is unknown): a pending one has not held its for: yet."""
        return any(f.rule.severity == "critical" and f.state != "pending" for f in self.findings)


def sampled(evaluation: Evaluation, sampler: Sampler) -> Report:
    """The report of ``evaluation`` over what ``sampler`` took. A peer that never answered leaves the verdicts
    that read it unjudged: named, not silently absent."""
    catalogue = evaluation.catalogue
    ours, *peers = sampler.record
    sources = [{**ours.as_dict(), "unjudged": []}] + [
        {**s.as_dict(), "unjudged": unjudged(catalogue, [p.source]) if s.failed == s.scrapes else []}
        for p, s in zip(sampler.peers, peers, strict=True)]
    return Report(sampler.source.kind, sampler.source.target, evaluation.at, len(catalogue.alerts),
                  evaluation.findings, evaluation.errors, evaluation.missing, evaluation.window_seconds,
                  catalogue.bundle, sources)


def _shown(report: Report, min_severity: str) -> list[Finding]:
    return [f for f in report.findings if SEVERITY_RANK[f.rule.severity] <= SEVERITY_RANK[min_severity]]


def render_text(report: Report, min_severity: str = "info", width: int = 100) -> str:
    shown = _shown(report, min_severity)
    where = f"{report.source} {report.target}"
    if report.window_seconds is not None:
        where += f", {report.window_seconds:.0f}s sampled"
    lines = [f"bottleneck-exporter diagnose: {len(shown)} verdict(s) from {where}; "
             f"{report.rules} rules evaluated, bundle {report.bundle}"]
    for source in report.sources:
        answered = f"{source['scrapes'] - source['failed']}/{source['scrapes']} scrapes answered"
        lines.append(f"  {source['name']} ({source['url']}, job {source['job']}): {answered}")
    if not shown:
        lines.append("No bottleneck found: no rule's condition holds.")
    subject = None
    indent = " " * 12
    for finding in shown:
        if finding.subject != subject:
            subject = finding.subject
            lines += ["", subject]
        state = f"  [{finding.state}]" if finding.state else ""
        if finding.needs_seconds is not None:
            state = (f"  [pending: holds {finding.rule.for_} before it fires, needs "
                     f"{gotemplate.humanize_duration(finding.needs_seconds)} more; sample longer with --window]")
        lines.append(f"  {finding.rule.severity.upper():<9} {finding.rule.heuristic.verdict}  "
                     f"({finding.rule.alert}){state}")
        for label, text in (("evidence", finding.evidence), ("advice", finding.rule.advice),
                            ("runbook", finding.rule.runbook_url)):
            wrapped = textwrap.wrap(text, width=width - len(indent) - 10, break_on_hyphens=False,
                                    break_long_words=False) or [""]
            lines.append(f"{indent}{label + ':':<10}{wrapped[0]}")
            lines += [f"{indent}{'':<10}{rest}" for rest in wrapped[1:]]
    if report.missing:
        lines += ["", "No data for (rules that need it cannot fire):"] + [f"  - {m}" for m in report.missing]
    for source in report.sources:
        if source["error"]:
            lines += ["", f"{source['name']} did not answer {source['failed']} of {source['scrapes']} scrapes "
                      f"(first: {source['error']})"
                      + (f"; judged without its series: {', '.join(source['unjudged'])}" if source["unjudged"]
                         else "")]
    if report.errors:
        lines += ["", "Could not evaluate:"] + [f"  - {alert}: {message}" for alert, message in report.errors]
    return "\n".join(lines) + "\n"


def render_json(report: Report, min_severity: str = "info") -> str:
    return json.dumps({
        "source": report.source, "target": report.target, "bundle": report.bundle, "sources": report.sources,
        "evaluated_at": report.evaluated_at,
        "window_seconds": report.window_seconds, "rules_evaluated": report.rules,
        "critical": report.critical, "verdicts": [f.as_dict() for f in _shown(report, min_severity)],
        "missing": report.missing, "errors": [{"alert": a, "error": e} for a, e in report.errors],
    }, indent=2) + "\n"
