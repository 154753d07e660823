"""docs/profilers.md, the page for people coming from the retired profilers, against the code it quotes: every
alert it names is in the generated alerts/alert-rules.yml, every ``parameter = value`` it quotes is a parameter
with that default, and every real run it cites is a test function that exists and names the alert; a row that
says "scenario rows only" has a scenario row where its alert fires. Renaming an alert, a parameter or a test, or
changing a default, fails here until the page follows."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest
import yaml

from bottleneck_exporter.heuristics.model import PREFIX
from bottleneck_exporter.heuristics.parameters import PARAMETERS, format_value
from bottleneck_exporter.heuristics.scenarios import SCENARIOS
from tests.conftest import ROOT

PAGE = ROOT / "docs" / "profilers.md"
ANCHORED = "The verdicts the anchors have"
UNANCHORED = "What none of them names"
SCENARIO_ROWS_ONLY = "scenario rows only"

ALERT = re.compile(rf"`({PREFIX}[A-Za-z]+)`")
PARAMETER = re.compile(r"`([a-z0-9_]+) = ([^`]+)`")
TEST = re.compile(r"`(tests/[\w/]+\.py)::(\w+)`")


def section_rows(title: str) -> list[list[str]]:
    """The cells of each body row of the table under the ``## title`` heading."""
    text = PAGE.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    lines = [line for line in text[start:end if end != -1 else None].splitlines() if line.startswith("|")]
    assert len(lines) > 2, f"no table under {title!r}"
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]


@cache
def generated_alerts() -> frozenset[str]:
    rules = yaml.safe_load((ROOT / "alerts" / "alert-rules.yml").read_text())
    return frozenset(rule["alert"] for group in rules["groups"] for rule in group["rules"] if "alert" in rule)


def test_every_alert_the_page_names_is_a_generated_alert() -> None:
    named = set(ALERT.findall(PAGE.read_text()))
    assert named, "the page names no alert"
    assert named <= generated_alerts(), sorted(named - generated_alerts())


def test_a_verdict_is_either_anchored_or_not_never_both() -> None:
    anchored = {name for row in section_rows(ANCHORED) for name in ALERT.findall(row[0])}
    unanchored = {name for row in section_rows(UNANCHORED) for name in ALERT.findall(row[0])}
    assert anchored and unanchored
    assert not anchored & unanchored, sorted(anchored & unanchored)


@pytest.mark.parametrize("row", section_rows(ANCHORED), ids=lambda row: row[0].strip("`"))
def test_each_anchored_row_quotes_parameters_with_their_defaults(row: list[str]) -> None:
    assert len(row) == 4, row
    assert ALERT.findall(row[0]), f"no alert in {row[0]!r}"
    for name, value in PARAMETER.findall(row[2]):
        assert name in PARAMETERS, f"{name} is no parameter of exporter/heuristics/parameters.py"
        assert format_value(PARAMETERS[name].default) == value, (name, value, PARAMETERS[name].default)
    assert PARAMETER.findall(row[2]) or row[2].startswith("no parameter"), row[2]


@pytest.mark.parametrize("row", section_rows(ANCHORED), ids=lambda row: row[0].strip("`"))
def test_each_anchored_row_cites_a_real_run_naming_its_alert_or_its_scenario_rows(row: list[str]) -> None:
    alerts = ALERT.findall(row[0])
    runs = TEST.findall(row[3])
    if row[3] == SCENARIO_ROWS_ONLY:
        for alert in alerts:
            name = alert.removeprefix(PREFIX)
            assert any(s.alert == name and s.kind == "fires" for s in SCENARIOS), f"no scenario row fires {alert}"
        return
    assert runs, f"neither a test nor {SCENARIO_ROWS_ONLY!r}: {row[3]!r}"
    for path, function in runs:
        source = (ROOT / path).read_text()
        assert function in defined_tests(ROOT / path), f"{path} has no test function {function}"
        # The file asserts on the alert (in the function or a module-level table it reads).
        assert any(alert in source for alert in alerts), f"{path} never names {', '.join(alerts)}"


@cache
def defined_tests(path: Path) -> frozenset[str]:
    tree = ast.parse(path.read_text())
    return frozenset(node.name for node in tree.body
                     if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test_"))
