"""Options: what a registered setting is (``Option``), and the parsers of the values flags and config keys take.

A collector registers its options with ``@register`` (``bottleneck_exporter.collectors.base``), the push
receiver its own (``bottleneck_exporter.push.settings.OPTIONS``); ``bottleneck_exporter.config`` turns them into
``--<prefix>.<option>`` flags and ``<section>.<option>`` YAML keys and resolves each value through its
``parse``. Every parser here takes what a user types (or what YAML makes of it) and returns the value, or
raises ValueError saying what it expected; the caller puts the flag's, or the file's and key's, name in front::

    --push.max-jobs: expected a positive whole number, got '0'
    /etc/bottleneck-exporter/config.yml: collectors.disk.device-exclude: not a valid regular expression

Standard library only.
"""

from __future__ import annotations

import dataclasses
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
