"""Which committed file of a bundle goes where in the folder ``bundle write`` fills, and the two files written for
that folder itself.

Reads the committed files from ``as-committed/`` (importlib.resources; the repository's paths below it). Exposes
``render(bundle, root)``: path relative to ``root`` → text, for this layout::

    prometheus/prometheus.yml                    prometheus --config.file=...   (written here: scrapes this machine)
    prometheus/rules/recording-rules.yml         the bundle's recording rules
    prometheus/rules/alert-rules.yml             and alert rules
    prometheus/rules/tests/*.yml                 promtool test rules ...        (their rule_files point at ../)
    alertmanager/alertmanager.yml                alertmanager --config.file=... (templates/ beside it)
    alertmanager/templates/*.tmpl
    grafana/dashboards/*.json                    the bundle's dashboards
    grafana/provisioning/dashboards/bottleneck.yml    its path: the dashboards above
    grafana/provisioning/datasources/prometheus.yml   its url: the Prometheus above
    gpu-profiles/*.yaml                          bottleneck-exporter --collector.gpu.profile=... (no GPU needed)
    README.md                                    which flag of each tool to point where (``pointers``)

Every file is the committed one but for the lines that name another file's place: the rule_files of the
default bundle's promtool tests (committed in tests/rules/, beside nothing), the provisioning's dashboard path
and data source URL (the compose stack's in the repository).
"""

from __future__ import annotations

import dataclasses
import importlib.resources
import json
import posixpath
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from bottleneck_exporter import __version__
from bottleneck_exporter.bundle.writer import MANIFEST
from bottleneck_exporter.heuristics.sources import (
    BUNDLES,
    DCGM,
    DCGM_BESIDE_OURS,
    DEFAULT_BUNDLE,
    NODE_EXPORTER,
    PEER_JOB,
)

if TYPE_CHECKING:
    from importlib.abc import Traversable

SHIPPED = "as-committed"
EXPORTER_PORT = 9847  # bottleneck_exporter.cli.DEFAULT_PORT, not imported: that module is the daemon's
# Where each tool listens by default; the written prometheus.yml scrapes and alerts through them.
PORTS = {"prometheus": 9090, "alertmanager": 9093, NODE_EXPORTER: 9100, DCGM: 9400}
# The job names the rules and the scenario table use (``up{job="bottleneck-exporter"}``, PEER_JOB).
EXPORTER_JOB = "bottleneck-exporter"
# The node's name on every job's series: the rules join a rank's series with its node's on ``instance``.
NODE = "localhost"

PROMETHEUS_CONFIG = "prometheus/prometheus.yml"
RULES = "prometheus/rules"
RECORDING, ALERTING = f"{RULES}/recording-rules.yml", f"{RULES}/alert-rules.yml"
RULE_TESTS = f"{RULES}/tests"
ALERTMANAGER = "alertmanager"
DASHBOARDS = "grafana/dashboards"
PROVISIONING = "grafana/provisioning"
GPU_PROFILES = "gpu-profiles"
README = "README.md"
DEMO_PROFILE = "hopper-4x-h100.yaml"  # the profile scripts/demo replays


class LayoutError(ValueError):
    """A committed file is not as this layout expects (a generator changed its shape): a bug, named here."""


def committed_rules(bundle: str) -> tuple[str, str, str]:
    """(recording rules, alert rules, promtool tests folder) of ``bundle``, as the repository holds them
    (bottleneck_exporter.heuristics.generate writes them there; tests/test_bundle_command.py holds the two to
    the same paths)."""
    if bundle == DEFAULT_BUNDLE:
        return "prometheus/recording-rules.yml", "alerts/alert-rules.yml", "tests/rules"
    folder = f"prometheus/bundles/{bundle}"
    return f"{folder}/recording-rules.yml", f"{folder}/alert-rules.yml", f"{folder}/tests"


def committed_dashboards(bundle: str) -> str:
    """The folder of ``bundle``'s dashboards (bottleneck_exporter.dashboards.files.bundle_dir)."""
    return "grafana/dashboards" if bundle == DEFAULT_BUNDLE else f"grafana/bundles/{bundle}"


def shipped() -> Traversable:
    return importlib.resources.files("bottleneck_exporter.bundle") / SHIPPED


def _at(relative: str) -> Traversable:
    node = shipped()
    for part in relative.split("/"):
        node = node / part
    return node


def _read(relative: str) -> str:
    return _at(relative).read_text(encoding="utf-8")


def _folder(relative: str, suffix: str) -> Iterator[tuple[str, str]]:
    """(file name, text) of the files of a committed folder ending in ``suffix``, by name."""
    entries = sorted((e for e in _at(relative).iterdir() if e.is_file() and e.name.endswith(suffix)),
                     key=lambda e: e.name)
    if not entries:
        raise LayoutError(f"{SHIPPED}/{relative} holds no *{suffix} file")
    for entry in entries:
        yield entry.name, entry.read_text(encoding="utf-8")


@dataclasses.dataclass(frozen=True)
class Pointer:
    tool: str
    lines: tuple[str, ...]


def render(bundle: str, root: Path) -> dict[str, str]:
    """Every file of ``bundle`` for the folder ``root`` (absolute: the provisioning and README name it)."""
    if bundle not in BUNDLES:
        raise LayoutError(f"unknown bundle {bundle!r}")
    recording, alerting, tests = committed_rules(bundle)
    files = {
        PROMETHEUS_CONFIG: prometheus_config(bundle),
        RECORDING: _read(recording),
        ALERTING: _read(alerting),
    }
    moves = {recording: posixpath.relpath(RECORDING, RULE_TESTS), alerting: posixpath.relpath(ALERTING, RULE_TESTS)}
    for name, text in _folder(tests, ".yml"):
        files[f"{RULE_TESTS}/{name}"] = relocate_rule_files(text, tests, moves, f"{tests}/{name}")
    files[f"{ALERTMANAGER}/alertmanager.yml"] = _read("alerts/alertmanager.yml")
    for name, text in _folder("alerts/templates", ".tmpl"):
        files[f"{ALERTMANAGER}/templates/{name}"] = text
    for name, text in _folder(committed_dashboards(bundle), ".json"):
        files[f"{DASHBOARDS}/{name}"] = text
    provider = "grafana/provisioning/dashboards/bottleneck.yml"
    files[provider] = set_value(_read(provider), "path", str(root / DASHBOARDS), provider)
    datasource = "grafana/provisioning/datasources/prometheus.yml"
    files[datasource] = set_value(_read(datasource), "url", f"http://localhost:{PORTS['prometheus']}", datasource)
    for name, text in _folder("tests/fixtures/gpu-profiles", ".yaml"):
        files[f"{GPU_PROFILES}/{name}"] = text
    files[README] = readme(bundle, root)
    return files


def relocate_rule_files(text: str, folder: str, moves: dict[str, str], name: str) -> str:
    """A promtool test file whose ``rule_files`` entries (relative to ``folder``, where it is committed) are
    rewritten to where ``moves`` puts those files; every other line as committed."""
    lines = text.splitlines(keepends=True)
    try:
        start = lines.index("rule_files:\n") + 1
    except ValueError:
        raise LayoutError(f"{name}: no rule_files list") from None
    end = start
    while end < len(lines) and lines[end].startswith("- "):
        entry = posixpath.normpath(posixpath.join(folder, lines[end][2:].strip()))
        if entry not in moves:
            raise LayoutError(f"{name}: reads {entry}, which this bundle does not carry")
        lines[end] = f"- {moves[entry]}\n"
        end += 1
    if end == start:
        raise LayoutError(f"{name}: empty rule_files list")
    return "".join(lines)


def set_value(text: str, key: str, value: str, name: str) -> str:
    """``text`` with the value of its one ``key:`` line replaced (indentation kept, written as a quoted YAML
    string); LayoutError unless exactly one line holds that key."""
    lines = text.splitlines(keepends=True)
    found = [i for i, line in enumerate(lines) if line.lstrip().startswith(f"{key}:")]
    if len(found) != 1:
        raise LayoutError(f"{name}: {len(found)} lines set {key}, expected one")
    line = lines[found[0]]
    lines[found[0]] = f"{line[:len(line) - len(line.lstrip())]}{key}: {json.dumps(value)}\n"
    return "".join(lines)


def peers(bundle: str) -> list[str]:
    """The other exporters ``bundle`` reads series from."""
    chosen = BUNDLES[bundle]
    found = [NODE_EXPORTER] if chosen.host == NODE_EXPORTER else []
    return found + ([DCGM] if chosen.gpu in (DCGM, DCGM_BESIDE_OURS) else [])


def prometheus_config(bundle: str) -> str:
    """A Prometheus for one machine: scrapes the exporters ``bundle`` reads, evaluates its rules (paths relative
    to the config file), sends alerts to the Alertmanager on this machine."""
    jobs = [(EXPORTER_JOB, EXPORTER_PORT)] + [(PEER_JOB[peer]["job"], PORTS[peer]) for peer in peers(bundle)]
    config = {
        "global": {"scrape_interval": "15s", "evaluation_interval": "15s"},
        "rule_files": [posixpath.relpath(f, posixpath.dirname(PROMETHEUS_CONFIG)) for f in (RECORDING, ALERTING)],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"localhost:{PORTS['alertmanager']}"]}]}]},
        "scrape_configs": [{"job_name": job, "static_configs": [{"targets": [f"localhost:{port}"],
                                                                  "labels": {"instance": NODE}}]}
                           for job, port in jobs],
    }
    scraped = ", ".join(job for job, _ in jobs)
    return (f"# Written by bottleneck-exporter {__version__} bundle write --bundle {bundle}: a Prometheus for this\n"
            f"# machine. It scrapes {scraped} here, evaluates the bundle's rules and sends alerts to the\n"
            "# Alertmanager here. Every job names the node alike (instance): the rules join the jobs' series on it.\n"
            + yaml.safe_dump(config, sort_keys=False, default_flow_style=False))


def pointers(bundle: str, root: Path) -> list[Pointer]:
    """Per tool: the command or setting that points it at ``root``'s files."""
    at = root.as_posix()
    chosen = BUNDLES[bundle]
    profile = f"{at}/{GPU_PROFILES}/{DEMO_PROFILE}"
    return [
        Pointer("Prometheus", (
            f"prometheus --config.file={at}/{PROMETHEUS_CONFIG}",
            f"  or add {at}/{RULES}/*.yml to rule_files: in your own prometheus.yml",
            f"  check: promtool check config {at}/{PROMETHEUS_CONFIG} && promtool test rules {at}/{RULE_TESTS}/*.yml",
        )),
        Pointer("Alertmanager", (
            f"alertmanager --config.file={at}/{ALERTMANAGER}/alertmanager.yml   (edit its CHANGE ME lines first)",
            f"  check: amtool check-config {at}/{ALERTMANAGER}/alertmanager.yml",
        )),
        Pointer("Grafana", (
            f"GF_PATHS_PROVISIONING={at}/{PROVISIONING} grafana server   (or [paths] provisioning in grafana.ini)",
            f"  or copy {at}/{PROVISIONING}/*/*.yml into your provisioning folders; "
            f"dashboards: {at}/{DASHBOARDS}/",
        )),
        Pointer("bottleneck-exporter", (
            f"bundle {bundle}: {chosen.sentence}",
            f"  without a GPU, a recorded one: bottleneck-exporter --collector.gpu.profile={profile}",
        )),
    ]


def format_pointers(found: list[Pointer]) -> str:
    width = max(len(p.tool) for p in found) + 2
    return "".join(f"{(p.tool + ':') if i == 0 else '':<{width}}{line}\n"
                   for p in found for i, line in enumerate(p.lines))


def readme(bundle: str, root: Path) -> str:
    return (f"# bottleneck-exporter bundle `{bundle}`\n\n"
            f"Written by `bottleneck-exporter bundle write {root.as_posix()} --bundle {bundle}` "
            f"(bottleneck-exporter {__version__}). Point each tool here:\n\n```\n"
            + format_pointers(pointers(bundle, root)) + "```\n\n"
            f"`{MANIFEST}` lists the files `bundle write` wrote and their content then. Writing again (after "
            "an upgrade, or with another `--bundle`) replaces and removes only those it wrote and nobody has "
            "edited since; it refuses to touch an edited one (an `alertmanager.yml` with your receivers) unless "
            "given `--force`.\n\nThe rules' thresholds and the alerts' texts: "
            "https://github.com/bottleneck-exporter/bottleneck-exporter/blob/main/docs/runbook.md\n")

