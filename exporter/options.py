"""Options: what a registered setting is (``Option``), and the parsers of the values flags and config keys take.

A collector registers its options with ``@register`` (``bottleneck_exporter.collectors.base``), the push
receiver its own (``bottleneck_exporter.push.settings.OPTIONS``); ``bottleneck_exporter.config`` turns them into
``--<prefix>.<option>`` flags and ``<section>.<option>`` YAML keys and resolves each value through its
``parse``. Every parser here takes what a user types (or what YAML makes of it) and returns the value, or
raises ValueError saying what it expected; the caller puts the flag's, or the file's and key's, name in front::

    --push.max-jobs: expected a positive whole number, got '0'
    /etc/bottleneck-exporter/config.yml: collectors.disk.device-exclude: not a valid regular expression

Every flag and config key that takes a duration takes one syntax, ``parse_duration``'s: Prometheus' (``1h30m``,
``10m``, ``90s``, ``500ms``), as node_exporter's flags take it. Standard library only.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
from collections.abc import Callable
from typing import Any


@dataclasses.dataclass(frozen=True)
class Option:
    """One ``--<prefix>.<option>`` setting (``--collector.<name>.<option>``, ``--push.<option>``), also accepted
    under the matching YAML mapping (``collectors.<name>``, ``push``)."""

    name: str
    default: Any
    help: str
    # Parses a command-line / YAML value; raises ValueError with a readable message. A default given as a
    # string goes through it too, so that it can be written (and shown in --help) as a user would type it.
    parse: Callable[[Any], Any] = str
    # A flag without a value (``--push.disable``) rather than ``--<prefix>.<name>=VALUE``; YAML takes true/false.
    switch: bool = False


def parse_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected true or false, got {value!r}")


def parse_positive_int(value: Any) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"expected a whole number, got {value!r}") from None
    if number <= 0 or isinstance(value, bool):
        raise ValueError(f"expected a positive whole number, got {value!r}")
    return number


def parse_ratio(value: Any) -> float:
    """A share from 0 to 1, such as 0.05."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"expected a number from 0 to 1, got {value!r}") from None
    if isinstance(value, bool) or not 0 <= number <= 1:
        raise ValueError(f"expected a number from 0 to 1, got {value!r}")
    return number


def parse_regex(value: Any) -> str:
    try:
        re.compile(str(value))
    except re.error as err:
        raise ValueError(f"not a valid regular expression ({err}): {value!r}") from None
    return str(value)


def parse_mode(value: Any) -> int:
    """Permission bits written in octal (``0660``); YAML reads an unquoted 0660 as an octal integer already."""
    if isinstance(value, int) and not isinstance(value, bool):
        mode = value
    else:
        try:
            mode = int(str(value), 8)
        except ValueError:
            raise ValueError(f"expected octal permission bits like 0660, got {value!r}") from None
    if not 0 <= mode <= 0o777:
        raise ValueError(f"expected octal permission bits like 0660, got {value!r}")
    return mode


# Prometheus' duration units, largest first: a duration names each at most once, in this order.
_UNITS = (("y", 365 * 86400), ("w", 7 * 86400), ("d", 86400), ("h", 3600), ("m", 60), ("s", 1), ("ms", 0.001))
_NUMBER = r"\d+(?:\.\d+)?"
_DURATION = re.compile("".join(f"(?:({_NUMBER}){unit})?" for unit, _ in _UNITS))
_SECONDS = re.compile(_NUMBER)


def parse_duration(value: Any) -> float:
    """Seconds, from a duration in Prometheus' syntax: numbers with units ``y w d h m s ms``, largest first,
    each at most once (``1h30m``, ``10m``, ``90s``, ``500ms``; a year is 365 days). Also, as node_exporter's
    flags take them, a number with a fraction (``1.5h``, ``0.5s``); and a number without a unit is seconds
    (``30``, and what YAML makes of ``timeout: 2``), as these flags and keys took before."""
    if isinstance(value, bool):
        raise ValueError(f"expected a duration like 1h30m, 10m, 90s or 500ms, got {value!r}")
    if isinstance(value, (int, float)):
        seconds = float(value)
    else:
        text = str(value).strip()
        match = _DURATION.fullmatch(text)
        if _SECONDS.fullmatch(text):
            seconds = float(text)
        elif text and match is not None:
            seconds = sum(float(number) * factor
                          for number, (_, factor) in zip(match.groups(), _UNITS, strict=True) if number is not None)
        else:
            raise ValueError(f"expected a duration like 1h30m, 10m, 90s or 500ms, got {value!r}")
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"expected a duration like 1h30m, 10m, 90s or 500ms, got {value!r}")
    return seconds


def format_duration(seconds: float) -> str:
    """``seconds`` as ``parse_duration`` reads it back, to the millisecond: 5400 -> ``1h30m``, 0.5 -> ``500ms``."""
    left = round(seconds * 1000)
    parts = []
    for unit, factor in _UNITS:
        count, left = divmod(left, round(factor * 1000))
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts) or "0s"


def positive_duration(maximum: float | None = None) -> Callable[[Any], float]:
    """A parser of durations longer than zero, and at most ``maximum`` seconds when given."""

    def parse(value: Any) -> float:
        seconds = parse_duration(value)
        if seconds <= 0:
            raise ValueError(f"expected a duration longer than zero, got {value!r}")
        if maximum is not None and seconds > maximum:
            raise ValueError(f"expected a duration of at most {format_duration(maximum)}, got {value!r}")
        return seconds

    return parse


def argument_type(parse: Callable[[Any], Any]) -> Callable[[str], Any]:
    """``parse`` as an argparse ``type=`` for a flag argparse itself defines: argparse then puts the flag's
    name in front of the parser's message, instead of its own "invalid value"."""

    def convert(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    return convert
