"""The report of a judgement: what was read, what the samples show, the verdicts with their evidence and advice,
what could not be judged; rendered as a terminal report or as JSON.

A ``Report`` comes from a Prometheus (``verdicts.prometheus.judge``) or from samples (``sampled``: an evaluation and
the sampler that took them; then it also carries each rank's step breakdown and each GPU's utilization over the
samples, ``verdicts.breakdown``). ``render_text`` writes one section per subject, what was measured before what
was found; a sampled verdict says how long its condition held, and one that held only briefly is set apart::

    bottleneck-exporter diagnose: 1 verdict(s) from in-process node-1, 60 s sampled; 30 rules evaluated, ...

    job resnet: 1 rank, step breakdown over 55 s
                                 data wait   forward  backward optimizer     other       step   steps/s
      rank 0  ▕█████████████▓▒▒▒▏       82%        5%        9%        1%        3%
                                     410 ms     25 ms     45 ms      5 ms     15 ms     500 ms         2
              █ data wait  ▓ forward  ▒ backward  ░ optimizer  ▁ other (the loop's own code)
      WARNING   input-bound (data loading)  (BottleneckInputBound)
                held:     throughout, 55 s of 60 s sampled
                evidence: Rank 0 of job resnet on node-1 waits for the next batch 82% of every step ...
"""

from __future__ import annotations

import dataclasses
import json
import textwrap
from collections.abc import Sequence
from typing import Any

from bottleneck_exporter.heuristics import DEFAULT_BUNDLE
from bottleneck_exporter.verdicts import bars
from bottleneck_exporter.verdicts.breakdown import (
    OTHER,
    PARTITION,
    RUN,
    GpuUtilization,
    RankBreakdown,
    by_job,
    gpus,
    ranks,
)
from bottleneck_exporter.verdicts.evaluation import BRIEFLY, PARTLY, SEVERITY_RANK, THROUGHOUT, Evaluation, Finding
from bottleneck_exporter.verdicts.peers import unjudged
from bottleneck_exporter.verdicts.sampling import Sampler

DIAGNOSE = "bottleneck-exporter diagnose"
# Each phase's shade in a step's bar (darkest: the wait for data, the first thing to look at), and its name.
FILLS = {"data_wait": "█", "forward": "▓", "backward": "▒", "optimizer": "░", OTHER: "▁"}
PHASE_NAMES = {"data_wait": "data wait", "forward": "forward", "backward": "backward", "optimizer": "optimizer",
               OTHER: "other"}
OTHER_SAID = " (the loop's own code)"  # what "other" is, where the legend has room for it
COLUMN = 10  # characters of a number column in a step breakdown
MIN_BAR = 10  # cells: below it a bar tells nothing; the line grows past the width instead
GPU_BAR = 30
SUBJECT_ORDER = ("job", "node", "scrape job")


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
    ranks: list[RankBreakdown] = dataclasses.field(default_factory=list)  # sampled: each rank's steps
    gpus: list[GpuUtilization] = dataclasses.field(default_factory=list)  # sampled: each GPU's utilization
    # sampled: alerts whose trend the span was too short to tell, with the seconds of samples each needs
    too_short: list[tuple[str, float]] = dataclasses.field(default_factory=list)

    @property
    def critical(self) -> bool:
        """A critical verdict that counts: from samples, one whose condition held throughout or for most of the
        time (not briefly); from a Prometheus, one that fires (or whose state is unknown), not a pending one."""
        return any(f.rule.severity == "critical" and decisive(f) for f in self.findings)


def decisive(finding: Finding) -> bool:
    """Whether a finding counts for the exit status: held long enough within the samples, or not pending."""
    return finding.held.weighs if finding.held is not None else finding.state != "pending"


def sampled(evaluation: Evaluation, sampler: Sampler) -> Report:
    """The report of ``evaluation`` over what ``sampler`` took. A peer that never answered leaves the verdicts
    that read it unjudged: named, not silently absent."""
    catalogue = evaluation.catalogue
    ours, *peers = sampler.record
    sources = [{**ours.as_dict(), "unjudged": []}] + [
        {**s.as_dict(), "unjudged": unjudged(catalogue, [p.source]) if s.failed == s.scrapes else []}
        for p, s in zip(sampler.peers, peers, strict=True)]
    store = (evaluation.samples or sampler.samples()).store
    return Report(sampler.source.kind, sampler.source.target, evaluation.at, len(catalogue.alerts),
                  evaluation.findings, evaluation.errors, evaluation.missing, evaluation.window_seconds,
                  catalogue.bundle, sources, ranks(store), gpus(store), evaluation.too_short)


def _shown(report: Report, min_severity: str) -> list[Finding]:
    return [f for f in report.findings if SEVERITY_RANK[f.rule.severity] <= SEVERITY_RANK[min_severity]]


def render_text(report: Report, min_severity: str = "info", width: int = 100, heading: str = DIAGNOSE,
                longer: str | None = None) -> str:
    """The report for a terminal ``width`` columns wide. ``heading``: the command that speaks ("bottleneck-exporter
    diagnose"); ``longer``: how to sample longer, said where a condition held too briefly to weigh (diagnose:
    "sample longer with --window"; None says nothing)."""
    shown = _shown(report, min_severity)
    weighing = [f for f in shown if f.weighs]
    briefly = len(shown) - len(weighing)
    where = f"{report.source} {report.target}"
    if report.window_seconds is not None:
        where += f", {duration(report.window_seconds)} sampled"
    count = f"{len(weighing)} verdict(s)" + (f" ({briefly} more held briefly)" if briefly else "")
    said, rules = f"{heading}: {count} from {where}", f"{report.rules} rules evaluated, bundle {report.bundle}"
    lines = [f"{said}; {rules}"] if len(said) + 2 + len(rules) <= width else [said, f"  {rules}"]
    for source in report.sources:
        answered = f"{source['scrapes'] - source['failed']}/{source['scrapes']} scrapes answered"
        lines.append(f"  {source['name']} ({source['url']}, job {source['job']}): {answered}")
    subjects = ({f.subject for f in shown} | {f"job {b.training_job}" for b in report.ranks}
                | {f"node {gpu.instance}" for gpu in report.gpus})
    if not subjects:
        lines.append("No bottleneck found: no rule's condition holds.")
    for subject in sorted(subjects, key=_subject_order):
        lines += ["", *_subject_lines(report, subject, min_severity, width, longer)]
    if report.missing:
        lines += ["", "No data for (rules that need it cannot fire):"]
        for missing in report.missing:
            lines += _paragraph(missing, width, "  - ", "    ")
    for source in report.sources:
        if source["error"]:
            lines += ["", *_paragraph(
                f"{source['name']} did not answer {source['failed']} of {source['scrapes']} scrapes "
                f"(first: {source['error']})"
                + (f"; judged without its series: {', '.join(source['unjudged'])}" if source["unjudged"] else ""),
                width, "", "  ")]
    if report.too_short:
        lines += ["", f"Not judged over {duration(report.window_seconds or 0.0)} of samples (a trend: over less, "
                  "a warm-up would read as one):"]
        for alert, seconds in report.too_short:
            lines += _paragraph(f"{alert}: needs {duration(seconds)}" + (f"; {longer}" if longer else ""),
                                width, "  - ", "    ")
    if report.errors:
        lines += ["", "Could not evaluate:"]
        for alert, message in report.errors:
            lines += _paragraph(f"{alert}: {message}", width, "  - ", "    ")
    return "\n".join(lines) + "\n"


def _subject_lines(report: Report, subject: str, min_severity: str, width: int, longer: str | None) -> list[str]:
    """A subject's section: what was measured (a job's step breakdown, a node's GPUs), then its verdicts, or "no
    bottleneck found", then the conditions that held only briefly."""
    kind, _, name = subject.rpartition(" ")
    ranks_of = [b for b in report.ranks if b.training_job == name] if kind == "job" else []
    gpus_of = [g for g in report.gpus if g.instance == name] if kind == "node" else []
    if ranks_of:
        lines = _job_lines(name, ranks_of, width)
    elif gpus_of:
        lines = _gpu_lines(subject, gpus_of, report.window_seconds, width)
    else:
        lines = [subject]
    mine = [f for f in _shown(report, min_severity) if f.subject == subject]
    for finding in (f for f in mine if f.weighs):
        lines += _finding_lines(finding, width)
    if not any(f.weighs for f in mine):
        hidden = [f for f in report.findings if f.subject == subject and f.weighs
                  and SEVERITY_RANK[f.rule.severity] > SEVERITY_RANK[min_severity]]
        lines.append("  no bottleneck found" + (
            f" at {min_severity} or above ({len(hidden)} {_below(min_severity)} verdict(s) not shown)"
            if hidden else ""))
    brief = [f for f in mine if not f.weighs]
    if brief:
        lines.append(f"  held briefly (may be noise{f'; {longer} to confirm' if longer else ''}):")
        for finding in brief:
            lines += _brief_lines(finding, width)
    return lines


def _subject_order(subject: str) -> tuple[int, str]:
    kind = subject.rpartition(" ")[0]
    return (SUBJECT_ORDER.index(kind) if kind in SUBJECT_ORDER else len(SUBJECT_ORDER), subject)


def _below(min_severity: str) -> str:
    return "/".join(s for s, rank in SEVERITY_RANK.items() if rank > SEVERITY_RANK[min_severity])


def _paragraph(text: str, width: int, first: str, rest: str) -> list[str]:
    return textwrap.wrap(text, width=width, initial_indent=first, subsequent_indent=rest, break_on_hyphens=False,
                         break_long_words=False) or [first]


def _wrapped(text: str, width: int) -> list[str]:
    return textwrap.wrap(text, width=max(20, width), break_on_hyphens=False, break_long_words=False) or [""]


def _finding_lines(finding: Finding, width: int) -> list[str]:
    indent = " " * 12
    state = f"  [{finding.state}]" if finding.state and finding.held is None else ""
    lines = _title(f"  {finding.rule.severity.upper():<9} {finding.rule.heuristic.verdict}",
                   f"({finding.rule.alert}){state}", indent, width)
    labelled = [("evidence", finding.evidence), ("advice", finding.rule.advice), ("runbook", finding.rule.runbook_url)]
    if finding.held is not None:
        labelled.insert(0, ("held", held_text(finding)))
    for label, text in labelled:
        wrapped = _wrapped(text, width - len(indent) - 10)
        lines.append(f"{indent}{label + ':':<10}{wrapped[0]}")
        lines += [f"{indent}{'':<10}{rest}" for rest in wrapped[1:]]
    return lines


def _brief_lines(finding: Finding, width: int) -> list[str]:
    """A condition that held briefly: its name, how long, the evidence; no advice to act on."""
    indent = " " * 14
    lines = _title(f"    {finding.rule.severity:<9} {finding.rule.heuristic.verdict}", f"({finding.rule.alert})",
                   indent, width)
    return lines + [indent + line for line in _wrapped(f"held {held_text(finding)}: {finding.evidence}",
                                                        width - len(indent))]


def _title(verdict: str, alert: str, indent: str, width: int) -> list[str]:
    """A verdict's first line, its alert's name on the next where both do not fit."""
    return [f"{verdict}  {alert}"] if len(verdict) + 2 + len(alert) <= width else [verdict, indent + alert]


def held_text(finding: Finding) -> str:
    """How long a sampled finding's condition held: "throughout, 55 s of 60 s sampled"."""
    held = finding.held
    if held is None:
        return ""
    window = f"{duration(held.window_seconds)} sampled"
    of = window if held.seen_seconds >= held.window_seconds else (
        f"the {duration(held.seen_seconds)} since its series appeared ({window})")
    if held.state == THROUGHOUT:
        return f"throughout, {duration(held.seconds)} of {of}"
    if held.state == PARTLY:
        return f"the last {duration(held.seconds)} of {of}"
    assert held.state == BRIEFLY
    if held.seconds > 0:
        return f"only the last {duration(held.seconds)} of {of}"
    return f"at the last sample only, of {of}"


def _job_lines(job: str, breakdowns: Sequence[RankBreakdown], width: int) -> list[str]:
    """The job's heading and each rank's step breakdown: a bar of its phases, their shares, seconds per step. The
    bar stands beside the numbers where the width leaves it ``MIN_BAR`` cells, else on a line of its own."""
    several = len({b.instance for b in breakdowns}) > 1
    names = [f"rank {b.rank}" + (f" on {b.instance}" if several else "") for b in breakdowns]
    name_width = max(len(name) for name in names)
    pad = " " * (2 + name_width + 2)
    numbers = COLUMN * (len(PARTITION) + 2)
    beside = width - len(pad) - 2 - numbers >= MIN_BAR
    bar = width - len(pad) - 2 - (numbers if beside else 0)
    column = " " * (len(pad) + bar + 2 if beside else len(pad))  # where the numbers start
    sampled = max(b.seconds for b in breakdowns)
    over = f"over {duration(sampled)}" if sampled > 0 else "since it started"
    lines = [f"job {job}: {len(breakdowns)} rank{'s' if len(breakdowns) != 1 else ''}, step breakdown {over}",
             column + "".join(f"{PHASE_NAMES[p]:>{COLUMN}}" for p in PARTITION)
             + f"{'step':>{COLUMN}}{'steps/s':>{COLUMN}}"]
    for name, breakdown in zip(names, breakdowns, strict=True):
        split = breakdown.split
        if split.steps <= 0:
            lines.append(f"  {name:<{name_width}}  no step finished yet")
            continue
        shares, per_step, rate = split.shares, split.per_step, breakdown.steps_per_second
        drawn = f"  {name:<{name_width}}  " + bars.split([(FILLS[p], shares[p]) for p in PARTITION], bar)
        share_row = "".join(f"{percent(shares[p]):>{COLUMN}}" for p in PARTITION)
        lines += [drawn + share_row] if beside else [drawn, column + share_row]
        lines.append(column + "".join(f"{seconds(per_step[p]):>{COLUMN}}" for p in PARTITION)
                     + f"{seconds(split.seconds_per_step or 0.0):>{COLUMN}}"
                     + f"{'-' if rate is None else per_second(rate):>{COLUMN}}")
        if breakdown.over == RUN:
            lines.append(f"{pad}no step finished between the samples: the totals since the rank started")
        if split.collective_seconds is not None:
            lines += _paragraph(f"collectives in flight {percent(split.collective_share or 0.0)} of the step, "
                                f"{seconds(split.collective_seconds / split.steps)} a step (they overlap forward "
                                "and backward: not in the bar)", width, pad, pad)
    legend = pad + "  ".join(f"{FILLS[p]} {PHASE_NAMES[p]}" for p in PARTITION)
    lines.append(legend + OTHER_SAID if len(legend) + len(OTHER_SAID) <= width else legend)
    return lines


def _gpu_lines(subject: str, utilizations: Sequence[GpuUtilization], window: float | None,
               width: int) -> list[str]:
    labelled = any(u.source != "bottleneck-exporter" for u in utilizations)
    names = [f"GPU {u.gpu}" for u in utilizations]
    name_width = max(len(name) for name in names)
    bar = max(MIN_BAR, min(GPU_BAR, width - 2 - name_width - 2 - 2 - 40))
    over = f" over {duration(window)} sampled" if window is not None else ""
    lines = [f"{subject}: GPU utilization, the mean{over}"]
    for name, u in zip(names, utilizations, strict=True):
        detail = f"min {percent(u.low)}, max {percent(u.high)}, {u.samples} sample{'s' if u.samples != 1 else ''}"
        about = ", ".join(part for part in (u.name, u.source if labelled else "") if part)
        lines.append(f"  {name:<{name_width}}  {bars.level(u.mean, bar)}  {percent(u.mean):>4}  ({detail})"
                     + (f"  {about}" if about else ""))
    return lines


def duration(value: float) -> str:
    """Seconds as a person reads a span: "58 s", "4 min 36 s"."""
    whole = round(value)
    if whole < 100:
        return f"{whole} s"
    minutes, rest = divmod(whole, 60)
    return f"{minutes} min {rest} s" if rest else f"{minutes} min"


def seconds(value: float) -> str:
    """A time per step, to three digits: "325 ms", "2.41 s"."""
    if value >= 999.5:
        return f"{value:.0f} s"
    return f"{value:.3g} s" if value >= 0.9995 else f"{value * 1000:.3g} ms"


def per_second(value: float) -> str:
    """Steps a second, to three digits: "0.5", "2.43", "1234"."""
    return f"{value:.0f}" if value >= 999.5 else f"{value:.3g}"


def percent(ratio: float) -> str:
    return "<1%" if 0 < ratio < 0.005 else f"{ratio:.0%}"


def render_json(report: Report, min_severity: str = "info") -> str:
    return json.dumps({
        "source": report.source, "target": report.target, "bundle": report.bundle, "sources": report.sources,
        "evaluated_at": report.evaluated_at,
        "window_seconds": report.window_seconds, "rules_evaluated": report.rules,
        "critical": report.critical, "verdicts": [f.as_dict() for f in _shown(report, min_severity)],
        "jobs": [{"job": job, "ranks": [b.as_dict() for b in breakdowns]}
                 for job, breakdowns in by_job(report.ranks).items()],
        "gpus": [gpu.as_dict() for gpu in report.gpus],
        "missing": report.missing, "errors": [{"alert": a, "error": e} for a, e in report.errors],
        "too_short": [{"alert": a, "needs_seconds": seconds} for a, seconds in report.too_short],
    }, indent=2) + "\n"
