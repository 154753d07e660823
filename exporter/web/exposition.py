"""The body of a scrape: the Prometheus text format 0.0.4 and OpenMetrics 1.0.0, written byte for byte as
prometheus_client writes them, at a fraction of its cost.

prometheus_client (0.26) checks and escapes every metric and label name of every sample on every scrape: on a
host scrape that was more than half the exporter's CPU. Our names are fixed in code, so this writer checks each
name once and remembers it, and escapes a label value only when it holds a character that needs it. A family it
does not write itself (a name outside the legacy character set, a timestamp, an exemplar, a native histogram,
OpenMetrics-only samples such as ``_created``) is written by prometheus_client's own writer, so the output never
differs from the library's (tests/test_exposition.py compares them on every family we export).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, choose_encoder, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics import exposition as openmetrics_exposition
from prometheus_client.registry import Collector

_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
# Names already seen to need no escaping, and each family's header lines. Bounded: names and help texts come from
# code, but a collector bug must not make them grow with every scrape.
_CACHE_LIMIT = 65536
_PLAIN_METRICS: set[str] = set()
_PLAIN_LABELS: set[str] = set()
_TEXT_HEADERS: dict[tuple[str, str, str], tuple[str, tuple[str, ...]]] = {}
_OPENMETRICS_HEADERS: dict[tuple[str, str, str, str], str] = {}
# The text format's type word for each OpenMetrics type, and the suffix its header name gains.
_TEXT_TYPES = {"counter": ("counter", "_total"), "gauge": ("gauge", ""), "histogram": ("histogram", ""),
               "summary": ("summary", ""), "info": ("gauge", "_info"), "stateset": ("gauge", ""),
               "unknown": ("untyped", "")}
_EOF = "# EOF\n"


class _Unwritten(Exception):
    """A family this writer leaves to prometheus_client's."""


def _remember(cache: dict[Any, Any], key: Any, value: Any) -> Any:
    if len(cache) >= _CACHE_LIMIT:
        cache.clear()
    cache[key] = value
    return value


def _plain(name: str, pattern: re.Pattern[str], seen: set[str]) -> bool:
    if name in seen:
        return True
    if not pattern.match(name):
        return False
    if len(seen) >= _CACHE_LIMIT:
        seen.clear()
    seen.add(name)
    return True


def go_float(value: float) -> str:
    """A sample value as the Go client writes it (and prometheus_client after it): ``+Inf``, ``NaN``, and an
    exponent once a positive number has more than six digits before its point."""
    text = repr(float(value))
    if len(text) < 8 and "n" not in text:  # most values: no special, at most six digits before the point
        return text
    if text in ("inf", "-inf", "nan"):
        return {"inf": "+Inf", "-inf": "-Inf", "nan": "NaN"}[text]
    dot = text.find(".")
    if dot > 6 and text[0] != "-":
        mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1:]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return text


def _escape(value: str) -> str:
    if "\\" in value or "\n" in value or '"' in value:
        return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return value


def _samples(metric: Metric, out: list[str], moved: tuple[str, ...] = ()) -> None:
    """Appends the family's sample lines, the same in both formats for the samples this writer takes; a sample
    named in ``moved`` is one the format writes elsewhere, and leaves the family to the library."""
    for sample in metric.samples:
        name, labels, value = sample.name, sample.labels, sample.value
        if (sample.timestamp is not None or sample.exemplar is not None or sample.native_histogram is not None
                or name in moved or not _plain(name, _METRIC_NAME, _PLAIN_METRICS)):
            raise _Unwritten
        if labels:
            pairs = []
            for key, text in sorted(labels.items()):
                if not _plain(key, _LABEL_NAME, _PLAIN_LABELS):
                    raise _Unwritten
                pairs.append(f'{key}="{_escape(text)}"')
            out.append(f"{name}{{{','.join(pairs)}}} {go_float(value)}\n")
        else:
            out.append(f"{name} {go_float(value)}\n")


def _text_family(metric: Metric, out: list[str]) -> None:
    key = (metric.name, metric.type, metric.documentation)
    known = _TEXT_HEADERS.get(key)
    if known is None:
        kind = _TEXT_TYPES.get(metric.type)
        if kind is None or not _plain(metric.name, _METRIC_NAME, _PLAIN_METRICS):
            raise _Unwritten
        name = metric.name + kind[1]
        documentation = metric.documentation.replace("\\", r"\\").replace("\n", r"\n")
        # The text format writes these OpenMetrics samples in families of their own after this one: a family
        # with one of them is left to the library.
        moved = tuple(metric.name + suffix for suffix in ("_created", "_gsum", "_gcount"))
        known = _remember(_TEXT_HEADERS, key, (f"# HELP {name} {documentation}\n# TYPE {name} {kind[0]}\n", moved))
    out.append(known[0])
    _samples(metric, out, known[1])


def _openmetrics_family(metric: Metric, out: list[str]) -> None:
    key = (metric.name, metric.type, metric.documentation, metric.unit)
    header = _OPENMETRICS_HEADERS.get(key)
    if header is None:
        if not _plain(metric.name, _METRIC_NAME, _PLAIN_METRICS):
            raise _Unwritten
        unit = f"# UNIT {metric.name} {metric.unit}\n" if metric.unit else ""
        help_line = f"# HELP {metric.name} {_escape(metric.documentation)}\n"
        header = _remember(_OPENMETRICS_HEADERS, key, f"{help_line}# TYPE {metric.name} {metric.type}\n{unit}")
    out.append(header)
    _samples(metric, out)


class _One:
    def __init__(self, metric: Metric) -> None:
        self.metric = metric

    def collect(self) -> Iterator[Metric]:
        yield self.metric


def _write(families: Iterable[Metric], family: Callable[[Metric, list[str]], None],
           library: Callable[[Metric], str]) -> list[str]:
    out: list[str] = []
    for metric in families:
        mark = len(out)
        try:
            family(metric, out)
        except _Unwritten:
            del out[mark:]
            out.append(library(metric))
    return out


def text_format(registry: Collector) -> bytes:
    """The Prometheus text format 0.0.4 of everything ``registry`` collects now."""
    return "".join(_write(registry.collect(), _text_family,
                          lambda metric: generate_latest(_One(metric)).decode())).encode()


def openmetrics_format(registry: Collector) -> bytes:
    """OpenMetrics 1.0.0 (legacy names, as prometheus_client writes it unless a client asks for UTF-8 names)."""
    def library(metric: Metric) -> str:
        return openmetrics_exposition.generate_latest(_One(metric)).decode()[:-len(_EOF)]

    out = _write(registry.collect(), _openmetrics_family, library)
    out.append(_EOF)
    return "".join(out).encode()


def _takes_text(accept: str) -> bool:
    for media_range in accept.split(","):
        kind, *params = (part.strip() for part in media_range.split(";"))
        if kind in ("*/*", "text/*"):
            return True
        if kind == "text/plain":
            settings = dict(param.partition("=")[::2] for param in params)
            if settings.get("version", "0.0.4") == "0.0.4" and "escaping" not in settings:
                return True
    return not accept.strip()


def choose(accept: str) -> tuple[Callable[[Collector], bytes], str]:
    """The writer and content type for a request's ``Accept`` header.

    The text format whenever the client takes it, as node_exporter (client_golang without EnableOpenMetrics)
    answers: Prometheus asks for OpenMetrics first but takes the text format, and stores the same series from
    both, since we export no exemplars, units or created timestamps it would keep only from OpenMetrics.
    Otherwise prometheus_client's negotiation, with this module writing what it would write as OpenMetrics 1.0.0
    with legacy names."""
    if _takes_text(accept):
        return text_format, CONTENT_TYPE_PLAIN_0_0_4
    encoder, content_type = choose_encoder(accept)
    if (isinstance(encoder, functools.partial) and encoder.func is openmetrics_exposition.generate_latest
            and encoder.keywords == {"escaping": openmetrics_exposition.UNDERSCORES, "version": "1.0.0"}):
        return openmetrics_format, content_type
    return encoder, content_type
