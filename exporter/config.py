"""The YAML config file (``--config.file``): what flags express poorly, validated key by key.

    collectors:
      disk:
        enabled: true
        device-exclude: "^(ram|loop|fd|sr)\\d+$"
      gpu:
        enabled: false

Every error names the key path and the problem: ``collectors.disk.device-exclude: not a valid regular
expression``. Flags given on the command line win over the file.
"""

from __future__ import annotations

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
        raise ConfigError(f"{path}: not valid YAML: {err}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping, got {type(data).__name__}")
    return data


# Top-level sections and who owns them. Sections other than "collectors" are validated by their owners.
KNOWN_SECTIONS = ("collectors", "push")


def collector_settings(
    data: dict[str, Any], registry: dict[str, Registration]
) -> tuple[dict[str, bool], dict[str, dict[str, Any]]]:
    """Validate ``collectors:`` and return ({name: enabled}, {name: {option: parsed value}})."""
    for key in data:
        if key not in KNOWN_SECTIONS:
            raise ConfigError(f"{key}: unknown top-level key (known: {', '.join(KNOWN_SECTIONS)})")
    section = data.get("collectors") or {}
    if not isinstance(section, dict):
        raise ConfigError("collectors: must be a mapping of collector name to settings")
    enabled: dict[str, bool] = {}
    options: dict[str, dict[str, Any]] = {}
    for name, settings in section.items():
        if name not in registry:
            raise ConfigError(f"collectors.{name}: unknown collector (known: {', '.join(sorted(registry))})")
        if settings is None:
            settings = {}
        if not isinstance(settings, dict):
            raise ConfigError(f"collectors.{name}: must be a mapping")
        known = {opt.name: opt for opt in registry[name].options}
        for key, value in settings.items():
            where = f"collectors.{name}.{key}"
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
                raise ConfigError(f"{where}: {err}") from None
    return enabled, options
