"""The HTTP side: ``/metrics`` (the telemetry path), a landing page on ``/``, ``/-/healthy`` and ``/-/ready``.

HTTP/1.1 with keep-alive: h11 parses and frames every message, an asyncio event loop in one thread moves
the bytes, so a connection costs a file descriptor, never a thread. A client that connects and stalls (half a
request line, no TLS handshake, a response it never reads) holds nothing a scrape needs, and is dropped at its
deadline. Bounds, node_exporter's where it has one:

- the TLS handshake and the first request head must arrive within 10 s; a kept-alive connection may idle
  120 s between requests; a response must be taken within 30 s;
- at most 512 connections; one more drops whichever has waited longest for a request head;
- scrapes run in 4 threads; ``--web.max-requests`` (default 40, 0 = no limit) bounds those in flight, and
  more are answered 503, as node_exporter does;
- pages (the status page on ``/``, ``/status.json``) run in 2 threads of their own, at most 16 in flight; more
  wait for a place (10 s at most, then 503). However many clients ask for pages, and whatever a page costs,
  they never take a scrape's thread or its place under ``--web.max-requests``; and a page waits (1 s at most)
  while a scrape is in flight, so that a flood of page requests does not keep the event loop and the
  interpreter's lock from the scrape either. A page's ETag gets a client that has it a 304
  (``If-None-Match``), and a client that takes gzip gets the page compressed once per render;
- bcrypt (basic auth) runs in one thread with at most 8 checks waiting, one per client address, the addresses
  with the fewest checks lately first; more are answered 503 (``web.passwords``). A flood of wrong passwords
  costs one core at most, a scraper whose password was never checked waits at most 8 checks however many
  addresses flood, and one whose credentials were verified once never waits (``web.config.WebConfig``).

Routes are a table (``routes``): a path, its handler, whether it answers without credentials and which pool of
threads runs it (``SCRAPES``, ``PAGES``, or none: answered on the event loop). Exposes nothing itself;
``/metrics`` answers, e.g.::

    bottleneck_scrape_collector_success{collector="cpu"} 1.0
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gzip
import html
import http
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor

import h11
from prometheus_client import CollectorRegistry

from bottleneck_exporter import __version__
from bottleneck_exporter.web import exposition
from bottleneck_exporter.web.config import WebConfig
from bottleneck_exporter.web.passwords import PasswordChecks

log = logging.getLogger(__name__)

DEFAULT_MAX_REQUESTS = 40  # node_exporter's --web.max-requests default

_HANDSHAKE_SECONDS = 10.0
_FIRST_HEAD_SECONDS = 10.0
_IDLE_SECONDS = 120.0  # longer than Prometheus' default 1m scrape interval, so its connection is reused
_WRITE_SECONDS = 30.0
_MAX_CONNECTIONS = 512  # well under systemd's default 1024 open files
_BACKLOG = 512
_MAX_HEAD_BYTES = 16 * 1024
_READ_BYTES = 64 * 1024
_SCRAPE_THREADS = 4  # collection holds the GIL most of the time: more threads would not scrape faster
# Pages are rendered once per collection and shared (bottleneck_exporter.status.renders): most page requests
# only wait for that render or copy its bytes, so two threads serve them; the bound stops a flood of clients
# that never read from holding pages in memory.
_PAGE_THREADS = 2
MAX_PAGE_REQUESTS = 16
_PAGE_QUEUE_SECONDS = 10.0  # how long a page request beyond the bound waits for a place before a 503
# How long a page waits for the scrapes in flight to end. Both need the interpreter's lock: without the wait,
# clients asking for pages without pause kept a scrape at the push bounds waiting for it several times over.
_PAGE_YIELD_SECONDS = 1.0
SCRAPES = "scrapes"
PAGES = "pages"


def parse_listen_address(address: str) -> tuple[str, int]:
    """``:9847``, ``127.0.0.1:9847`` or ``[::1]:9847`` → (host, port). Raises ValueError."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected [host]:port, got {address!r}")
    return host.strip("[]"), int(port)


# -- what each path answers ------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]  # names in lower case
    client: str = ""  # the peer's address, without the port


@dataclasses.dataclass(frozen=True)
class Response:
    status: int
    body: bytes
    content_type: str = "text/plain; charset=utf-8"
    headers: tuple[tuple[str, str], ...] = ()


@dataclasses.dataclass(frozen=True)
class Route:
    handler: Callable[[Request], Response]
    public: bool = False  # answered without credentials: orchestrators probe health without them
    pool: str | None = None  # SCRAPES or PAGES: runs in that pool's threads, counted against its bound


# A page: its body, content type and ETag (the render it is, "" for none).
Page = Callable[[], tuple[bytes, str, str]]


def text(status: int, body: str) -> Response:
    return Response(status, body.encode())


def routes(registry: CollectorRegistry, telemetry_path: str, ready: Callable[[], bool],
           pages: Mapping[str, Page] | None = None) -> dict[str, Route]:
    """The endpoints; ``pages`` (path → a function returning body, content type and ETag, e.g. the status page
    on ``/``) replace the plain landing page. They run in the page threads: the status page may collect and
    evaluate verdicts, and must not do it in a scrape's place."""
    def metrics(request: Request) -> Response:
        encoder, content_type = exposition.choose(request.headers.get("accept", ""))
        body = encoder(registry)
        # Prometheus asks for gzip; a full scrape shrinks ~8x, which matters on a busy node's NIC.
        if "gzip" in request.headers.get("accept-encoding", ""):
            return Response(200, gzip.compress(body, compresslevel=1), content_type, (("Content-Encoding", "gzip"),))
        return Response(200, body, content_type)

    def page(render: Page) -> Route:
        zipped: list[tuple[str, bytes]] = []  # (ETag, gzip) of the last render sent compressed

        def answer(request: Request) -> Response:
            body, content_type, etag = render()
            if not etag:
                return Response(200, body, content_type)
            # no-cache: a browser asks again on each reload, and gets a 304 while the render it has is current.
            headers: tuple[tuple[str, str], ...] = (("ETag", etag), ("Cache-Control", "no-cache"),
                                                    ("Vary", "Accept-Encoding"))
            if etag in (tag.strip() for tag in request.headers.get("if-none-match", "").split(",")):
                return Response(304, b"", content_type, headers)
            if "gzip" in request.headers.get("accept-encoding", ""):
                # Compressed once per render, not per request: a page at the push bounds shrinks about 25 times,
                # and so do the bytes a flood of clients has the event loop send.
                last = zipped[-1] if zipped else None
                if last is None or last[0] != etag:
                    last = etag, gzip.compress(body, compresslevel=6)
                    zipped[:] = [last]
                return Response(200, last[1], content_type, (*headers, ("Content-Encoding", "gzip")))
            return Response(200, body, content_type, headers)

        return Route(answer, pool=PAGES)

    return {
        "/-/healthy": Route(lambda _: text(200, "Healthy.\n"), public=True),
        "/-/ready": Route(lambda _: text(200, "Ready.\n") if ready() else text(503, "Not ready.\n"), public=True),
        "/": Route(lambda _: Response(200, _landing_page(telemetry_path), "text/html; charset=utf-8")),
        **{path: page(render) for path, render in (pages or {}).items()},
        telemetry_path: Route(metrics, pool=SCRAPES),
    }


# -- the server ----------------------------------------------------------------------------------------
class WebServer:
    """Serves ``routes`` on a bound listening socket; ``serve_forever`` in one thread, ``shutdown`` from another."""

    def __init__(self, sock: socket.socket, table: dict[str, Route], web: WebConfig,
                 max_requests: int = DEFAULT_MAX_REQUESTS) -> None:
        self.socket = sock
        self.server_address = sock.getsockname()
        self.routes = table
        self.web = web
        self.max_requests = max_requests
        self._pools = {
            SCRAPES: _Pool(_SCRAPE_THREADS, max_requests, "http-scrape",
                           f"Limit of concurrent requests reached ({max_requests}), try again later.\n"),
            PAGES: _Pool(_PAGE_THREADS, MAX_PAGE_REQUESTS, "http-page",
                         f"Limit of concurrent page requests reached ({MAX_PAGE_REQUESTS}), try again later.\n",
                         queue_seconds=_PAGE_QUEUE_SECONDS),
        }
        self._no_scrape = asyncio.Event()  # set while no scrape is in flight: pages wait for it
        self._no_scrape.set()
        self._passwords = PasswordChecks(web.verify)
        self._connections: set[asyncio.Task[None]] = set()
        self._awaiting_head: dict[asyncio.Task[None], float] = {}  # connection → since when (monotonic)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._stopped = threading.Event()

    # -- lifecycle -------------------------------------------------------------------------------------
    def serve_forever(self) -> None:
        try:
            asyncio.run(self._serve())
        finally:
            for pool in self._pools.values():
                pool.threads.shutdown(wait=False, cancel_futures=True)
            self._passwords.shutdown()
            self._stopped.set()

    def shutdown(self) -> None:
        """Stop serving and close the listening socket; waits (5 s at most) for the loop to end."""
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None:
            with contextlib.suppress(RuntimeError):  # the loop has already ended
                loop.call_soon_threadsafe(stop.set)
            self._stopped.wait(timeout=5)
        self.socket.close()

    async def _serve(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        tls = self.web.ssl_context
        server = await asyncio.start_server(
            self._connection, sock=self.socket, ssl=tls, backlog=_BACKLOG,
            ssl_handshake_timeout=_HANDSHAKE_SECONDS if tls is not None else None)
        async with server:
            await self._stop.wait()
        for task in list(self._connections):
            task.cancel()

    # -- one connection --------------------------------------------------------------------------------
    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._admit(task)
        _no_delay(writer)
        try:
            if self.web.ssl_context is not None and not self.web.client_allowed(writer.get_extra_info("peercert")):
                log.debug("connection from %s refused: client certificate has none of the allowed SANs",
                          writer.get_extra_info("peername"))
                return
            await self._exchange(reader, writer)
        except (OSError, ssl.SSLError, asyncio.TimeoutError, h11.LocalProtocolError) as err:
            log.debug("connection from %s dropped: %r", writer.get_extra_info("peername"), err)
        except asyncio.CancelledError:
            # Dropped to make room (``_admit``) or at shutdown. Ending normally keeps asyncio's stream callback,
            # which asks the task for its exception, from logging a traceback for a routine event.
            log.debug("connection from %s dropped to make room or at shutdown", writer.get_extra_info("peername"))
        finally:
            self._connections.discard(task)
            self._awaiting_head.pop(task, None)
            if not writer.is_closing():
                writer.transport.abort()

    def _admit(self, task: asyncio.Task[None]) -> None:
        """Count the connection in; at the bound, drop the one that has waited longest for a request head
        (a stalled client, or an idle kept-alive one that will simply reconnect)."""
        if len(self._connections) >= _MAX_CONNECTIONS and self._awaiting_head:
            oldest = min(self._awaiting_head, key=self._awaiting_head.__getitem__)
            oldest.cancel()
            self._connections.discard(oldest)
            self._awaiting_head.pop(oldest)
        self._connections.add(task)

    async def _exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Requests and responses on one connection until either side closes it or a deadline passes."""
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=_MAX_HEAD_BYTES)
        task = asyncio.current_task()
        assert task is not None
        deadline = _FIRST_HEAD_SECONDS
        while True:
            self._awaiting_head[task] = time.monotonic()
            try:
                request = await asyncio.wait_for(_read_request(conn, reader, _client(writer)), deadline)
            except h11.RemoteProtocolError as err:
                await self._send(conn, writer, "GET", text(err.error_status_hint, "Bad request.\n"))
                break
            finally:
                self._awaiting_head.pop(task, None)
            if request is None:
                break
            await self._answer(conn, writer, request)
            if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                break  # the client asked to close, or sent a body we did not read
            conn.start_next_cycle()
            deadline = _IDLE_SECONDS
        writer.close()
        await asyncio.wait_for(writer.wait_closed(), _WRITE_SECONDS)

    async def _send(self, conn: h11.Connection, writer: asyncio.StreamWriter, method: str,
                    response: Response) -> None:
        headers = [("Content-Type", response.content_type), ("Content-Length", str(len(response.body))),
                   ("Server", f"bottleneck-exporter/{__version__}"), *response.headers, *self.web.headers.items()]
        # One write of the whole response: the head and the body as two small segments would wait on each
        # other under Nagle's algorithm whatever _no_delay achieved (a TLS transport, another platform).
        head = conn.send(h11.Response(status_code=response.status, headers=headers,
                                      reason=http.HTTPStatus(response.status).phrase.encode()))
        body = conn.send(h11.Data(data=response.body)) if method != "HEAD" else b""
        writer.write(b"".join((head or b"", body or b"", conn.send(h11.EndOfMessage()) or b"")))
        await asyncio.wait_for(writer.drain(), _WRITE_SECONDS)

    # -- one request -----------------------------------------------------------------------------------
    async def _answer(self, conn: h11.Connection, writer: asyncio.StreamWriter, request: Request) -> None:
        """Respond; a route with a pool holds its place in the pool's bound until its response is sent,
        so that clients that never read cannot pile up scrapes (or pages) in memory."""
        route = self.routes.get(request.path)
        pool = self._pools[route.pool] if route is not None and route.pool is not None else None
        if pool is None:
            await self._send(conn, writer, request.method, await self._respond(request, route))
            return
        if not await pool.enter():
            await self._send(conn, writer, request.method, text(503, pool.refusal))
            return
        try:
            if pool is self._pools[SCRAPES]:
                self._no_scrape.clear()
            else:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._no_scrape.wait(), _PAGE_YIELD_SECONDS)
            await self._send(conn, writer, request.method, await self._respond(request, route, pool))
        finally:
            pool.leave()
            if not self._pools[SCRAPES].in_flight:
                self._no_scrape.set()

    async def _respond(self, request: Request, route: Route | None, pool: _Pool | None = None) -> Response:
        if route is None or not route.public:
            refused = await self._authenticate(request)
            if refused is not None:
                return refused
        if route is None:
            return text(404, "Not found.\n")
        if request.method not in ("GET", "HEAD"):
            return Response(405, b"Method not allowed.\n", headers=(("Allow", "GET, HEAD"),))
        if pool is None:
            return _call(route.handler, request)
        return await asyncio.get_running_loop().run_in_executor(pool.threads, _call, route.handler, request)

    async def _authenticate(self, request: Request) -> Response | None:
        """None when the request may proceed, else the response refusing it."""
        header = request.headers.get("authorization")
        verdict = self.web.cached_verdict(header)
        if verdict is None:
            verdict = await self._passwords.check(request.client, header)
            if verdict is None:
                return text(503, "Too many password checks at once, try again later.\n")
        if verdict:
            return None
        return Response(401, b"Unauthorized.\n", headers=(("WWW-Authenticate", 'Basic realm="bottleneck-exporter"'),))


class _Pool:
    """Threads for one kind of blocking request and the bound on those in flight (0: none). Beyond the bound a
    request is refused at once, or waits ``queue_seconds`` for a place first. Used on the event loop only."""

    def __init__(self, threads: int, limit: int, name: str, refusal: str, queue_seconds: float = 0.0) -> None:
        self.threads = ThreadPoolExecutor(threads, thread_name_prefix=name)
        self.limit = limit
        self.refusal = refusal
        self.queue_seconds = queue_seconds
        self.in_flight = 0
        self._places = asyncio.Semaphore(limit or 1)

    async def enter(self) -> bool:
        """Take a place; False when there is none (in time)."""
        if self.limit:
            if self._places.locked() and not self.queue_seconds:
                return False
            try:
                await asyncio.wait_for(self._places.acquire(), self.queue_seconds or None)
            except asyncio.TimeoutError:
                return False
        self.in_flight += 1
        return True

    def leave(self) -> None:
        self.in_flight -= 1
        if self.limit:
            self._places.release()


async def _read_request(conn: h11.Connection, reader: asyncio.StreamReader, client: str) -> Request | None:
    """The next request head, or None when the client closed the connection. A request with a body leaves
    the connection unable to continue, so it is closed after the response."""
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(await reader.read(_READ_BYTES))
            continue
        if isinstance(event, h11.Request):
            conn.next_event()  # the EndOfMessage of a request without a body, at once
            headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in event.headers}
            target = event.target.decode("latin-1")
            return Request(event.method.decode("latin-1"), target.split("?", 1)[0], headers, client)
        return None  # ConnectionClosed (or PAUSED, which only follows a request)


def _no_delay(writer: asyncio.StreamWriter) -> None:
    """Nagle's algorithm off on a TCP connection, as Go's net/http (node_exporter's server) has it. asyncio
    sets TCP_NODELAY only on sockets whose ``proto`` is IPPROTO_TCP, and ``socket.create_server`` makes them
    with proto 0: with Nagle on, every response after the first on a kept-alive connection waited for the
    client's delayed ACK, about 40 ms (benchmarks/scrape_vs_node_exporter.py prints both medians)."""
    sock = writer.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _client(writer: asyncio.StreamWriter) -> str:
    peer = writer.get_extra_info("peername")
    return str(peer[0]) if isinstance(peer, tuple) and peer else ""


def _call(handler: Callable[[Request], Response], request: Request) -> Response:
    try:
        return handler(request)
    except Exception:
        log.exception("%s %s failed", request.method, request.path)
        return text(500, "Internal server error.\n")


# -- binding ---------------------------------------------------------------------------------------------
def bind(address: str) -> socket.socket:
    """A listening socket for ``[host]:port``; ``:port`` means every address, IPv6 as well as IPv4, as it
    does for node_exporter (Go's listener). Raises OSError."""
    host, port = parse_listen_address(address)
    if not host:
        if socket.has_dualstack_ipv6():
            return socket.create_server(("::", port), family=socket.AF_INET6, backlog=_BACKLOG,
                                        dualstack_ipv6=True)
        host = "0.0.0.0"
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family, backlog=_BACKLOG)


def serve(
    address: str,
    registry: CollectorRegistry,
    telemetry_path: str = "/metrics",
    web_config: WebConfig | None = None,
    ready: Callable[[], bool] = lambda: True,
    max_requests: int = DEFAULT_MAX_REQUESTS,
    pages: Mapping[str, Page] | None = None,
) -> WebServer:
    """Bind and return the server (not yet serving: call ``serve_forever`` or use ``start_in_thread``)."""
    return WebServer(bind(address), routes(registry, telemetry_path, ready, pages), web_config or WebConfig(),
                     max_requests)


def start_in_thread(server: WebServer) -> threading.Thread:
    thread = threading.Thread(target=server.serve_forever, name="http", daemon=True)
    thread.start()
    return thread


def _landing_page(telemetry_path: str) -> bytes:
    path = html.escape(telemetry_path)
    return f"""<!DOCTYPE html>
<html><head><title>bottleneck-exporter</title></head>
<body>
<h1>bottleneck-exporter {__version__}</h1>
<p>Why is training slower than it should be? GPU, CPU, memory, disk, network and training-step metrics.</p>
<ul>
<li><a href="{path}">Metrics</a></li>
<li><a href="/-/healthy">Health</a></li>
<li><a href="/-/ready">Readiness</a></li>
</ul>
</body></html>
""".encode()
