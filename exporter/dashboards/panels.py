"""Plain-dict builders for Grafana dashboard JSON: panels, Prometheus targets, template variables, layout.

Every panel built here carries the ``$datasource`` variable, a unit and a description, because the
dashboard lint (tests/test_dashboards.py) refuses a panel without them. Nothing here knows about metrics;
the dashboard modules (fleet, node, training, verdicts) hold the PromQL.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

Panel = dict[str, Any]
DATASOURCE: dict[str, str] = {"type": "prometheus", "uid": "${datasource}"}
SCHEMA_VERSION = 39
GRID_WIDTH = 24


@dataclasses.dataclass(frozen=True)
class Query:
    """One Prometheus target. ``instant`` queries feed tables and stats that show the current value."""

    expr: str
    legend: str = ""
    instant: bool = False
    table: bool = False

    def target(self, ref_id: str) -> dict[str, Any]:
        return {
            "datasource": DATASOURCE,
            "refId": ref_id,
            "expr": self.expr,
            "legendFormat": self.legend or "__auto",
            "range": not self.instant,
            "instant": self.instant,
            "format": "table" if self.table else "time_series",
        }


@dataclasses.dataclass(frozen=True)
class Threshold:
    value: float
    color: str


def _thresholds(steps: Sequence[Threshold]) -> dict[str, Any]:
    base = {"color": "green", "value": None}
    return {"mode": "absolute", "steps": [base, *({"color": t.color, "value": t.value} for t in steps)]}


def _panel(
    kind: str,
    title: str,
    description: str,
    unit: str,
    queries: Sequence[Query],
    *,
    width: int,
    height: int,
    options: dict[str, Any],
    custom: dict[str, Any] | None = None,
    thresholds: Sequence[Threshold] = (),
    min_value: float | None = None,
    max_value: float | None = None,
    mappings: list[dict[str, Any]] | None = None,
    transformations: list[dict[str, Any]] | None = None,
) -> Panel:
    if not description.strip():
        raise ValueError(f"panel {title!r}: a description is required")
    if not unit:
        raise ValueError(f"panel {title!r}: a unit is required")
    defaults: dict[str, Any] = {
        "unit": unit,
        "custom": custom or {},
        "thresholds": _thresholds(thresholds),
        "mappings": mappings or [],
    }
    if thresholds:
        defaults["color"] = {"mode": "thresholds"} if kind in ("stat", "bargauge") else {"mode": "palette-classic"}
    if min_value is not None:
        defaults["min"] = min_value
    if max_value is not None:
        defaults["max"] = max_value
    refs = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    panel: Panel = {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "gridPos": {"h": height, "w": width, "x": 0, "y": 0},
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": options,
        "targets": [q.target(refs[i]) for i, q in enumerate(queries)],
    }
    if transformations:
        panel["transformations"] = transformations
    return panel


def timeseries(
    title: str,
    description: str,
    unit: str,
    queries: Sequence[Query],
    *,
    width: int = 12,
    height: int = 8,
    stack: bool = False,
    bars: bool = False,
    thresholds: Sequence[Threshold] = (),
    min_value: float | None = None,
    max_value: float | None = None,
) -> Panel:
    custom: dict[str, Any] = {
        "drawStyle": "bars" if bars else "line",
        "lineWidth": 1,
        "fillOpacity": 80 if bars else (30 if stack else 10),
        "showPoints": "never",
        "spanNulls": False,
        "stacking": {"mode": "normal" if stack else "none", "group": "A"},
    }
    if thresholds:
        # A dashed line at each threshold: the verdict's cut-off drawn onto the signal it reads.
        custom["thresholdsStyle"] = {"mode": "dashed"}
    options = {
        "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
        "tooltip": {"mode": "multi", "sort": "desc"},
    }
    return _panel(
        "timeseries",
        title,
        description,
        unit,
        queries,
        width=width,
        height=height,
        options=options,
        custom=custom,
        thresholds=thresholds,
        min_value=min_value,
        max_value=max_value,
    )


def stat(
    title: str,
    description: str,
    unit: str,
    queries: Sequence[Query],
    *,
    width: int = 6,
    height: int = 4,
    thresholds: Sequence[Threshold] = (),
    decimals: int | None = None,
) -> Panel:
    options = {
        "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
        "colorMode": "value",
        "graphMode": "area",
        "justifyMode": "auto",
        "textMode": "auto",
        "orientation": "auto",
    }
    panel = _panel(
        "stat",
        title,
        description,
        unit,
        queries,
        width=width,
        height=height,
        options=options,
        thresholds=thresholds,
    )
    if decimals is not None:
        panel["fieldConfig"]["defaults"]["decimals"] = decimals
    return panel


def bargauge(
    title: str,
    description: str,
    unit: str,
    queries: Sequence[Query],
    *,
    width: int = 12,
    height: int = 8,
    thresholds: Sequence[Threshold] = (),
    min_value: float | None = None,
    max_value: float | None = None,
) -> Panel:
    options = {
        "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
        "orientation": "horizontal",
        "displayMode": "gradient",
        "showUnfilled": True,
    }
    return _panel(
        "bargauge",
        title,
        description,
        unit,
        queries,
        width=width,
        height=height,
        options=options,
        thresholds=thresholds,
        min_value=min_value,
        max_value=max_value,
    )


def table(
    title: str,
    description: str,
    unit: str,
    queries: Sequence[Query],
    *,
    width: int = 24,
    height: int = 8,
    hide: Iterable[str] = ("Time",),
    rename: dict[str, str] | None = None,
) -> Panel:
    """Instant queries in table format, merged on their common labels (one row per series)."""
    transformations: list[dict[str, Any]] = [{"id": "merge", "options": {}}]
    transformations.append(
        {
            "id": "organize",
            "options": {
                "excludeByName": dict.fromkeys(hide, True),
                "renameByName": rename or {},
                "indexByName": {},
            },
        }
    )
    options = {"showHeader": True, "cellHeight": "sm", "footer": {"show": False}}
    return _panel(
        "table",
        title,
        description,
        unit,
        queries,
        width=width,
        height=height,
        options=options,
        transformations=transformations,
    )


def state_timeline(
    title: str,
    description: str,
    unit: str,
    queries: Sequence[Query],
    *,
    width: int = 24,
    height: int = 10,
    states: dict[str, tuple[str, str]] | None = None,
) -> Panel:
    """``states`` maps a value ("0", "1") to (text, color)."""
    mappings = [
        {
            "type": "value",
            "options": {
                value: {"text": text, "color": color, "index": i}
                for i, (value, (text, color)) in enumerate((states or {}).items())
            },
        }
    ]
    options = {
        "showValue": "never",
        "mergeValues": True,
        "alignValue": "left",
        "rowHeight": 0.9,
        "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
        "tooltip": {"mode": "single", "sort": "none"},
    }
    return _panel(
        "state-timeline",
        title,
        description,
        unit,
        queries,
        width=width,
        height=height,
        options=options,
        custom={"fillOpacity": 80, "lineWidth": 0},
        mappings=mappings,
    )


def heatmap(
    title: str, description: str, unit: str, queries: Sequence[Query], *, width: int = 12, height: int = 8
) -> Panel:
    """A heatmap of a Prometheus histogram's buckets (targets must use ``format=heatmap`` on ``le``)."""
    panel = _panel(
        "heatmap",
        title,
        description,
        unit,
        queries,
        width=width,
        height=height,
        options={
            "calculate": False,
            "yAxis": {"axisPlacement": "left", "unit": unit},
            "cellGap": 1,
            "color": {"mode": "scheme", "scheme": "Oranges", "scale": "exponential", "exponent": 0.5},
            "tooltip": {"mode": "single", "yHistogram": False},
            "legend": {"show": True},
            "rowsFrame": {"layout": "auto"},
        },
    )
    for target in panel["targets"]:
        target["format"] = "heatmap"
        target["legendFormat"] = "{{le}}"
    return panel


def text(title: str, content: str, *, width: int = 12, height: int = 8) -> Panel:
    """A markdown text panel: no query, so no datasource, unit or description (the lint skips it)."""
    return {
        "type": "text",
        "title": title,
        "gridPos": {"h": height, "w": width, "x": 0, "y": 0},
        "options": {"mode": "markdown", "content": content},
    }


def with_links(panel: Panel, links: Sequence[tuple[str, str]]) -> Panel:
    """The panel with (title, url) links in its header menu, e.g. the verdict's runbook."""
    return {**panel, "links": [{"title": title, "url": url, "targetBlank": True} for title, url in links]}


def with_value_text(panel: Panel, field: str, texts: dict[str, str]) -> Panel:
    """The panel with the values of ``field`` shown as ``texts`` (an alert name as its verdict, say)."""
    override = {
        "matcher": {"id": "byName", "options": field},
        "properties": [
            {
                "id": "mappings",
                "value": [
                    {
                        "type": "value",
                        "options": {value: {"text": text, "index": i} for i, (value, text) in enumerate(texts.items())},
                    }
                ],
            }
        ],
    }
    field_config = panel["fieldConfig"]
    return {**panel, "fieldConfig": {**field_config, "overrides": [*field_config["overrides"], override]}}


def with_unit_of(panel: Panel, names: str, unit: str) -> Panel:
    """The panel with the series or columns whose display name matches the regex ``names`` in ``unit``: a
    panel drawing two quantities (switches per second beside a count of tasks) gives each its own."""
    if "fieldConfig" not in panel:  # a note in place of a panel the bundle cannot draw
        return panel
    override = {"matcher": {"id": "byRegexp", "options": names}, "properties": [{"id": "unit", "value": unit}]}
    field_config = panel["fieldConfig"]
    return {**panel, "fieldConfig": {**field_config, "overrides": [*field_config["overrides"], override]}}


def row(title: str, collapsed: bool = False) -> Panel:
    return {
        "type": "row",
        "title": title,
        "collapsed": collapsed,
        "gridPos": {"h": 1, "w": GRID_WIDTH, "x": 0, "y": 0},
        "panels": [],
    }


# Grid units a 1080p browser window shows below the dashboard's header (a unit is 30 px plus an 8 px margin):
# the first screen. A row that starts below it is collapsed, so a dashboard opens at what fits and loads the
# queries of the rest only when a person opens their row.
FIRST_SCREEN = 22


def layout(panels: Sequence[Panel]) -> list[Panel]:
    """Give every panel an id and a grid position: rows span the width, panels flow left to right. A row that
    starts below the first screen is collapsed: its panels move into it (Grafana's ``panels`` of a collapsed
    row), at the positions they take when it opens."""
    placed: list[Panel] = []
    x = y = line_height = 0
    for number, panel in enumerate(panels, start=1):
        panel = {**panel, "id": number}
        width, height = panel["gridPos"]["w"], panel["gridPos"]["h"]
        if panel["type"] == "row" or x + width > GRID_WIDTH:
            y += line_height
            x = line_height = 0
        panel["gridPos"] = {"h": height, "w": width, "x": x, "y": y}
        x += width
        line_height = max(line_height, height)
        if panel["type"] == "row":
            y += height
            x = line_height = 0
        placed.append(panel)
    return _collapse_below_first_screen(placed)


def _collapse_below_first_screen(placed: list[Panel]) -> list[Panel]:
    top: list[Panel] = []
    shift = 0  # how much higher everything sits than laid out, for the collapsed rows above it
    collapsed: Panel | None = None
    for panel in placed:
        pos = panel["gridPos"]
        if panel["type"] == "row" and pos["y"] >= FIRST_SCREEN:
            if collapsed is not None:
                shift += _content_height(collapsed)
            collapsed = {**panel, "collapsed": True, "panels": [], "gridPos": {**pos, "y": pos["y"] - shift}}
            top.append(collapsed)
        elif collapsed is not None:
            collapsed["panels"].append({**panel, "gridPos": {**pos, "y": pos["y"] - shift}})
        else:
            top.append(panel)
    return top


def _content_height(row: Panel) -> int:
    """Grid units the panels of ``row`` take below it when it is open."""
    return max((p["gridPos"]["y"] + p["gridPos"]["h"] for p in row["panels"]), default=row["gridPos"]["y"] + 1) \
        - row["gridPos"]["y"] - 1


def datasource_variable() -> dict[str, Any]:
    return {
        "type": "datasource",
        "name": "datasource",
        "label": "Data source",
        "query": "prometheus",
        "current": {},
        "hide": 0,
        "includeAll": False,
        "multi": False,
        "options": [],
        "refresh": 1,
        "regex": "",
        "skipUrlSync": False,
    }


def query_variable(
    name: str,
    label: str,
    query: str,
    *,
    multi: bool = True,
    include_all: bool = True,
    all_value: str = ".*",
    description: str = "",
) -> dict[str, Any]:
    """A ``label_values(...)`` variable; with ``include_all`` "All" becomes ``all_value`` (a regex)."""
    variable: dict[str, Any] = {
        "type": "query",
        "name": name,
        "label": label,
        "description": description,
        "datasource": DATASOURCE,
        "query": {"query": query, "refId": f"{name}-variable"},
        "definition": query,
        "refresh": 2,
        "sort": 1,
        "multi": multi,
        "includeAll": include_all,
        "current": {},
        "options": [],
        "regex": "",
        "hide": 0,
        "skipUrlSync": False,
    }
    if include_all:
        variable["allValue"] = all_value
    return variable


def dashboard(
    uid: str,
    title: str,
    description: str,
    panels: Sequence[Panel],
    variables: Sequence[dict[str, Any]],
    *,
    tags: Sequence[str] = (),
    links: Sequence[dict[str, Any]] = (),
    regenerate: str,
) -> dict[str, Any]:
    """The dashboard document; its description names the command that regenerates it (no comments in JSON).
    The dropdown of sibling dashboards lists those that share every tag but the first (``tags`` names the
    dashboard's kind, then its bundle), so one bundle's dashboards link to each other only."""
    return {
        "description": f"{description} Generated by `{regenerate}`: edit exporter/dashboards/, not this file.",
        "uid": uid,
        "title": title,
        "tags": ["bottleneck-exporter", *tags],
        "editable": True,
        "graphTooltip": 1,
        "refresh": "30s",
        "schemaVersion": SCHEMA_VERSION,
        "time": {"from": "now-1h", "to": "now"},
        "timepicker": {},
        "timezone": "browser",
        "fiscalYearStartMonth": 0,
        "liveNow": False,
        "annotations": {"list": []},
        "links": [
            *links,
            {
                "type": "dashboards",
                "title": "bottleneck-exporter",
                "tags": ["bottleneck-exporter", *tags[1:]],
                "asDropdown": True,
                "includeVars": True,
                "keepTime": True,
            },
        ],
        "templating": {"list": [datasource_variable(), *variables]},
        "panels": layout(panels),
        "version": 1,
    }
