"""The HTTP side: ``/metrics`` (the telemetry path), a landing page on ``/``, ``/-/healthy`` and ``/-/ready``.

Served by a threading HTTP server so a slow scraper never blocks another; with TLS the handshake runs
in the connection's own thread for the same reason.
"""

from __future__ import annotations

import gzip
import html
import logging
import socket
import ssl
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from exporter import __version__
from exporter.webconfig import WebConfig

log = logging.getLogger(__name__)


def parse_listen_address(address: str) -> tuple[str, int]:
    """``:9847``, ``127.0.0.1:9847`` or ``[::1]:9847`` → (host, port). Raises ValueError."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected [host]:port, got {address!r}")
    return host.strip("[]"), int(port)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    ssl_context: ssl.SSLContext | None = None

    def get_request(self) -> tuple[Any, Any]:
        sock, addr = super().get_request()
        if self.ssl_context is not None:
            sock = self.ssl_context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, addr


class _V6Server(_Server):
    address_family = socket.AF_INET6


class _DualStackServer(_V6Server):
    """``:9847`` means every address, IPv6 as well as IPv4, as it does for node_exporter (Go's listener)."""

    def server_bind(self) -> None:
        self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()


def serve(
    address: str,
    registry: CollectorRegistry,
    telemetry_path: str = "/metrics",
    web_config: WebConfig | None = None,
    ready: Callable[[], bool] = lambda: True,
    pages: Mapping[str, Callable[[], tuple[bytes, str]]] | None = None,
) -> ThreadingHTTPServer:
    """Bind and return the server (not yet serving: call ``serve_forever`` or use ``start_in_thread``).

    ``pages``: path → a function returning (body, content type), e.g. the status page on ``/``."""
    routes = dict(pages or {})
    web = web_config or WebConfig()
    host, port = parse_listen_address(address)

    class Handler(BaseHTTPRequestHandler):
        server_version = f"bottleneck-exporter/{__version__}"

        def handle(self) -> None:
            # The handshake runs here, not in setup(): socketserver prints a raw traceback to stderr for
            # anything setup() raises, and a client without a certificate (or speaking plain HTTP to the
            # TLS port) is routine, not a crash.
            try:
                if isinstance(self.connection, ssl.SSLSocket):
                    self.connection.settimeout(10)
                    self.connection.do_handshake()
                    self.connection.settimeout(None)
                    if not web.client_allowed(self.connection.getpeercert()):
                        log.debug("connection from %s refused: client certificate has none of the allowed "
                                  "SANs", self.client_address)
                        return
                super().handle()
            except (ssl.SSLError, ConnectionError, TimeoutError) as err:
                log.debug("connection from %s dropped: %s", self.client_address, err)

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            # Health endpoints stay open so orchestrators can probe without credentials, as Prometheus does.
            if path == "/-/healthy":
                return self._send(200, b"Healthy.\n", "text/plain; charset=utf-8")
            if path == "/-/ready":
                if ready():
                    return self._send(200, b"Ready.\n", "text/plain; charset=utf-8")
                return self._send(503, b"Not ready.\n", "text/plain; charset=utf-8")
            if not web.authorized(self.headers.get("Authorization")):
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="bottleneck-exporter"')
                self.send_header("Content-Length", "0")
                self._extra_headers()
                self.end_headers()
                return None
            if path == telemetry_path:
                encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
                body = encoder(registry)
                # Prometheus asks for gzip; a full scrape shrinks ~8x, which matters on a busy node's NIC.
                if "gzip" in self.headers.get("Accept-Encoding", ""):
                    return self._send(200, gzip.compress(body, compresslevel=1), content_type, gzipped=True)
                return self._send(200, body, content_type)
            if path in routes:
                return self._send(200, *routes[path]())
            if path == "/":
                return self._send(200, _landing_page(telemetry_path), "text/html; charset=utf-8")
            return self._send(404, b"Not found.\n", "text/plain; charset=utf-8")

        def _extra_headers(self) -> None:
            for key, value in web.headers.items():
                self.send_header(key, value)

        def _send(self, status: int, body: bytes, content_type: str, gzipped: bool = False) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            if gzipped:
                self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(body)))
            self._extra_headers()
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("%s " + format, self.client_address[0], *args)

    server_class: type[_Server] = _Server
    if ":" in host:
        server_class = _V6Server
    elif not host and socket.has_dualstack_ipv6():
        server_class, host = _DualStackServer, "::"
    server = server_class((host, port), Handler)
    server.ssl_context = web.ssl_context
    return server


def start_in_thread(server: ThreadingHTTPServer) -> threading.Thread:
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
