"""The dashboards' view of the heuristics catalogue (exporter/heuristics): one ``Verdict`` per heuristic.

For each heuristic it finds the continuous signals the rule compares (the recording rule its expression
starts with, e.g. ``job_rank:bottleneck_train_data_wait:ratio_rate5m > 0.5``, and the one of each further
``or`` branch against the same threshold, as StragglerRank's step time and local work) and the threshold of
each severity tier, so the verdict panels draw the signals with the alert's own cut-offs. Heuristics whose
expression does not start with a recording rule are shown as their alert's state. Selector for the firing
verdicts::

    ALERTS{alertstate="firing", alertname=~"BottleneckInputBound|BottleneckIoBound|...", instance=~"$instance"}
"""

from __future__ import annotations

import dataclasses
import functools
import re

from exporter.dashboards.panels import Panel, Query, table, with_value_text
from exporter.dashboards.thresholds import catalogue
from exporter.heuristics.catalogue import HEURISTICS, RECORDS, Heuristic

# `<<record>> > ${parameter}` or `<<record>> < 1` at the start of a heuristic's expression (or of the
# parenthesised group it starts with, before joins that only add labels), and at the start of each `or`
# branch after it (written on a line of its own in the catalogue).
COMPARISON = r"\s*<<(\w+)>>\s*(?:>=|<=|>|<)\s*(?:\$\{(\w+)\}|([0-9.]+))"
LEADING_COMPARISON = re.compile(r"^\(?" + COMPARISON)
OR_BRANCH_COMPARISON = re.compile(r"\n\s*or\n" + COMPARISON)
SEVERITY_COLORS = {"info": "blue", "warning": "orange", "critical": "red"}


@dataclasses.dataclass(frozen=True)
class Verdict:
    heuristic: Heuristic
    signals: tuple[str, ...]  # recorded series compared against the thresholds; none: show the alert state
    thresholds: tuple[tuple[str, float], ...]  # (severity, value) per tier
    runbook_url: str
    meaning: str  # the catalogue's texts with the parameters filled in
    advice: str

    @property
    def alert(self) -> str:
        return self.heuristic.alert


@functools.cache
def verdicts() -> tuple[Verdict, ...]:
    resolved = catalogue()
    record_names = dict(zip(RECORDS, (r.record for r in resolved.records), strict=True))
    found: list[Verdict] = []
    for heuristic in HEURISTICS:
        rules = [rule for rule in resolved.alerts if rule.heuristic is heuristic]
        match = LEADING_COMPARISON.match(heuristic.expr)
        signals: list[str] = []
        if match:
            signals.append(record_names[match.group(1)])
            for branch in OR_BRANCH_COMPARISON.finditer(heuristic.expr):
                if branch.group(2, 3) != match.group(2, 3):
                    raise ValueError(f"{heuristic.name}: the or branches compare against different thresholds")
                signals.append(record_names[branch.group(1)])
        thresholds: list[tuple[str, float]] = []
        if match:
            for rule in rules:
                tier = next(t for t in heuristic.tiers if t.severity == rule.severity)
                if match.group(2):
                    value = rule.thresholds[tier.overrides.get(match.group(2), match.group(2))]
                else:
                    value = match.group(3)
                thresholds.append((rule.severity, float(value)))
        found.append(Verdict(heuristic, tuple(signals), tuple(thresholds), rules[0].runbook_url, rules[0].meaning,
                             rules[0].advice))
    return tuple(found)


def alert_names() -> list[str]:
    return [v.alert for v in verdicts()]


def firing_selector(matchers: str = "") -> str:
    extra = f", {matchers}" if matchers else ""
    return f'ALERTS{{alertstate="firing", alertname=~"{"|".join(alert_names())}"{extra}}}'


def verdict_texts() -> dict[str, str]:
    """Alert name → the verdict a person reads ("input-bound (data loading)"), for table value mappings."""
    return {v.alert: v.heuristic.verdict for v in verdicts()}


def verdict_table(title: str, description: str, matchers: str, by: str, *, width: int = 24, height: int = 6) -> Panel:
    """Firing verdicts as a table, the alert name shown as the verdict a person reads."""
    panel = table(
        title,
        description,
        "none",
        [Query(f"max by (alertname, severity, {by}) ({firing_selector(matchers)})", instant=True, table=True)],
        width=width,
        height=height,
        hide=("Time", "Value"),
        rename={"alertname": "verdict"},
    )
    return with_value_text(panel, "alertname", verdict_texts())
