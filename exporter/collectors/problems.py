"""A collector's log of the problems of the things it reads (a trainer's cgroup files, its CPU list): each
logged once when it starts, again only after the thing read well in between. A file that stays garbled would
otherwise write the same warning at every scrape; exposes nothing (the collectors count their errors)."""

from __future__ import annotations

import logging
from collections.abc import Hashable, Iterable
from typing import Any


class ProblemLog:
    def __init__(self, log: logging.Logger) -> None:
        self._log = log
        self._failing: set[Hashable] = set()

    def failed(self, key: Hashable, message: str, *args: Any) -> None:
        """``key`` could not be read: ``message`` is logged unless its problem is logged already."""
        if key not in self._failing:
            self._log.warning(message, *args)
            self._failing.add(key)

    def read(self, key: Hashable) -> None:
        """``key`` read well: its next problem is logged."""
        self._failing.discard(key)

    def keep(self, keys: Iterable[Hashable]) -> None:
        """Forget the keys not among ``keys`` (a trainer gone): the set does not grow with every one seen."""
        self._failing &= set(keys)
