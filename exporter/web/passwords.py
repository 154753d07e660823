"""The queue of bcrypt password checks: one thread runs them, a few wait, and a newcomer always gets its turn.

A check costs tens of milliseconds of CPU by design, so they run one at a time on a thread of their own and
at most ``waiting`` wait for it, one per client address (a second request from an address with a check
waiting or running is refused). When the queue is full, who waits is decided by how many checks each address
had lately: the queue is ordered by that count (fewest first, then by arrival), and a request from an address
with fewer recent checks than the last in the queue takes that one's place, which is refused instead. So a
flood from any number of addresses, each of which keeps retrying, can delay a scraper whose password was
never checked (Prometheus right after an exporter restart) by at most ``waiting`` checks: its address has had
none, and it goes to the front. What no queue can tell apart is a flood from an endless supply of addresses
that are each used once; those compete with a newcomer as equals.

A refused request is answered 503 by the server; a credential verified once is answered from
``WebConfig``'s memory and never waits here.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import heapq
import itertools
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

WAITING = 8
RECENT_SECONDS = 60.0  # how long a check counts against its address
_ADDRESSES_KEPT = 4096  # addresses whose recent checks are remembered; the oldest is forgotten first
_CHECKS_KEPT = 64  # recent checks remembered per address: enough to rank a flood behind a newcomer


@dataclasses.dataclass(order=True)
class _Waiting:
    recent: int
    arrival: int
    client: str = dataclasses.field(compare=False)
    header: str | None = dataclasses.field(compare=False)
    answer: asyncio.Future[bool | None] = dataclasses.field(compare=False)


class PasswordChecks:
    """Runs ``verify(header)`` on one thread for requests of the event loop, fairly across client addresses."""

    def __init__(self, verify: Callable[[str | None], bool], waiting: int = WAITING,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._verify = verify
        self._room = waiting
        self._clock = clock
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="http-bcrypt")
        self._queue: list[_Waiting] = []  # a heap: the next to run first
        self._busy: set[str] = set()  # addresses with a check waiting or running
        self._running = False
        self._arrivals = itertools.count()
        self._recent: OrderedDict[str, deque[float]] = OrderedDict()  # address → start times of its checks

    async def check(self, client: str, header: str | None) -> bool | None:
        """Whether the credentials in ``header`` are right; None when the request is refused its turn."""
        if client in self._busy:
            return None
        entry = _Waiting(self._recent_checks(client), next(self._arrivals), client, header,
                         asyncio.get_running_loop().create_future())
        if len(self._queue) >= self._room:
            last = max(self._queue)
            if entry > last:
                return None
            self._queue.remove(last)
            heapq.heapify(self._queue)
            self._busy.discard(last.client)
            last.answer.set_result(None)
        heapq.heappush(self._queue, entry)
        self._busy.add(client)
        self._next()
        try:
            return await entry.answer
        except asyncio.CancelledError:  # the client went away while it waited
            if entry in self._queue:
                self._queue.remove(entry)
                heapq.heapify(self._queue)
                self._busy.discard(client)
            raise

    def shutdown(self) -> None:
        self._thread.shutdown(wait=False, cancel_futures=True)

    def _next(self) -> None:
        """Start the first waiting check when none runs."""
        if self._running or not self._queue:
            return
        entry = heapq.heappop(self._queue)
        self._running = True
        self._count_check(entry.client)
        done = asyncio.get_running_loop().run_in_executor(self._thread, self._verify, entry.header)
        done.add_done_callback(lambda result: self._finished(entry, result))

    def _finished(self, entry: _Waiting, result: asyncio.Future[bool]) -> None:
        self._running = False
        self._busy.discard(entry.client)
        if not entry.answer.done():
            if result.cancelled():
                entry.answer.cancel()
            elif result.exception() is not None:
                entry.answer.set_exception(result.exception())  # type: ignore[arg-type]
            else:
                entry.answer.set_result(result.result())
        with contextlib.suppress(RuntimeError):  # the loop is closing: nothing more runs
            self._next()

    def _recent_checks(self, client: str) -> int:
        times = self._recent.get(client)
        if not times:
            return 0
        horizon = self._clock() - RECENT_SECONDS
        while times and times[0] < horizon:
            times.popleft()
        return len(times)

    def _count_check(self, client: str) -> None:
        times = self._recent.pop(client, None) or deque(maxlen=_CHECKS_KEPT)
        times.append(self._clock())
        self._recent[client] = times
        while len(self._recent) > _ADDRESSES_KEPT:
            self._recent.popitem(last=False)
