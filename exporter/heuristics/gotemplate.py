"""Renders the small part of Prometheus' alert-template language the catalogue's descriptions use.

Prometheus renders ``description`` with Go's text/template; ``diagnose`` and the generated promtool tests
need the same text from Python. Only these actions are allowed (anything else is a TemplateError, so a
description cannot use a construct that Python would render differently)::

    {{ $labels.rank }}                    a label value ("" when absent)
    {{ $value | humanize }}               87, 1.5k, 250m
    {{ $value | humanizePercentage }}     82%
    {{ $value | humanizeDuration }}       5m 30s
    {{ $value | humanize1024 }}           3.5Gi

The formatting follows Prometheus' template functions (template/template.go), including Go's ``%.4g``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

ACTION = re.compile(r"{{\s*(.*?)\s*}}")
LABEL = re.compile(r"\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)")
VALUE = re.compile(r"\$value\s*\|\s*(humanize|humanizePercentage|humanizeDuration|humanize1024)")


class TemplateError(ValueError):
    """A template action outside the supported subset."""


def _g4(value: float) -> str:
    """Go's ``fmt.Sprintf("%.4g", v)``: same as C's except for the spelling of infinities and NaN."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return f"{value:.4g}"


def _scale_down(value: float) -> tuple[float, str]:
    prefix = ""
    for candidate in ("m", "u", "n", "p", "f", "a", "z", "y"):
        if abs(value) >= 1:
            break
        prefix = candidate
        value *= 1000
    return value, prefix


def humanize(value: float) -> str:
    if value == 0 or math.isnan(value) or math.isinf(value):
        return _g4(value)
    if abs(value) >= 1:
        prefix = ""
        for candidate in ("k", "M", "G", "T", "P", "E", "Z", "Y"):
            if abs(value) < 1000:
                break
            prefix = candidate
            value /= 1000
        return f"{_g4(value)}{prefix}"
    value, prefix = _scale_down(value)
    return f"{_g4(value)}{prefix}"


def humanize1024(value: float) -> str:
    if abs(value) <= 1 or math.isnan(value) or math.isinf(value):
        return _g4(value)
    prefix = ""
    for candidate in ("ki", "Mi", "Gi", "Ti", "Pi", "Ei", "Zi", "Yi"):
        if abs(value) < 1024:
            break
        prefix = candidate
        value /= 1024
    return f"{_g4(value)}{prefix}"


def humanize_percentage(value: float) -> str:
    return f"{_g4(value * 100)}%"


def humanize_duration(value: float) -> str:
    if math.isnan(value) or math.isinf(value):
        return _g4(value)
    if value == 0:
        return f"{_g4(value)}s"
    if abs(value) >= 1:
        sign = "-" if value < 0 else ""
        value = abs(value)
        whole = int(value)
        seconds, minutes = whole % 60, (whole // 60) % 60
        hours, days = (whole // 3600) % 24, whole // 86400
        if days:
            return f"{sign}{days}d {hours}h {minutes}m {seconds}s"
        if hours:
            return f"{sign}{hours}h {minutes}m {seconds}s"
        if minutes:
            return f"{sign}{minutes}m {seconds}s"
        return f"{sign}{_g4(value)}s"
    value, prefix = _scale_down(value)
    return f"{_g4(value)}{prefix}s"


FORMATTERS = {
    "humanize": humanize,
    "humanizePercentage": humanize_percentage,
    "humanizeDuration": humanize_duration,
    "humanize1024": humanize1024,
}


def check(template: str) -> None:
    """Raise TemplateError when ``template`` uses an action this module cannot render."""
    for action in ACTION.findall(template):
        if not (LABEL.fullmatch(action) or VALUE.fullmatch(action)):
            raise TemplateError(f"unsupported template action {{{{ {action} }}}} in {template!r}")


def render(template: str, labels: Mapping[str, str], value: float) -> str:
    """Render ``template`` as Prometheus would for an alert with these labels and value."""

    def action(match: re.Match[str]) -> str:
        text = match.group(1)
        label = LABEL.fullmatch(text)
        if label:
            return labels.get(label.group(1), "")
        formatter = VALUE.fullmatch(text)
        if formatter:
            return FORMATTERS[formatter.group(1)](value)
        raise TemplateError(f"unsupported template action {{{{ {text} }}}} in {template!r}")

    return ACTION.sub(action, template)
