"""The status page as served: one render of the latest collection, shared by every request until it is stale.

Reads the recorder (``bottleneck_exporter.status.recorder``) and a function that builds the page's data
(``Status.data``); exposes ``Renders.page(form)``: the body of ``/`` (``"html"``) or ``/status.json``
(``"json"``), its content type and an ETag naming the render, e.g. ``W/"17-1764601932.944"`` (render 17, of
the collection taken at that Unix time).

A render is fresh while the collection it shows is younger than ``FRESH_SECONDS``. The first request after
that takes a new collection unless a younger one exists (a scrape's), and renders it; requests meanwhile wait
for that render and share it. So a job that pushed a second ago is on the page, and however many clients
ask, pages cost at most one collection per ``FRESH_SECONDS`` and one render per collection, each form made
once, on its first request. A collection that hangs holds the request that took it (as it would a scrape);
the others wait for it a few seconds at most (``COLLECTION_WAIT_SECONDS``), then get the last render, which
says how old it is.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple, TypeGuard

from bottleneck_exporter.status.page import render as render_html
from bottleneck_exporter.status.recorder import Recorder

FRESH_SECONDS = 2.0
COLLECTION_WAIT_SECONDS = 2.0
FORMS: dict[str, tuple[Callable[[dict[str, Any]], bytes], str]] = {
    "html": (render_html, "text/html; charset=utf-8"),
    "json": (lambda data: json.dumps(data, indent=2).encode() + b"\n", "application/json"),
}


class Page(NamedTuple):
    body: bytes
    content_type: str
    etag: str


class Render:
    """The page's data as of one collection, and each form of it once made."""

    def __init__(self, number: int, at: float | None, data: dict[str, Any]) -> None:
        self.at = at  # Unix time of the collection shown; None before the first
        self.etag = f'W/"{number}-{at or 0:.3f}"'  # weak: the same render plain or gzipped is the same page
        self._data = data
        self._bodies: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def page(self, form: str) -> Page:
        render, content_type = FORMS[form]
        with self._lock:
            body = self._bodies.get(form)
            if body is None:
                body = self._bodies[form] = render(self._data)
        return Page(body, content_type, self.etag)


class Renders:
    """The current render of the page, made anew by the first request that finds it stale."""

    def __init__(self, recorder: Recorder, build: Callable[[], dict[str, Any]], fresh: float = FRESH_SECONDS,
                 wait: float = COLLECTION_WAIT_SECONDS, clock: Callable[[], float] = time.time) -> None:
        self.recorder = recorder
        self.build = build
        self.fresh = fresh
        self.wait = wait
        self.count = 0  # renders so far
        self._clock = clock
        self._numbers = itertools.count(1)
        self._current: Render | None = None
        self._lock = threading.Lock()  # held by the one request that collects and renders

    def page(self, form: str) -> Page:
        return self.current().page(form)

    def current(self) -> Render:
        render = self._current
        if self._is_fresh(render):
            return render
        # Long enough for the one ahead to wait out a collection in flight and render what there is.
        if not self._lock.acquire(timeout=2 * self.wait + 1):
            return render if render is not None else self._render()
        try:
            render = self._current
            if self._is_fresh(render):
                return render
            self.recorder.refresh(self.fresh, self.wait)
            render = self._current = self._render()
            return render
        finally:
            self._lock.release()

    def _is_fresh(self, render: Render | None) -> TypeGuard[Render]:
        return render is not None and render.at is not None and self._clock() - render.at < self.fresh

    def _render(self) -> Render:
        data = self.build()
        self.count += 1
        return Render(next(self._numbers), data["collection"]["at"], data)
