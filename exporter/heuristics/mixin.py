"""The monitoring mixin (``mixin/``): the catalogue's rules of every bundle as jsonnet, its thresholds and the
selectors of each exporter in one ``_config``, written by ``generate`` beside the YAML rule files.

node-mixin and kubernetes-mixin put a placeholder where a threshold or a selector stands and fill it from
``$._config``. The rules here come from :func:`catalogue.resolve`, run once with a *sentinel* per parameter (a
value no rule text holds otherwise); each sentinel's spelling in the resolved text then becomes the field of the
formatted ``_config`` (``p``, lib/params.libsonnet) that stands in for it, so every template the catalogue fills
(a threshold, a ``:pct`` text, a record's name with its window) becomes one without a second way of filling it.
Raw series get their exporter's selector by walking the expression's tree. Rendered with the default
``_config``, the mixin gives the committed rule files of every bundle (tests/test_mixin.py)::

    "job_rank:bottleneck_train_data_wait:ratio_rate" + p.rate_window + " > " + p.data_wait_ratio,
"""

from __future__ import annotations

import dataclasses
import json
import re
import textwrap
from collections.abc import Mapping, Sequence

from bottleneck_exporter.heuristics.catalogue import AlertRule, Catalogue, resolve
from bottleneck_exporter.heuristics.model import GROUPS, REACHES, group_name
from bottleneck_exporter.heuristics.parameters import PARAMETERS, format_value
from bottleneck_exporter.heuristics.promql import Matcher, Node, Selector, format_duration, parse, transform, unparse
from bottleneck_exporter.heuristics.sources import BUNDLES, DEFAULT_BUNDLE

MIXIN = "mixin"
RECORDING_GROUPS = ("training", "node", "gpu")


@dataclasses.dataclass(frozen=True)
class SelectorOption:
    """A ``_config`` selector: the matchers (PromQL, no braces) added to every raw series of one exporter."""

    name: str
    prefix: str  # the series it applies to: their names start with it
    sentence: str


SELECTORS = (
    SelectorOption("bottleneckExporterSelector", "bottleneck_",
                   "Matchers added to every bottleneck-exporter series (`bottleneck_*`), for example "
                   "'job=\"bottleneck-exporter\"'. Empty: every such series Prometheus holds."),
    SelectorOption("nodeExporterSelector", "node_",
                   "Matchers added to every node_exporter series (`node_*`, read by the node-exporter bundles), "
                   "for example 'job=\"node-exporter\"' as kube-prometheus-stack scrapes it."),
    SelectorOption("dcgmExporterSelector", "DCGM_",
                   "Matchers added to every dcgm-exporter series (`DCGM_*`, read by the node-exporter-dcgm "
                   "bundles), for example 'job=\"nvidia-dcgm-exporter\"' as the GPU Operator scrapes it."),
)
# The label a selector's placeholder stands in for while the expression is a tree: no series carries it.
_SELECTOR_LABEL = "__mixin_{}__"


def _sentinels() -> dict[str, float | str]:
    """A value per parameter that no rule text holds otherwise, and that the catalogue spells back unchanged:
    numbers 7.0NN3 (so ``:pct`` reads 70N.N3%), durations that Prometheus prints as written, label names
    ``__mixin_param_name__``, other text ``@name@``."""
    found: dict[str, float | str] = {}
    for i, (name, param) in enumerate(PARAMETERS.items(), start=1):
        if param.kind == "number":
            found[name] = float(f"7.{i:03d}3")
        elif param.kind == "duration":
            found[name] = format_duration(i * 3600 + 7 * 60 + 13)
        elif param.kind == "label":  # spelled in by and on clauses: must be a label name
            found[name] = f"__mixin_param_{name}__"
        else:
            found[name] = f"@{name}@"
    return found


def _placeholders() -> dict[str, tuple[str, str]]:
    """Each sentinel's spelling in resolved text → (the text it keeps, the field of the formatted _config that
    stands in for the rest)."""
    spelled: dict[str, tuple[str, str]] = {}
    for name, value in _sentinels().items():
        spelled[format_value(value)] = ("", name)
        if not isinstance(value, str):
            spelled[f"{value * 100:g}%"] = ("", f"{name}_pct")
    for option in SELECTORS:
        label = _SELECTOR_LABEL.format(option.name)
        spelled[f'{{{label}=""}}'] = ("", f"{option.name}_braces")
        spelled[f'{{{label}="", '] = ("{", f"{option.name}_first")
    return spelled


_PLACEHOLDERS = _placeholders()


def _alternatives(spellings: list[str]) -> str:
    return "|".join(re.escape(s) for s in sorted(spellings, key=len, reverse=True))


# A number or a duration sentinel is never the tail of a longer number (1h7m13s in 11h7m13s).
_SPELLINGS = re.compile("(?<![0-9])(?:" + _alternatives([s for s in _PLACEHOLDERS if s[0].isdigit()]) + ")|"
                        + _alternatives([s for s in _PLACEHOLDERS if not s[0].isdigit()]))


def template(line: str) -> str:
    """One line of resolved text as a jsonnet expression: its text, and ``p.<field>`` where a sentinel stood.
    Concatenated, not ``%``-formatted: the C++ jsonnet (the Python binding) formats in interpreted jsonnet, a
    hundred times slower over rule files this size."""
    parts: list[str] = []
    at = 0
    for match in _SPELLINGS.finditer(line):
        kept, field = _PLACEHOLDERS[match.group(0)]
        text = line[at:match.start()] + kept
        if text:
            parts.append(json.dumps(text, ensure_ascii=False))
        parts.append(f"p.{field}")
        at = match.end()
    if at < len(line) or not parts:
        parts.append(json.dumps(line[at:], ensure_ascii=False))
    return " + ".join(parts)


def with_selectors(expr: str) -> str:
    """``expr`` with each raw series' exporter selector placeholder first among its matchers."""

    def one(node: Node) -> Node | None:
        if not isinstance(node, Selector):
            return None
        name = next((m.value for m in node.matchers if m.name == "__name__" and m.op == "="), "")
        option = next((o for o in SELECTORS if name.startswith(o.prefix)), None)
        if option is None:
            return None
        placeholder = Matcher(_SELECTOR_LABEL.format(option.name), "=", "")
        named = [m for m in node.matchers if m.name == "__name__" and m.op == "="]
        others = tuple(m for m in node.matchers if m not in named)
        return dataclasses.replace(node, matchers=(*named, placeholder, *others), layout=None)

    return unparse(transform(parse(expr), one))


def _value(text: str, indent: str) -> str:
    """``text`` as a jsonnet expression; several lines joined from one expression per line."""
    if "\n" not in text:
        return template(text)
    inner = indent + "  "
    lines = "".join(f"{inner}{template(line)},\n" for line in text.split("\n"))
    return f"std.join('\\n', [\n{lines}{indent}])"


def _object(fields: Mapping[str, str], indent: str) -> str:
    """``fields`` (key → jsonnet value already written) as a jsonnet object, one field per line."""
    inner = indent + "  "
    body = "".join(f"{inner}{_key(k)}: {v},\n" for k, v in fields.items())
    return "{\n" + body + indent + "}"


def _key(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) and name not in ("for", "local") else \
        json.dumps(name)


def _alert(rule: AlertRule, indent: str) -> str:
    inner = indent + "  "
    fields = {
        "alert": json.dumps(rule.alert),
        "expr": _value(with_selectors(rule.expr), inner),
        "for": json.dumps(rule.for_),
        "labels": _object({k: json.dumps(v) for k, v in rule.labels.items()}, inner),
        "annotations": _object({k: _value(v, inner + "  ") for k, v in rule.annotations.items()}, inner),
    }
    return _object(fields, indent)


def _record(record: str, expr: str, indent: str) -> str:
    inner = indent + "  "
    return _object({"record": _value(record, inner), "expr": _value(with_selectors(expr), inner)}, indent)


def _by_bundle(rules: Mapping[str, list[str]]) -> str:
    """bundle → rules (jsonnet values at depth 2) as a jsonnet object of arrays."""
    out = ["{"]
    for bundle, written in rules.items():
        out.append(f"  {_key(bundle)}: [")
        out += [f"    {rule}," for rule in written]
        out.append("  ],")
    out.append("}")
    return "\n".join(out)


def _comment(text: str, indent: str = "") -> str:
    lines = textwrap.wrap(text, 112 - len(indent), break_on_hyphens=False, break_long_words=False)
    return "".join(f"{indent}// {line}\n" for line in lines)


def _header(first: str, comment: str) -> str:
    """``first`` (the line that names the command that regenerates the file), then what the file holds."""
    return first + _comment(comment)


def _by_reach(rules: Mapping[str, Mapping[str, list[str]]]) -> str:
    """reach → bundle → rules as a jsonnet object of :func:`_by_bundle` objects."""
    fields = "".join(f"{json.dumps(reach)}: {_by_bundle(by_bundle)},\n" for reach, by_bundle in rules.items())
    return "{\n" + fields + "}"


def render_area_alerts(first: str, area: str, catalogues: Mapping[str, Catalogue]) -> str:
    rules = {reach: {bundle: [_alert(r, "    ") for r in c.alerts if (r.heuristic.group, r.reach) == (area, reach)]
                     for bundle, c in catalogues.items()} for reach in REACHES}
    return (_header(first, f"The {area} alerts of every bundle by where they can run (docs/rules.md), as a function "
                    "of the formatted _config (lib/params.libsonnet); alerts.libsonnet picks _config.bundle's.")
            + "function(p) " + _by_reach(rules) + "\n")


def render_area_records(first: str, group: str, catalogues: Mapping[str, Catalogue]) -> str:
    rules = {reach: {bundle: [_record(r.record, r.expr, "    ") for r in c.records
                              if (r.group, r.reach) == (group, reach)]
                     for bundle, c in catalogues.items()} for reach in REACHES}
    return (_header(first, f"The {group} recording rules of every bundle by where they can run (docs/rules.md), as a "
                    "function of the formatted _config (lib/params.libsonnet); rules.libsonnet picks _config.bundle's.")
            + "function(p) " + _by_reach(rules) + "\n")


def _groups(first: str, field: str, areas: Sequence[str], recording: bool) -> str:
    """``field`` (prometheusAlerts or prometheusRules) with the groups the YAML files have: one per area and reach
    (model.group_name), each at _config.rule_interval, holding the rules of _config.bundle; empty ones left out."""
    lines = [_header(first, f"{field}: one group per area and reach, each holding the rules of the bundle "
                     "_config.bundle names; a group with none is left out, as in the YAML files."),
             "local params = import '../lib/params.libsonnet';", "", "{", f"  {field}+:: {{",
             "    local p = params($._config),", "    local pick = p.pick,", "    local all = ["]
    for area in areas:
        for reach in REACHES:
            lines.append(f"      {{ name: {json.dumps(group_name(area, reach, recording))}, interval: p.rule_interval, "
                         f"rules: pick((import '{area}.libsonnet')(p)[{json.dumps(reach)}]) }},")
    lines += ["    ],", "    groups+: [group for group in all if std.length(group.rules) > 0],", "  },", "}", ""]
    return "\n".join(lines)


def render_config(first: str, catalogue: Catalogue) -> str:
    lines = [_header(first, "Every selector and threshold the mixin's rules read, each with the sentence that "
                     "explains it (the parameters of docs/runbook.md). Override any of them: "
                     "(import 'mixin.libsonnet') + { _config+:: { data_wait_ratio: 0.3 } }."),
             "{", "  _config+:: {"]

    def field(name: str, value: str, sentence: str) -> None:
        lines.append(_comment(sentence, "    ") + f"    {_key(name)}: {value},")

    field("bundle", json.dumps(DEFAULT_BUNDLE), "The rule bundle: which exporter each family of series comes from. "
          + "; ".join(f"'{b.name}': {b.sentence}" for b in BUNDLES.values()) + ".")
    for option in SELECTORS:
        field(option.name, json.dumps(""), option.sentence)
    for name, param in PARAMETERS.items():
        value = catalogue.parameters[name]
        written = json.dumps(value) if isinstance(value, str) else format_value(value)
        field(name, written, param.sentence)
    lines += ["  },", "}", ""]
    return "\n".join(lines)


def render_params(first: str) -> str:
    """lib/params.libsonnet: which parameters are numbers and which text, for lib/format.libsonnet."""
    numbers = [n for n, p in PARAMETERS.items() if p.kind == "number"]
    texts = [n for n, p in PARAMETERS.items() if p.kind != "number"]

    def names(found: list[str]) -> str:
        return "[\n" + "".join(f"  {json.dumps(n)},\n" for n in found) + "]"

    return (_header(first, "The _config formatted as the rule templates read it (lib/format.libsonnet): which "
                    "parameters are numbers, which text, and the selectors.")
            + "local format = import 'format.libsonnet';\n\n"
            + f"local numbers = {names(numbers)};\n\nlocal texts = {names(texts)};\n\n"
            + f"local selectors = {names([o.name for o in SELECTORS])};\n\n"
            + f"local bundles = {names(list(BUNDLES))};\n\n"
            + "function(config) format.params(config, numbers, texts, selectors, bundles)\n")


def render_mixin(first: str) -> str:
    return (_header(first, "The bottleneck-exporter monitoring mixin: prometheusAlerts, prometheusRules and "
                    "grafanaDashboards, configured by _config (config.libsonnet).")
            + " +\n".join(f"(import '{f}.libsonnet')" for f in ("config", "alerts/alerts", "rules/rules",
                                                                 "dashboards/dashboards")) + "\n")


def outputs(first: str, catalogue: Catalogue) -> dict[str, str]:
    """Path relative to the repository → text of every generated file of ``mixin/`` but its dashboards (written
    by ``python -m bottleneck_exporter.dashboards``), each starting with ``first``; ``_config`` holds the values of
    ``catalogue``. ``mixin/lib/format.libsonnet`` is written by hand."""
    catalogues = {bundle: resolve(_sentinels(), bundle=bundle) for bundle in BUNDLES}
    files = {
        f"{MIXIN}/mixin.libsonnet": render_mixin(first),
        f"{MIXIN}/config.libsonnet": render_config(first, catalogue),
        f"{MIXIN}/lib/params.libsonnet": render_params(first),
        f"{MIXIN}/alerts/alerts.libsonnet": _groups(first, "prometheusAlerts", GROUPS, recording=False),
        f"{MIXIN}/rules/rules.libsonnet": _groups(first, "prometheusRules", RECORDING_GROUPS, recording=True),
    }
    for area in GROUPS:
        files[f"{MIXIN}/alerts/{area}.libsonnet"] = render_area_alerts(first, area, catalogues)
    for group in RECORDING_GROUPS:
        files[f"{MIXIN}/rules/{group}.libsonnet"] = render_area_records(first, group, catalogues)
    return files
