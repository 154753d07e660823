"""A small PromQL linter for dashboard queries, in the spirit of Grafana's dashboard-linter.

Findings (strings) for one expression:
- a counter (``_total``, ``_bucket``, ``_count``, ``_sum``, or a peer exporter's twin of one of our counters:
  ``node_vmstat_pswpin``) used outside ``rate``/``increase``/``irate`` (``count`` of its series is fine);
- ``rate``/``increase``/``irate`` over something that is not a counter;
- a ``rate``/``increase``/``irate`` whose range is not ``$__rate_interval``.

It tokenizes just enough PromQL for that: strings, ``{...}`` matchers, ``[...]`` ranges, parentheses with the
function or aggregation before them, and label lists after ``by``/``without``/``on``/``ignoring``/``group_*``.
"""

from __future__ import annotations

import re

from bottleneck_exporter.collectors.coexistence import DCGM_EXPORTER, NODE_EXPORTER

COUNTER_SUFFIXES = ("_total", "_bucket", "_count", "_sum")
RATE_FUNCTIONS = {"rate", "increase", "irate"}
# Peers' counters named without a counter suffix (node_vmstat_pswpin), from the twins of our counters.
PEER_COUNTERS = {twin.series for table in (NODE_EXPORTER, DCGM_EXPORTER) for ours, twins in table.items()
                 if ours.endswith(COUNTER_SUFFIXES) for twin in twins}
LABEL_LIST_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right"}
KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan", "atan2"} | LABEL_LIST_KEYWORDS
AGGREGATIONS = {
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
}

TOKEN = re.compile(
    r'(?P<string>"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`)'
    r"|(?P<matchers>\{[^}]*\})"
    r"|(?P<range>\[[^\]]*\])"
    r"|(?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)"
    r"|(?P<number>\d+(?:\.\d+)?(?:e[+-]?\d+)?)"
    r"|(?P<open>\()|(?P<close>\))"
    r"|(?P<other>\S)"
)


def _tokens(expr: str) -> list[tuple[str, str]]:
    return [(m.lastgroup or "", m.group()) for m in TOKEN.finditer(expr) if m.lastgroup != "string"]


def lint(expr: str) -> list[str]:
    findings: list[str] = []
    tokens = _tokens(expr)
    # Stack of open parentheses: the function/aggregation that owns each, "labels" for a label list, "" for
    # plain grouping.
    stack: list[str] = []
    pending_aggregation = ""
    for i, (kind, text) in enumerate(tokens):
        next_kind = tokens[i + 1][0] if i + 1 < len(tokens) else ""
        if kind == "ident":
            if text in LABEL_LIST_KEYWORDS:
                continue
            if next_kind == "open" and i > 0 and tokens[i - 1][1] in LABEL_LIST_KEYWORDS:
                continue
            if text in AGGREGATIONS and next_kind != "open":
                pending_aggregation = text  # `sum by (x) (...)`: the aggregation's parenthesis comes later
                continue
            if next_kind == "open" or text in KEYWORDS:
                continue
            if stack and stack[-1] == "labels":
                continue
            owner = next((f for f in reversed(stack) if f), "")
            is_counter = text.endswith(COUNTER_SUFFIXES) or text in PEER_COUNTERS
            if is_counter and owner not in (*RATE_FUNCTIONS, "count"):
                findings.append(f"counter {text} used outside rate/increase/irate (inside {owner or 'nothing'})")
            if owner in RATE_FUNCTIONS and not is_counter:
                findings.append(f"{owner}() over {text}, which is not a counter")
        elif kind == "open":
            previous_kind, previous = tokens[i - 1] if i > 0 else ("", "")
            if previous in LABEL_LIST_KEYWORDS:
                stack.append("labels")
            elif previous_kind == "ident" and previous not in KEYWORDS:
                stack.append(previous)
            elif pending_aggregation:
                stack.append(pending_aggregation)
                pending_aggregation = ""
            else:
                stack.append("")
        elif kind == "close":
            if stack:
                stack.pop()
        elif kind == "range":
            owner = stack[-1] if stack else ""
            if owner in RATE_FUNCTIONS and text != "[$__rate_interval]":
                findings.append(f"{owner}() over {text}: use [$__rate_interval]")
    return findings
