"""The exporter's log lines: logfmt or JSON on stderr, with the keys and quoting of Prometheus' own logger.

    time=2026-11-30T14:28:01.004Z level=INFO source=status/__init__.py:99 msg="exporter ready" nvml=ok gpus=2
    {"time": "2026-11-30T14:28:01.004Z", "level": "INFO", "source": "status/__init__.py:99", "gpus": 2, ...}

Fields are fields, not text in the message: ``log.info("push receiver listening", extra={"socket": path})``.
Every key of ``extra`` that is not a standard LogRecord attribute becomes a field, in the order given. A logfmt
value is quoted as Go's log/slog TextHandler quotes it (Prometheus 3's promslog): when it is empty or holds a
space, ``=``, ``"`` or a character that is not printable, with ``\\``, ``"`` and control characters escaped,
so a line always splits back into the same keys and values.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import Any, TextIO

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING, "error": logging.ERROR}
FORMATS = ("logfmt", "json")

# Attributes every LogRecord has; anything else on a record came from ``extra`` and is a field.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "taskName"}
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# slog's level names, as Prometheus 3 writes them (time=... level=INFO source=main.go:642 msg=...).
_LEVEL_NAMES = {logging.DEBUG: "DEBUG", logging.INFO: "INFO", logging.WARNING: "WARN", logging.ERROR: "ERROR"}
_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def quote(value: str) -> str:
    """A logfmt value, quoted only when it must be (slog's needsQuoting)."""
    if value and not any(ch in ' ="' or not ch.isprintable() for ch in value):
        return value  # a backslash alone needs no quotes (slog leaves C:\dir as it is)
    out = []
    for ch in value:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif not ch.isprintable():
            out.append(f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def fields_of(record: logging.LogRecord) -> dict[str, Any]:
    """time, level, source, msg, then the record's extra fields, then err for an exception."""
    fields: dict[str, Any] = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
        "level": _LEVEL_NAMES.get(record.levelno, "ERROR" if record.levelno > logging.ERROR else "DEBUG"),
        "source": f"{_source_file(record.pathname)}:{record.lineno}",
        "msg": record.getMessage(),
    }
    for key, value in vars(record).items():
        if key not in _STANDARD and not key.startswith("_"):
            fields[key] = value
    if record.exc_info:
        fields["err"] = logging.Formatter().formatException(record.exc_info)
    return fields


def _source_file(pathname: str) -> str:
    """``push/receiver.py`` for a module of this package (two modules may share a file name), else the name."""
    path = os.path.abspath(pathname)
    if path.startswith(_PACKAGE + os.sep):
        return os.path.relpath(path, _PACKAGE)
    return os.path.basename(path)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple, set, frozenset)):
        return ",".join(_text(v) for v in value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return "" if value is None else str(value)


class LogfmtFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return " ".join(f"{key}={quote(_text(value))}" for key, value in fields_of(record).items())


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields = {key: value if isinstance(value, (int, float, bool)) or value is None else _text(value)
                  for key, value in fields_of(record).items()}
        return json.dumps(fields, ensure_ascii=False)


def configure(level: str, fmt: str, stream: TextIO | None = None) -> None:
    """Send every log record at ``level`` and above to ``stream`` (stderr) in ``fmt`` (logfmt or json)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else LogfmtFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(LEVELS[level])
