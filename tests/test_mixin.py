"""The monitoring mixin (mixin/), rendered with the jsonnet Python binding: with the default _config it gives the
committed rule files of every bundle and the committed dashboards; an overridden threshold or selector reaches
every rule that reads it, as ``generate --set`` would write it, and promtool accepts the result.

The mixin's rule files are drift-tested with the other generated files (test_rules.py), its dashboards here.
"""

from __future__ import annotations

import functools
import json
import subprocess
from pathlib import Path
from typing import Any

import _jsonnet
import pytest
import yaml

from bottleneck_exporter.dashboards.files import REGENERATE, render_all, render_mixin
from bottleneck_exporter.heuristics import generate
from bottleneck_exporter.heuristics.catalogue import resolve
from bottleneck_exporter.heuristics.mixin import SELECTORS
from bottleneck_exporter.heuristics.parameters import PARAMETERS
from bottleneck_exporter.heuristics.promql import Node, Selector, children, parse
from bottleneck_exporter.heuristics.sources import BUNDLES, DEFAULT_BUNDLE
from tests.conftest import ROOT, require_tool

MIXIN = ROOT / "mixin"

# A value for every parameter unlike its default: text of the parameter's kind, twice each number plus 0.01
# (rounded: a sum such as 0.1 * 2 + 0.01 needs 17 digits, which lib/format.libsonnet spells longer than repr()).
OTHER_TEXT = {"rate_window": "2m", "xid_window": "3h", "exporter_job": "gpu-nodes",
              "runbook_base_url": "https://wiki.example.com/runbook", "sawtooth_idle_le": "0.1",
              "sawtooth_busy_le": "0.9", "throttle_reasons": "hw_slowdown", "xid_fatal": "79",
              "xid_application": "13|43", "cluster_label": "k8s_cluster", "rule_interval": "30s"}
OVERRIDES: dict[str, object] = {
    # A duration not named above: one no default has.
    name: (OTHER_TEXT.get(name, "17m") if param.kind == "duration" else OTHER_TEXT[name])
    if isinstance(param.default, str) else round(param.default * 2 + 0.01, 6)
    for name, param in PARAMETERS.items()
}


def render(config: dict[str, object] | None = None, field: str = "") -> Any:
    """The mixin with ``config`` merged into its _config; ``field`` alone, or the three outputs."""
    fields = [field] if field else ["prometheusAlerts", "prometheusRules", "grafanaDashboards", "_config"]
    snippet = (f"local m = (import 'mixin.libsonnet') + {{ _config+:: {json.dumps(config or {})} }};\n"
               + "{" + ", ".join(f"{f}: m.{f}" for f in fields) + "}")
    found = json.loads(_jsonnet.evaluate_snippet("test", snippet, jpathdir=[str(MIXIN)]))
    return found[field] if field else found


@functools.cache
def default() -> Any:
    return render(field="_config")


def committed(path: str) -> Any:
    return yaml.safe_load((ROOT / path).read_text())


def as_written(bundle: str, overrides: dict[str, object]) -> tuple[Any, Any]:
    """(alert rules, recording rules) of ``bundle`` as ``generate --set`` writes them for ``overrides``."""
    catalogue = resolve(overrides, bundle=bundle)
    return (yaml.safe_load(generate.render_alert_rules(catalogue)),
            yaml.safe_load(generate.render_recording_rules(catalogue)))


def promtool_check(tmp_path: Path, rendered: dict[str, Any]) -> str:
    files = []
    for field in ("prometheusRules", "prometheusAlerts"):
        path = tmp_path / f"{field}.yml"
        path.write_text(yaml.safe_dump(rendered[field], sort_keys=False))
        files.append(str(path))
    result = subprocess.run([require_tool("promtool"), "check", "rules", *files],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "WARNING" not in result.stdout + result.stderr
    return result.stdout


def selectors(node: Node) -> list[Selector]:
    found = [node] if isinstance(node, Selector) else []
    for kid in children(node):
        found += selectors(kid)
    return found


@pytest.mark.parametrize("bundle", list(BUNDLES))
def test_the_default_config_gives_the_committed_rules_of_the_bundle(bundle: str) -> None:
    recording, alerting = generate.bundle_files(bundle)
    rendered = render({"bundle": bundle})
    assert rendered["prometheusAlerts"] == committed(alerting)
    assert rendered["prometheusRules"] == committed(recording)


def test_the_mixins_dashboards_are_current_copies() -> None:
    """Drift: mixin/dashboards/ holds a copy of every bundle's dashboards (jsonnet-bundler vendors mixin/ alone)."""
    expected = render_mixin(render_all())
    committed = {p.relative_to(ROOT).as_posix() for p in (MIXIN / "dashboards").rglob("*") if p.is_file()}
    assert committed == {str(path) for path in expected}, f"run {REGENERATE}"
    stale = [str(path) for path, text in expected.items() if (ROOT / path).read_text() != text]
    assert not stale, f"stale, run {REGENERATE}: {stale}"


@pytest.mark.parametrize("bundle", [DEFAULT_BUNDLE, "node-exporter-dcgm"])
def test_grafana_dashboards_are_the_committed_dashboards_of_the_bundle(bundle: str) -> None:
    folder = ROOT / ("grafana/dashboards" if bundle == DEFAULT_BUNDLE else f"grafana/bundles/{bundle}")
    expected = {path.name: json.loads(path.read_text()) for path in sorted(folder.glob("*.json"))}
    assert render({"bundle": bundle}, "grafanaDashboards") == expected


def test_config_holds_every_parameter_and_a_selector_per_exporter() -> None:
    assert set(default()) == {"bundle", *(o.name for o in SELECTORS), *PARAMETERS}
    assert {o.name for o in SELECTORS} == {"bottleneckExporterSelector", "nodeExporterSelector",
                                           "dcgmExporterSelector"}
    assert {name: default()[name] for name in PARAMETERS} == {n: p.default for n, p in PARAMETERS.items()}


@pytest.mark.parametrize("bundle", [DEFAULT_BUNDLE, "node-exporter-dcgm"])
def test_every_threshold_overridden_in_config_gives_the_rules_generate_set_writes(bundle: str,
                                                                                 tmp_path: Path) -> None:
    """Every parameter changed at once: each rule reads its thresholds from _config, none is left written in."""
    assert all(OVERRIDES[name] != param.default for name, param in PARAMETERS.items())
    rendered = render({**OVERRIDES, "bundle": bundle})
    alerts, records = as_written(bundle, OVERRIDES)
    assert rendered["prometheusAlerts"] == alerts
    assert rendered["prometheusRules"] == records
    assert rendered["prometheusAlerts"] != committed(generate.bundle_files(bundle)[1])
    exprs = [r["expr"] for g in rendered["prometheusAlerts"]["groups"] for r in g["rules"]]
    assert any("> 1.01" in e for e in exprs) and any("[2m]" in e for e in exprs)
    promtool_check(tmp_path, rendered)


def test_one_overridden_threshold_changes_only_the_rules_that_read_it() -> None:
    rendered = render({"data_wait_ratio": 0.3}, "prometheusAlerts")
    before = {r["alert"]: r for g in committed(generate.ALERT_RULES)["groups"] for r in g["rules"]}
    after = {r["alert"]: r for g in rendered["groups"] for r in g["rules"]}
    changed = {name for name in after if after[name] != before[name]}
    assert {"BottleneckInputBound", "BottleneckIoBound"} <= changed
    assert "BottleneckGpuTooHot" not in changed
    assert "job_rank:bottleneck_train_data_wait:ratio_rate5m > 0.3\n" in after["BottleneckInputBound"]["expr"]
    assert "(threshold 30%)" in after["BottleneckInputBound"]["annotations"]["description"]


def test_each_exporters_selector_reaches_every_one_of_its_series(tmp_path: Path) -> None:
    chosen = {"bottleneckExporterSelector": 'job="bottleneck-exporter"',
              "nodeExporterSelector": 'job="node-exporter", cluster!="lab"',
              "dcgmExporterSelector": 'job="nvidia-dcgm-exporter"'}
    rendered = render({"bundle": "node-exporter-dcgm", **chosen})
    seen: set[str] = set()
    for field in ("prometheusAlerts", "prometheusRules"):
        for group in rendered[field]["groups"]:
            for rule in group["rules"]:
                for selector in selectors(parse(rule["expr"])):
                    name = next((m.value for m in selector.matchers if m.name == "__name__"), "")
                    option = next((o for o in SELECTORS if name.startswith(o.prefix)), None)
                    if option is None:
                        continue
                    written = {(m.name, m.op, m.value) for m in selector.matchers}
                    wanted = {(m.name, m.op, m.value) for m in parse("{" + chosen[option.name] + "}").matchers}
                    assert wanted <= written, (rule.get("alert") or rule["record"], name)
                    seen.add(option.name)
    assert seen == set(chosen)
    promtool_check(tmp_path, rendered)


@pytest.mark.parametrize(("config", "message"), [
    ({"data_wait_ratio": "half"}, "_config.data_wait_ratio: expected a number"),
    ({"exporter_job": ""}, "_config.exporter_job: expected a non-empty string"),
    ({"nodeExporterSelector": 5}, "_config.nodeExporterSelector: expected PromQL matchers"),
    ({"bundle": "kube-prometheus"}, "_config.bundle: kube-prometheus is not one of bottleneck, node-exporter"),
])
def test_a_bad_config_value_stops_the_rendering_naming_its_key(config: dict[str, object], message: str) -> None:
    with pytest.raises(RuntimeError, match=message):
        render(config, "prometheusAlerts")
