"""The YAML config file (``--config.file``): what flags express poorly, validated key by key.

    collectors:
      disk:
        enabled: true
        device-exclude: "^(ram|loop|fd|sr)\\d+$"
      gpu:
        enabled: false

Every error names the file, the key path and the problem: ``/etc/bottleneck-exporter/config.yml:
collectors.disk.device-exclude: not a valid regular expression``, and never prints what the file holds beyond
a key that looks like a setting name: the file may not be a config at all (``--config.file=/etc/shadow``).
Flags given on the command line win over the file.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from exporter.collectors.base import Registration, parse_bool


class ConfigError(ValueError):
    """A config value or flag is invalid; the message names the key and the problem."""


def load_yaml(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
    except OSError as err:
        raise ConfigError(f"{path}: cannot read config file: {err.strerror}") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML{_position(err)}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping, got {type(data).__name__}")
    return data


_SETTING_NAME = re.compile(r"[A-Za-z0-9_.@+-]{1,64}")
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")


def shown_key(key: object) -> str:
    """A key as an error message prints it: only when it looks like a setting (or user) name."""
    text = str(key)
    return text if _SETTING_NAME.fullmatch(text) else "<a key that is not a setting name>"


def without_value(err: ValueError, value: object) -> str:
    """A parser's message with the value it quotes cut out: a value read from a file is never printed."""
    message = str(err)
    for quoted in {repr(value), repr(str(value))}:
        message = message.replace(f", got {quoted}", "").replace(f": {quoted}", "").replace(quoted, "the value")
    return message


def _position(err: yaml.YAMLError) -> str:
    """Where parsing failed and why, without the snippet of the file PyYAML quotes."""
    mark = getattr(err, "problem_mark", None)
    problem = _QUOTED.sub("...", str(getattr(err, "problem", "") or ""))
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"{where}: {problem}" if problem else where


# Top-level sections and who owns them. Sections other than "collectors" are validated by their owners.
KNOWN_SECTIONS = ("collectors", "push")


def collector_settings(
    data: dict[str, Any], registry: dict[str, Registration], path: str | None = None
) -> tuple[dict[str, bool], dict[str, dict[str, Any]]]:
    """Validate ``collectors:`` and return ({name: enabled}, {name: {option: parsed value}}); errors name
    ``path``, the file ``data`` was read from."""
    file = f"{path}: " if path else ""
    for key in data:
        if key not in KNOWN_SECTIONS:
            raise ConfigError(f"{file}{shown_key(key)}: unknown top-level key (known: {', '.join(KNOWN_SECTIONS)})")
    section = data.get("collectors") or {}
    if not isinstance(section, dict):
        raise ConfigError(f"{file}collectors: must be a mapping of collector name to settings")
    enabled: dict[str, bool] = {}
    options: dict[str, dict[str, Any]] = {}
    for name, settings in section.items():
        if name not in registry:
            raise ConfigError(f"{file}collectors.{shown_key(name)}: unknown collector "
                              f"(known: {', '.join(sorted(registry))})")
        if settings is None:
            settings = {}
        if not isinstance(settings, dict):
            raise ConfigError(f"{file}collectors.{name}: must be a mapping")
        known = {opt.name: opt for opt in registry[name].options}
        for key, value in settings.items():
            where = f"{file}collectors.{name}.{shown_key(key)}"
            try:
                if key == "enabled":
                    enabled[name] = parse_bool(value)
                elif key in known:
                    options.setdefault(name, {})[key] = known[key].parse(value)
                else:
                    listed = ", ".join(["enabled", *sorted(known)])
                    raise ConfigError(f"{where}: unknown option (known: {listed})")
            except ValueError as err:
                if isinstance(err, ConfigError):
                    raise
                raise ConfigError(f"{where}: {without_value(err, value)}") from None
    return enabled, options
