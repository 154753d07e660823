"""benchmarks/fleet_rules.py on a fleet of two nodes: it runs end to end (the real node_exporter scraped for its
template, promtool's backfill, a real Prometheus per bundle) and prints one well-formed line per bundle asked for
and one for the peer, their series matching the per-node counts it reports. No timing is asserted."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from bottleneck_exporter.bundle.layout import committed_rules, prometheus_config
from tests.conftest import ROOT, require_tool

pytestmark = [pytest.mark.tools]

NODES = 2
BUNDLE = "node-exporter-dcgm-only"
LINE = re.compile(rf"fleet nodes={NODES} gpus_per_node=8 (?P<key>bundle|peer)=(?P<name>\S+) series=(?P<series>\d+) "
                  r"recorded_series=(?P<recorded>\d+) rule_groups_eval_seconds=(?P<seconds>\d+\.\d+) "
                  r"interval_seconds=(?P<interval>\d+(\.\d+)?)")


def seconds(duration: str) -> float:
    value, unit = re.fullmatch(r"(\d+)([smh])", duration).groups()  # type: ignore[union-attr]
    return float(value) * {"s": 1, "m": 60, "h": 3600}[unit]


def shortest_interval(bundle: str) -> float:
    """The shortest interval of the bundle's rule groups: their own, else the written prometheus.yml's."""
    default = yaml.safe_load(prometheus_config(bundle))["global"]["evaluation_interval"]
    groups = [g for path in committed_rules(bundle)[:2] for g in yaml.safe_load((ROOT / path).read_text())["groups"]]
    return min(seconds(g.get("interval", default)) for g in groups)


def test_the_fleet_benchmark_prints_a_line_per_bundle_and_the_peer(tmp_path: Path) -> None:
    for tool in ("prometheus", "promtool", "prometheus-node-exporter"):
        require_tool(tool)
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "fleet_rules.py"), "--nodes", str(NODES), "--evaluations", "1",
         "--bundles", BUNDLE, "node-mixin", "--workdir", str(tmp_path)],
        capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    found = [LINE.fullmatch(line) for line in lines]
    assert all(found) and len(found) == 2, lines
    got = {m["name"]: m for m in found if m}
    assert (got[BUNDLE]["key"], got["node-mixin"]["key"]) == ("bundle", "peer")
    per_node = dict(re.findall(r"^# series per node, (\S+): .* total=(\d+)$", result.stderr, re.MULTILINE))
    for name, match in got.items():
        assert int(match["series"]) == NODES * int(per_node[name]), (name, per_node)
        assert int(match["recorded"]) > 0
        # The load-independent cost: the samples its rules read, each rule queried again with stats=all.
        read = re.search(rf"^# {name}: (\d+) samples read per evaluation of every group; the most: (\S+) (\d+)",
                         result.stderr, re.MULTILINE)
        assert read is not None and int(read[1]) >= int(read[3]) > 0, result.stderr
    assert float(got[BUNDLE]["interval"]) == shortest_interval(BUNDLE)
    assert float(got["node-mixin"]["interval"]) == 30  # kube-prometheus-stack's evaluation interval
