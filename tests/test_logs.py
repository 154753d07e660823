"""Log lines as Prometheus' own logger writes them: keys time, level, source, msg, then fields; logfmt values
quoted as Go's slog quotes them; JSON with the same keys; and the startup line saying what was found."""

from __future__ import annotations

import io
import json
import logging
import re
from pathlib import Path

import pytest

from bottleneck_exporter.collectors import REGISTRY
from bottleneck_exporter.status import logs
from tests.conftest import ROOT

PROFILES = ROOT / "tests" / "fixtures" / "gpu-profiles"
PAIR = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|[^ ]*)')


def parse_logfmt(line: str) -> dict[str, str]:
    """A logfmt line back into keys and values; every character of the line must belong to a pair."""
    pairs = PAIR.findall(line)
    assert " ".join(f"{k}={v}" for k, v in pairs) == line, f"does not split back cleanly: {line}"
    return {k: json.loads(v) if v.startswith('"') else v for k, v in pairs}


@pytest.mark.parametrize(("value", "written"), [
    ("plain", "plain"),
    ("", '""'),
    ("two words", '"two words"'),
    ("a=b", '"a=b"'),
    ('say "hi"', '"say \\"hi\\""'),
    ("two\nlines", '"two\\nlines"'),
    ("tab\there", '"tab\\there"'),
    ("C:\\dir", "C:\\dir"),  # slog leaves a lone backslash unquoted
    ("C:\\my dir", '"C:\\\\my dir"'),
    ("unix:///run/push.sock", "unix:///run/push.sock"),
    ("héllo", "héllo"),
    ("\x00", '"\\x00"'),
])
def test_logfmt_quotes_a_value_only_when_slog_would(value: str, written: str) -> None:
    assert logs.quote(value) == written


def _line(fmt: str, emit) -> str:
    stream = io.StringIO()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    logs.configure("debug", fmt, stream)
    try:
        emit(logging.getLogger("exporter.test"))
    finally:
        root.handlers[:], root.level = handlers, level
    return stream.getvalue().strip()


def test_a_logfmt_line_has_prometheus_keys_and_fields_as_fields() -> None:
    line = _line("logfmt", lambda log: log.warning("socket not usable", extra={
        "path": "/run/bottleneck exporter/push.sock", "reason": 'said "no"', "tries": 3, "empty": ""}))
    fields = parse_logfmt(line)
    assert list(fields) == ["time", "level", "source", "msg", "path", "reason", "tries", "empty"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", fields["time"])
    assert fields["level"] == "WARN" and re.fullmatch(r"test_logs\.py:\d+", fields["source"])
    assert (fields["msg"], fields["path"], fields["reason"], fields["tries"], fields["empty"]) == (
        "socket not usable", "/run/bottleneck exporter/push.sock", 'said "no"', "3", "")


def test_a_json_line_has_the_same_keys_with_numbers_kept() -> None:
    line = _line("json", lambda log: log.info("exporter ready", extra={"gpus": 2, "collectors": ["cpu", "gpu"]}))
    fields = json.loads(line)
    assert list(fields) == ["time", "level", "source", "msg", "gpus", "collectors"]
    assert (fields["level"], fields["msg"], fields["gpus"], fields["collectors"]) == (
        "INFO", "exporter ready", 2, "cpu,gpu")


def test_an_exception_is_one_quoted_err_field() -> None:
    def emit(log: logging.Logger) -> None:
        try:
            raise ValueError("bad value")
        except ValueError:
            log.exception("collector cpu failed")

    fields = parse_logfmt(_line("logfmt", emit))
    assert fields["level"] == "ERROR" and "ValueError: bad value" in fields["err"]


@pytest.mark.live
@pytest.mark.parametrize(("profile", "args", "found"), [
    ("hopper-4x-h100.yaml", [], {"nvml": "ok", "gpus": "4"}),
    ("no-nvml.yaml", ["--push.disable"], {"nvml": "unavailable", "gpus": "0", "push_socket": "none"}),
])
def test_the_startup_line_says_what_was_found(start_exporter, tmp_path: Path, profile: str, args: list[str],
                                               found: dict[str, str]) -> None:
    sock = tmp_path / "push.sock"
    exporter = start_exporter([f"--collector.gpu.profile={PROFILES / profile}", f"--push.socket={sock}", *args])
    ready = [parse_logfmt(line) for line in exporter.stop().splitlines() if 'msg="exporter ready"' in line]
    assert len(ready) == 1, exporter.output()
    expected = {"push_socket": str(sock), **found}
    assert {key: ready[0].get(key) for key in expected} == expected
    assert ready[0]["collectors"].split(",") == sorted(name for name, reg in REGISTRY.items() if reg.default_enabled)
