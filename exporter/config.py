"""Options: the YAML config file (``--config.file``), the flags, and the one precedence between them.

    collectors:
      disk:
        enabled: true
        device-exclude: "^(ram|loop|fd|sr)\\d+$"
      gpu:
        enabled: false

Every error names the file, the key path and the problem: ``config.yml: collectors.disk.device-exclude: not a
valid regular expression``, or the flag: ``--push.max-jobs: expected a positive whole number``; it never prints
what the file holds beyond a key that looks like a setting name: the file may not be a config at all
(``--config.file=/etc/shadow``). Every registered
option (a collector's, the push receiver's) is resolved by ``option_values``: its registered default < the
config file < its flag. ``Parser`` is the command line both ``bottleneck-exporter`` and ``diagnose`` use: no
abbreviated flags, a close-match suggestion for a misspelled one, defaults shown as a user would type them.
"""

from __future__ import annotations

import argparse
import difflib
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NoReturn

import yaml

from bottleneck_exporter.collectors.base import Registration
from bottleneck_exporter.options import Option, parse_bool


class ConfigError(ValueError):
    """A config value or flag is invalid; the message names the key and the problem."""


# The config, the web config and a GPU profile are a few KB each: a file past this is not one of them, and
# reading it whole (a log, a disk image given by mistake) would take the exporter's memory and start-up time.
MAX_FILE_BYTES = 1 << 20


def read_yaml(path: str, what: str = "config file") -> Any:
    """The YAML document in the file ``path`` (``what`` names it in errors). Raises ConfigError naming the file
    and the problem, never the file's contents: it may be any file (``--config.file=/etc/shadow``)."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_FILE_BYTES + 1)
    except OSError as err:
        raise ConfigError(f"{path}: cannot read {what}: {err.strerror}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise ConfigError(f"{path}: larger than {MAX_FILE_BYTES >> 20} MiB, which no {what} is")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not UTF-8 text (byte {err.start + 1}), which a {what} must be") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML{_position(err)}") from None
    except RecursionError:  # PyYAML composes nested collections recursively
        raise ConfigError(f"{path}: collections nested too deeply to be a {what}") from None


def load_yaml(path: str, what: str = "config file") -> dict[str, Any]:
    """A config file's top-level mapping ({} for an empty file); ConfigError as ``read_yaml`` raises it."""
    data = read_yaml(path, what)
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
KNOWN_SECTIONS = ("collectors", "push", "status")


def collector_settings(
    data: dict[str, Any], registry: dict[str, Registration], source: str = ""
) -> tuple[dict[str, bool], dict[str, dict[str, Any]]]:
    """Validate ``collectors:`` and return ({name: enabled}, {name: {option: value as written}}); the values
    are parsed by ``option_values``. ``source`` (the file's path) prefixes every error."""
    at = f"{source}: " if source else ""
    for key in data:
        if key not in KNOWN_SECTIONS:
            raise ConfigError(f"{at}{shown_key(key)}: unknown top-level key (known: {', '.join(KNOWN_SECTIONS)})"
                              f"{did_you_mean(str(key), KNOWN_SECTIONS)}")
    section = data.get("collectors") or {}
    if not isinstance(section, dict):
        raise ConfigError(f"{at}collectors: must be a mapping of collector name to settings")
    check_keys(section, registry, f"{at}collectors", "collector")
    enabled: dict[str, bool] = {}
    options: dict[str, dict[str, Any]] = {}
    for name, settings in section.items():
        if settings is None:
            settings = {}
        if not isinstance(settings, dict):
            raise ConfigError(f"{at}collectors.{name}: must be a mapping")
        check_keys(settings, ["enabled", *(opt.name for opt in registry[name].options)], f"{at}collectors.{name}",
                   "option")
        if "enabled" in settings:
            try:
                enabled[name] = parse_bool(settings["enabled"])
            except ValueError as err:
                raise ConfigError(f"{at}collectors.{name}.enabled: {without_value(err, settings['enabled'])}") from None
        options[name] = {key: value for key, value in settings.items() if key != "enabled"}
    return enabled, options


# ---------------------------------------------------------------------------------------------- options


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """``"; did you mean 'gpu'?"`` for the closest of ``choices``, or "" when none is close."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def as_typed(value: Any) -> str | None:
    """A default as a user would type it (``true``, ``10m``, ``0660``); None when there is nothing to show."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def option_dest(dest_prefix: str, option: Option) -> str:
    return f"{dest_prefix}_{option.name.replace('-', '_')}"


def add_option_flags(group: argparse._ActionsContainer, options: Sequence[Option], flag_prefix: str,
                     dest_prefix: str) -> None:
    """``--<flag_prefix>.<option>`` for each option. Defaults stay None here, so that the resolution can tell
    "given on the command line" from "not given" (the config file wins over a default, a flag over both)."""
    for option in options:
        flag, dest = f"--{flag_prefix}.{option.name}", option_dest(dest_prefix, option)
        shown = None if option.switch else as_typed(option.default)
        text = option.help + (f" (default: {shown})" if shown else "")
        text = text.replace("%", "%%")  # argparse %-formats help strings
        if option.switch:
            group.add_argument(flag, dest=dest, action="store_true", default=None, help=text)
        else:
            group.add_argument(flag, dest=dest, default=None, metavar="VALUE", help=text)


def check_keys(section: Mapping[str, Any], known: Iterable[str], where: str, what: str = "setting") -> None:
    """Refuse a key of ``section`` that is not in ``known``, naming it and the closest known key."""
    known = list(known)
    for key in section:
        if key not in known:
            raise ConfigError(f"{where}.{shown_key(key)}: unknown {what} (known: {', '.join(sorted(known))})"
                              f"{did_you_mean(str(key), known)}")


def section_values(file_config: Mapping[str, Any], name: str, options: Sequence[Option], args: argparse.Namespace,
                   source: str = "") -> tuple[dict[str, Any], set[str]]:
    """``option_values`` for a part whose options are ``--<name>.<option>`` on the command line and the
    mapping ``<name>:`` in the config file (``source``); a section that is not a mapping, or holds an unknown
    key, raises ConfigError naming it."""
    where = f"{source}: {name}" if source else name
    section = file_config.get(name) or {}
    if not isinstance(section, dict):
        raise ConfigError(f"{where}: must be a mapping of setting to value")
    check_keys(section, (option.name for option in options), where)
    return option_values(options, section, where, args, name, name)


def option_values(options: Sequence[Option], section: Mapping[str, Any], where: str, args: argparse.Namespace,
                  flag_prefix: str, dest_prefix: str) -> tuple[dict[str, Any], set[str]]:
    """Each option's parsed value, by one precedence: registered default < ``section`` (the config file's
    ``where``) < ``--<flag_prefix>.<option>``. Returns (values, names given in the file or by a flag); raises
    ConfigError naming the flag, or the file and key."""
    values: dict[str, Any] = {}
    given: set[str] = set()
    for option in options:
        raw, origin = option.default, f"--{flag_prefix}.{option.name} (its default)"
        if option.name in section:
            raw, origin = section[option.name], f"{where}.{option.name}"
            given.add(option.name)
        flag = getattr(args, option_dest(dest_prefix, option), None)
        if flag is not None:
            raw, origin = flag, f"--{flag_prefix}.{option.name}"
            given.add(option.name)
        if raw is None or (option.name not in given and not isinstance(raw, str)):
            values[option.name] = raw  # a typed default needs no parsing; None means "off"
            continue
        try:
            values[option.name] = option.parse(raw)
        except ValueError as err:
            # A flag's value is the operator's own; a file's is never printed (the file may hold secrets).
            message = str(err) if flag is not None else without_value(err, raw)
            raise ConfigError(f"{origin}: {message}") from None
    return values, given


# ---------------------------------------------------------------------------------------------- command line


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions and epilogs keep their line breaks (examples stay examples); flags get a wider column."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=40, width=110)


class Parser(argparse.ArgumentParser):
    """No abbreviated flags (``--web.listen`` is not ``--web.listen-address``: a later flag could make it
    ambiguous), and an error names the flag with the closest known one instead of printing the whole usage."""

    def __init__(self, *args: Any, suggest: Sequence[str] = (), **kwargs: Any) -> None:
        """``suggest``: flags of a companion parser a misspelling may also be close to."""
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)
        self.suggest = list(suggest)

    def flags(self) -> list[str]:
        return [flag for action in self._actions for flag in action.option_strings]

    def error(self, message: str) -> NoReturn:
        lines = [f"{self.prog}: error: {message}"]
        unknown = re.match(r"unrecognized arguments: (.*)", message)
        for word in unknown.group(1).split() if unknown else ():
            name = word.split("=", 1)[0]
            if name.startswith("-"):
                close = difflib.get_close_matches(name, self.flags() + self.suggest, n=1, cutoff=0.6)
                lines.append(f"  {name}: unknown flag" + (f"; did you mean {close[0]}?" if close else ""))
        choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if choice:
            choices = re.findall(r"'([^']*)'", choice.group(2))
            hint = did_you_mean(choice.group(1), choices)
            if hint:
                lines.append(f"  {hint[2:]}")
        lines.append(f"Run '{self.prog} --help' to list every flag.")
        self.exit(2, "\n".join(lines) + "\n")
