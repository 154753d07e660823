"""One bounded HTTP read of a Prometheus exposition: our running exporter's, node_exporter's, dcgm-exporter's.

Every scrape the engine makes goes through ``scrape``: ``diagnose`` sampling an exporter and its peers, the
status page reading its peers. It bounds the whole read in time and size (``urlopen``'s timeout bounds each
socket operation only: an exporter trickling bytes would hold the reader for ever) and turns every way an
exporter can fail to answer into a ``ScrapeError``. The samples come back as scraped, labels untouched::

    [("node_cpu_seconds_total", {"cpu": "0", "mode": "idle"}, 1234.5), ...]
"""

from __future__ import annotations

import http.client
import time
import urllib.error
import urllib.request

Sample = tuple[str, dict[str, str], float]

MAX_BODY = 32 << 20  # bytes: node_exporter's scrape is ~0.1 MB, dcgm-exporter's a few; more is not one


class ScrapeError(Exception):
    """An exporter did not answer, or did not answer with a Prometheus exposition."""


class Unreachable(Exception):
    """Prometheus or our exporter did not answer: nothing can be judged without it."""


def read(url: str, timeout: float, max_bytes: int = MAX_BODY) -> bytes:
    """The body at ``url``, within ``timeout`` seconds in all and at most ``max_bytes`` bytes."""
    deadline = time.monotonic() + timeout
    chunks, size = [], 0
    with urllib.request.urlopen(url, timeout=timeout) as response:
        while chunk := response.read1(1 << 16):
            chunks.append(chunk)
            size += len(chunk)
            if size > max_bytes:
                raise ValueError(f"more than {max_bytes >> 20} MiB")
            if time.monotonic() > deadline:
                raise TimeoutError(f"body not read within {timeout:g}s")
    return b"".join(chunks)


def scrape(url: str, timeout: float) -> list[Sample]:
    """The samples ``url`` exposes; raises ScrapeError saying why not (the caller names the exporter)."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        text = read(url, timeout).decode("utf-8", errors="replace")
    except urllib.error.HTTPError as err:
        raise ScrapeError(f"HTTP {err.code} {err.reason}") from None
    except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as err:
        # A reply that is not HTTP at all raises an HTTPException, not an OSError.
        raise ScrapeError(str(getattr(err, "reason", err) or type(err).__name__)) from None
    try:
        return [(s.name, dict(s.labels), float(s.value))
                for family in text_string_to_metric_families(text) for s in family.samples]
    except (ValueError, TypeError, IndexError) as err:
        raise ScrapeError(f"not a Prometheus exposition ({err})") from None
