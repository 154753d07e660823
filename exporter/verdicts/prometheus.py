"""The catalogue judged by a Prometheus that scrapes the exporters: every alert expression as an instant query.

The recording rules are spelled out (``AlertRule.inline_expr``), so our rule files need not be installed there.
Where they are, ``for:`` is Prometheus' own: the ``ALERTS`` series says which verdicts already fire or are pending::

    ALERTS{alertname="BottleneckInputBound", alertstate="pending", severity="warning", training_job="resnet"} 1

A condition ``ALERTS`` does not know (our rules are not installed, or it has just begun) is not taken as firing:
its ``for:`` is what keeps a warm-up (a new process's memory rising for a minute) from reading as a leak. Prometheus
is asked how many rule intervals of the last ``for:`` the condition held (a subquery), and the finding gets the
state Prometheus would give it: firing once it held for all of them, pending before.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from bottleneck_exporter.heuristics import AlertRule, Catalogue
from bottleneck_exporter.heuristics.promql import PromQLError, parse_duration
from bottleneck_exporter.verdicts.evaluation import DATA_HINTS, Finding, labels_of, ordered
from bottleneck_exporter.verdicts.report import Report
from bottleneck_exporter.verdicts.scrape import Unreachable


class PrometheusClient:
    def __init__(self, url: str, timeout: float) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout

    def query(self, expr: str) -> list[dict[str, Any]]:
        """Instant query; raises Unreachable when Prometheus does not answer, PromQLError for a bad query."""
        params = urllib.parse.urlencode({"query": expr})
        request = urllib.request.Request(f"{self.url}/api/v1/query", data=params.encode(),
                                         headers={"Content-Type": "application/x-www-form-urlencoded"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                body = json.load(response)
        except urllib.error.HTTPError as err:
            try:
                body = json.load(err)
            except (ValueError, OSError):
                raise Unreachable(f"{self.url}: HTTP {err.code} {err.reason}") from None
            if err.code >= 500 and body.get("errorType") not in ("execution", "timeout"):
                raise Unreachable(f"{self.url}: HTTP {err.code}: {body.get('error')}") from None
        except (urllib.error.URLError, OSError, ValueError) as err:
            raise Unreachable(f"{self.url}: {getattr(err, 'reason', err)}") from None
        if body.get("status") != "success":
            raise PromQLError(f"{body.get('errorType')}: {body.get('error')}")
        data = body.get("data", {})
        if data.get("resultType") != "vector":
            raise PromQLError(f"expected a vector, got {data.get('resultType')}")
        return list(data.get("result", []))


def judge(catalogue: Catalogue, client: PrometheusClient) -> Report:
    """Every alert of ``catalogue`` queried from ``client``'s Prometheus, each finding with its ALERTS state;
    raises Unreachable when Prometheus does not answer or every query failed."""
    findings: list[Finding] = []
    errors: list[tuple[str, str]] = []
    for rule in catalogue.alerts:
        try:
            result = client.query(rule.inline_expr)
        except PromQLError as err:
            errors.append((rule.alert, str(err)))
            continue
        for sample in result:
            findings.append(Finding(rule, labels_of(sample["metric"]), float(sample["value"][1])))
    if len(errors) == len(catalogue.alerts):
        raise Unreachable(f"{client.url}: every query failed, first: {errors[0][1]}")
    states: dict[tuple, str] = {}
    try:
        for sample in client.query('ALERTS{alertname=~"Bottleneck.+"}'):
            labels = labels_of(sample["metric"])
            state = labels.pop("alertstate", "")
            states[tuple(sorted(labels.items()))] = state
    except PromQLError as err:
        errors.append(("ALERTS", str(err)))
    for finding in findings:
        key = {**finding.labels, "alertname": finding.rule.alert, "severity": finding.rule.severity}
        finding.state = states.get(tuple(sorted(key.items())))
    step = parse_duration(str(catalogue.parameters["rule_interval"]))
    unknown: dict[tuple[str, str], list[Finding]] = {}
    for finding in findings:
        if finding.state is None and parse_duration(finding.rule.for_) > 0:
            unknown.setdefault((finding.rule.alert, finding.rule.severity), []).append(finding)
    for held in unknown.values():
        try:
            _hold_states(held[0].rule, held, client, step)
        except PromQLError as err:
            errors.append((held[0].rule.alert, f"how long it held: {err}"))
    missing = []
    for families, hint in DATA_HINTS:
        try:
            if not client.query(f'count({{__name__=~"{"|".join(families)}"}})'):
                missing.append(hint)
        except PromQLError:
            pass
    return Report("prometheus", client.url, time.time(), len(catalogue.alerts), ordered(findings), errors, missing,
                  bundle=catalogue.bundle)


def _hold_states(rule: AlertRule, findings: list[Finding], client: PrometheusClient, step: float) -> None:
    """Gives each of ``rule``'s findings the state a Prometheus evaluating it every ``step`` seconds would: firing
    when the condition held at every evaluation of the last ``for:``, else pending with the seconds it still needs
    (at least: a gap within the window restarts a real Prometheus' count)."""
    hold = parse_duration(rule.for_)
    held = {tuple(sorted(labels_of(s["metric"]).items())): float(s["value"][1]) * step for s in client.query(
        f"count_over_time(({rule.inline_expr})[{hold:g}s:{step:g}s])")}
    for finding in findings:
        seconds = held.get(tuple(sorted(finding.labels.items())), 0.0)
        if seconds >= hold:
            finding.state = "firing"
        else:
            finding.state, finding.needs_seconds = "pending", hold - seconds
