"""The HTTP side of the real exporter process: endpoints, TLS, mutual TLS, basic auth, refused configs."""

from __future__ import annotations

import itertools
import os
import socket
import ssl
import subprocess
import sys
import threading
from pathlib import Path

import bcrypt
import pytest
import requests
import trustme

from tests.conftest import ExporterProcess, free_port, wait_until


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def tls_files(tmp_path: Path, ca: trustme.CA) -> dict[str, Path]:
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert("prometheus.example")
    files = {
        "cert": tmp_path / "server.crt",
        "key": tmp_path / "server.key",
        "ca": tmp_path / "ca.crt",
        "client": tmp_path / "client.pem",
    }
    server.cert_chain_pems[0].write_to_path(str(files["cert"]))
    server.private_key_pem.write_to_path(str(files["key"]))
    ca.cert_pem.write_to_path(str(files["ca"]))
    client.private_key_and_cert_chain_pem.write_to_path(str(files["client"]))
    return files


def _web_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "web.yml"
    path.write_text(text)
    return path


def _https(exporter: ExporterProcess) -> str:
    return exporter.url.replace("http://", "https://")


def test_landing_health_ready_and_404(start_exporter) -> None:
    exporter = start_exporter(["--collector.disable-defaults", "--collector.memory"])
    landing = requests.get(exporter.url + "/", timeout=5)
    assert landing.status_code == 200
    assert 'href="/metrics"' in landing.text
    assert requests.get(exporter.url + "/-/healthy", timeout=5).status_code == 200
    assert requests.get(exporter.url + "/-/ready", timeout=5).status_code == 200
    assert requests.get(exporter.url + "/nope", timeout=5).status_code == 404


def test_empty_host_listens_on_ipv4_and_ipv6_like_node_exporter() -> None:
    # Regression: ":port" bound 0.0.0.0 only, so an IPv6-only cluster could not scrape the default address.
    exporter = ExporterProcess(["--collector.disable-defaults", "--collector.memory"], listen=":{port}")
    try:
        exporter.wait_ready()
        # Without IPv6 on the machine the exporter falls back to IPv4 alone.
        for host in ("127.0.0.1", "[::1]") if socket.has_dualstack_ipv6() else ("127.0.0.1",):
            assert requests.get(f"http://{host}:{exporter.port}/-/healthy", timeout=5).status_code == 200, host
    finally:
        exporter.stop()


def test_custom_telemetry_path_and_disabled_exporter_metrics(start_exporter) -> None:
    exporter = start_exporter(["--collector.disable-defaults", "--collector.memory",
                               "--web.telemetry-path=/stats", "--web.disable-exporter-metrics"])
    body = requests.get(exporter.url + "/stats", timeout=5).text
    assert "bottleneck_memory_total_bytes" in body
    assert "process_resident_memory_bytes" not in body
    assert requests.get(exporter.url + "/metrics", timeout=5).status_code == 404


def test_openmetrics_negotiated_when_asked(start_exporter) -> None:
    exporter = start_exporter(["--collector.disable-defaults", "--collector.memory"])
    response = requests.get(exporter.url + "/metrics", timeout=5,
                            headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    assert response.headers["Content-Type"].startswith("application/openmetrics-text")
    assert response.text.rstrip().endswith("# EOF")


def test_gzip_when_the_scraper_asks_for_it(start_exporter) -> None:
    exporter = start_exporter(["--collector.disable-defaults", "--collector.memory"])
    zipped = requests.get(exporter.url + "/metrics", timeout=5, headers={"Accept-Encoding": "gzip"})
    assert zipped.headers.get("Content-Encoding") == "gzip"
    assert "bottleneck_memory_total_bytes" in zipped.text  # requests decompresses transparently
    plain = requests.get(exporter.url + "/metrics", timeout=5, headers={"Accept-Encoding": "identity"})
    assert "Content-Encoding" not in plain.headers and "bottleneck_memory_total_bytes" in plain.text


def test_basic_auth_right_credentials_200_none_or_wrong_401(start_exporter, tmp_path: Path) -> None:
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode().replace("$2b$", "$2y$", 1)
    config = _web_config(tmp_path, f"basic_auth_users:\n  prometheus: '{hashed}'\n")
    exporter = start_exporter(["--collector.disable-defaults", "--collector.memory",
                               f"--web.config.file={config}"])
    url = exporter.url + "/metrics"
    assert requests.get(url, timeout=5).status_code == 401
    assert requests.get(url, timeout=5, auth=("prometheus", "wrong")).status_code == 401
    assert requests.get(url, timeout=5, auth=("nobody", "s3cret")).status_code == 401
    ok = requests.get(url, timeout=5, auth=("prometheus", "s3cret"))
    assert ok.status_code == 200 and "bottleneck_memory_total_bytes" in ok.text
    # The cache of verified credentials must not let a wrong password in after a right one.
    assert requests.get(url, timeout=5, auth=("prometheus", "s3cre")).status_code == 401


def test_tls_serves_https_and_refuses_plain_http(start_exporter, tmp_path: Path, tls_files) -> None:
    config = _web_config(tmp_path, f"tls_server_config:\n  cert_file: {tls_files['cert']}\n"
                                   f"  key_file: {tls_files['key']}\n")
    exporter = start_exporter(["--collector.disable-defaults", "--collector.memory",
                               f"--web.config.file={config}"], wait=False)
    from tests.conftest import wait_http

    response = wait_http(_https(exporter) + "/metrics", verify=str(tls_files["ca"]))
    assert response.status_code == 200 and "bottleneck_memory_total_bytes" in response.text
    with pytest.raises(requests.RequestException):
        requests.get(exporter.url + "/metrics", timeout=5)


def test_mtls_requires_a_client_certificate_signed_by_the_ca(start_exporter, tmp_path: Path, tls_files) -> None:
    config = _web_config(tmp_path, f"""tls_server_config:
  cert_file: {tls_files['cert']}
  key_file: {tls_files['key']}
  client_auth_type: RequireAndVerifyClientCert
  client_ca_file: {tls_files['ca']}
""")
    exporter = start_exporter(["--collector.disable-defaults", "--collector.memory",
                               f"--web.config.file={config}"], wait=False)
    from tests.conftest import wait_http

    ok = wait_http(_https(exporter) + "/metrics", verify=str(tls_files["ca"]), cert=str(tls_files["client"]))
    assert ok.status_code == 200
    # Refused either way; under TLS 1.3 the client may see the connection close rather than the alert.
    with pytest.raises(requests.exceptions.ConnectionError):
        requests.get(_https(exporter) + "/metrics", timeout=5, verify=str(tls_files["ca"]))
    stranger = trustme.CA().issue_cert("intruder")
    stranger_pem = tmp_path / "stranger.pem"
    stranger.private_key_and_cert_chain_pem.write_to_path(str(stranger_pem))
    with pytest.raises(requests.exceptions.ConnectionError):
        requests.get(_https(exporter) + "/metrics", timeout=5, verify=str(tls_files["ca"]), cert=str(stranger_pem))
    # Regression: a refused handshake printed a raw socketserver traceback to stderr on every attempt.
    assert requests.get(_https(exporter) + "/-/healthy", timeout=5, verify=str(tls_files["ca"]),
                        cert=str(tls_files["client"])).status_code == 200
    assert "Traceback" not in exporter.output()


@pytest.mark.parametrize(("allowed", "admitted"), [("[prometheus.example, other.example]", True),
                                                   ("[grafana.example]", False)])
def test_client_allowed_sans_admit_only_certificates_naming_one(
    start_exporter, tmp_path: Path, tls_files, allowed: str, admitted: bool
) -> None:
    config = _web_config(tmp_path, f"""tls_server_config:
  cert_file: {tls_files['cert']}
  key_file: {tls_files['key']}
  client_auth_type: RequireAndVerifyClientCert
  client_ca_file: {tls_files['ca']}
  client_allowed_sans: {allowed}
""")
    exporter = start_exporter(["--collector.disable-defaults", "--collector.memory",
                               f"--web.config.file={config}"], wait=False)
    from tests.conftest import wait_http

    ca, cert = str(tls_files["ca"]), str(tls_files["client"])
    if admitted:
        assert wait_http(_https(exporter) + "/metrics", verify=ca, cert=cert).status_code == 200
        return
    def listening() -> bool:  # (the handshake itself would succeed: the SANs are checked after it)
        assert exporter.proc.poll() is None, exporter.output()
        socket.create_connection(("127.0.0.1", exporter.port), timeout=1).close()
        return True

    wait_until(listening, 30, "the exporter to listen", interval=0.1, ignoring=(OSError,))
    with pytest.raises(requests.exceptions.ConnectionError):
        requests.get(_https(exporter) + "/-/healthy", timeout=5, verify=ca, cert=cert)
    assert exporter.proc.poll() is None


def _refused(args: list[str]) -> str:
    result = subprocess.run([sys.executable, "-m", "bottleneck_exporter", "--web.listen-address=127.0.0.1:0", *args],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    return result.stderr


@pytest.mark.parametrize(
    ("content", "names"),
    [
        ("basic_auth_users:\n  alice: plaintext\n", "basic_auth_users.alice"),
        ("tls_server_config:\n  cert_file: /nonexistent.crt\n  key_file: /nonexistent.key\n", "cert_file"),
        ("tls_server_config:\n  cert_file: a\n", "tls_server_config.key_file"),
        ("tls_server_conifg:\n  cert_file: a\n", "tls_server_conifg: unknown key"),
        ("tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: Sometimes\n", "cert_file"),
        ("basic_auth_users: [1, 2]\n", "basic_auth_users: must be a mapping"),
        ("http_server_config:\n  headers:\n    Content-Length: '0'\n", "headers.Content-Length: not one of"),
        ("tls_server_config:\n  cert_file: a\n  key_file: b\n  cipher_suites: [TLS_AES_128_GCM_SHA256]\n",
         "tls_server_config.cipher_suites: not supported"),
        ("{{{", "not valid YAML"),
    ],
)
def test_bad_web_config_is_refused_at_start_naming_the_key(tmp_path: Path, content: str, names: str) -> None:
    assert names in _refused([f"--web.config.file={_web_config(tmp_path, content)}"])


@pytest.mark.parametrize(("settings", "names"), [
    ("client_auth_type: Sometimes", "client_auth_type: not one of"),
    # Regression: served without asking for any client certificate at all.
    ("client_auth_type: RequireAnyClientCert", "client_ca_file: required when client_auth_type is Require"),
    ("client_allowed_sans: [prometheus.example]", "client_allowed_sans: needs client_auth_type"),
])
def test_bad_client_certificate_settings_are_refused_naming_the_key(
    tmp_path: Path, tls_files, settings: str, names: str
) -> None:
    config = _web_config(tmp_path, f"tls_server_config:\n  cert_file: {tls_files['cert']}\n"
                                   f"  key_file: {tls_files['key']}\n  {settings}\n")
    assert names in _refused([f"--web.config.file={config}"])


@pytest.mark.parametrize(
    ("content", "names"),
    [
        ("collectors:\n  memroy: {}\n", "collectors.memroy: unknown collector"),
        ("collectors:\n  memory:\n    enabled: perhaps\n", "collectors.memory.enabled"),
        ("collectors:\n  memory:\n    colour: blue\n", "collectors.memory.colour: unknown option"),
        ("colectors: {}\n", "colectors: unknown top-level key"),
    ],
)
def test_bad_config_file_is_refused_naming_the_key(tmp_path: Path, content: str, names: str) -> None:
    path = tmp_path / "config.yml"
    path.write_text(content)
    assert names in _refused([f"--config.file={path}"])


def test_bad_listen_address_is_refused() -> None:
    assert "expected [host]:port" in _refused(["--web.listen-address=nonsense"])


def test_telemetry_path_no_request_could_reach_is_refused() -> None:
    assert "--web.telemetry-path: expected a path" in _refused(["--web.telemetry-path=metrics"])


def test_minimum_tls_version_is_enforced(start_exporter, tmp_path: Path, tls_files) -> None:
    config = _web_config(tmp_path, f"tls_server_config:\n  cert_file: {tls_files['cert']}\n"
                                   f"  key_file: {tls_files['key']}\n  min_version: TLS13\n")
    exporter = start_exporter(["--collector.disable-defaults", "--collector.memory",
                               f"--web.config.file={config}"], wait=False)
    from tests.conftest import wait_http

    wait_http(_https(exporter) + "/-/healthy", verify=str(tls_files["ca"]))
    client = ssl.create_default_context(cafile=str(tls_files["ca"]))
    client.maximum_version = ssl.TLSVersion.TLSv1_2
    with socket.create_connection(("127.0.0.1", exporter.port), timeout=5) as raw, pytest.raises(ssl.SSLError):
        client.wrap_socket(raw, server_hostname="127.0.0.1").do_handshake()


# -- hostile and careless clients -----------------------------------------------------------------------------
def _threads(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("Threads:")))


def _stall(port: int, count: int, first_bytes: bytes) -> list[socket.socket]:
    stalled = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        if first_bytes:
            sock.sendall(first_bytes)
        stalled.append(sock)
    return stalled


@pytest.mark.live
@pytest.mark.parametrize("tls", [False, True], ids=["http", "tls_without_handshake"])
def test_300_stalled_connections_neither_block_a_scrape_nor_take_a_thread_each(
    start_exporter, tmp_path: Path, tls_files, tls: bool
) -> None:
    # Regression: every connection got a thread and no deadline, so 300 half-sent request lines (or, over TLS,
    # connections that never start the handshake) held 303 threads and, under TasksMax=64, failed every scrape.
    args = ["--collector.disable-defaults", "--collector.memory"]
    if tls:
        config = _web_config(tmp_path, f"tls_server_config:\n  cert_file: {tls_files['cert']}\n"
                                       f"  key_file: {tls_files['key']}\n")
        args.append(f"--web.config.file={config}")
    exporter = start_exporter(args, wait=False)
    from tests.conftest import wait_http

    url = (_https(exporter) if tls else exporter.url) + "/metrics"
    verify = str(tls_files["ca"]) if tls else True
    wait_http(url, verify=verify)
    before = _threads(exporter.proc.pid)
    stalled = _stall(exporter.port, 300, b"" if tls else b"GET /metr")
    try:
        response = requests.get(url, timeout=30, verify=verify)
        assert response.status_code == 200 and "bottleneck_memory_total_bytes" in response.text
        assert _threads(exporter.proc.pid) <= before + 4, "stalled connections took threads"
    finally:
        for sock in stalled:
            sock.close()


@pytest.mark.live
def test_a_half_sent_request_is_dropped_at_its_deadline(start_exporter) -> None:
    # Regression: a connection that sent half a request line was held open for as long as the client liked.
    exporter = start_exporter(["--collector.disable-defaults", "--collector.memory"])
    (sock,) = _stall(exporter.port, 1, b"GET /metr")
    with sock:
        sock.settimeout(60)  # the deadline is 10 s; generous for a loaded machine
        assert sock.recv(1024) == b"", "the server should close the connection, not answer or wait"


@pytest.mark.live
def test_http_1_1_keep_alive_serves_several_requests_on_one_connection(start_exporter) -> None:
    # Regression: the server spoke HTTP/1.0 only and closed the connection after every response.
    import http.client

    exporter = start_exporter(["--collector.disable-defaults", "--collector.memory"])
    connection = http.client.HTTPConnection("127.0.0.1", exporter.port, timeout=30)
    try:
        for path in ("/metrics", "/-/healthy", "/metrics"):
            connection.request("GET", path)
            response = connection.getresponse()
            body = response.read()
            assert response.status == 200 and response.version == 11, path
            assert response.getheader("Connection") != "close" and body
        assert connection.sock is not None, "the connection was closed between requests"
    finally:
        connection.close()


class _BlockingCollector:
    """Holds every scrape until released, so that scrapes in flight can be counted."""

    def __init__(self) -> None:
        import threading

        self.release = threading.Event()
        self.entered = threading.Semaphore(0)

    def collect(self):  # type: ignore[no-untyped-def]
        from prometheus_client.core import GaugeMetricFamily

        self.entered.release()
        self.release.wait(60)
        yield GaugeMetricFamily("bottleneck_test_held", "A scrape that waited.", value=1)


def test_scrapes_beyond_web_max_requests_are_answered_503() -> None:
    # node_exporter's --web.max-requests: a bound on scrapes in flight; beyond it 503, not a new thread.
    from concurrent.futures import ThreadPoolExecutor

    from prometheus_client import CollectorRegistry

    from bottleneck_exporter.web.server import serve, start_in_thread
    from tests.conftest import free_port

    held = _BlockingCollector()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(held)  # type: ignore[arg-type]
    server = serve(f"127.0.0.1:{free_port()}", registry, max_requests=2)
    start_in_thread(server)
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with ThreadPoolExecutor(2) as pool:
            first = [pool.submit(requests.get, url + "/metrics", timeout=60) for _ in range(2)]
            for _ in range(2):
                assert held.entered.acquire(timeout=30)
            refused = requests.get(url + "/metrics", timeout=30)
            assert refused.status_code == 503 and "Limit of concurrent requests reached (2)" in refused.text
            assert requests.get(url + "/-/healthy", timeout=30).status_code == 200, "probes are not scrapes"
            held.release.set()
            assert [f.result().status_code for f in first] == [200, 200]
        assert requests.get(url + "/metrics", timeout=30).status_code == 200
    finally:
        held.release.set()
        server.shutdown()


def test_web_max_requests_flag_is_validated() -> None:
    assert "--web.max-requests" in _refused(["--web.max-requests=-1"])


# -- passwords -------------------------------------------------------------------------------------------------
def _basic(user: str, password: str) -> str:
    import base64

    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def _counting_bcrypt(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    import bottleneck_exporter.web.config as webconfig

    calls: list[bytes] = []
    real = bcrypt.checkpw

    def checkpw(password: bytes, hashed: bytes) -> bool:
        calls.append(password)
        return real(password, hashed)

    monkeypatch.setattr(webconfig.bcrypt, "checkpw", checkpw)
    return calls


def test_a_repeated_wrong_password_costs_one_bcrypt_per_interval(tmp_path: Path, monkeypatch) -> None:
    # Regression: every wrong password cost a full bcrypt, with no limit: 60 a second starved real scrapes.
    from bottleneck_exporter.web.config import load_web_config

    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
    config = load_web_config(str(_web_config(tmp_path, f"basic_auth_users:\n  prometheus: '{hashed}'\n")))
    calls = _counting_bcrypt(monkeypatch)
    for _ in range(50):
        assert not config.verify(_basic("prometheus", "guess"))
        assert not config.verify(_basic("nobody", "guess"))
    assert len(calls) == 2
    for _ in range(50):
        assert config.verify(_basic("prometheus", "s3cret"))
    assert len(calls) == 3
    # bcrypt refuses passwords over 72 bytes with an exception: that is a wrong password, not a crash.
    assert not config.verify(_basic("prometheus", "x" * 100))


@pytest.mark.live
def test_a_flood_of_wrong_passwords_leaves_scrapers_served(start_exporter, tmp_path: Path) -> None:
    """Regression: 60 wrong passwords a second failed legitimate scrapes. Now a verified scraper needs no
    bcrypt at all, and one verified for the first time during a flood from another address gets its turn."""
    import base64
    import http.client
    from concurrent.futures import ThreadPoolExecutor

    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=10)).decode()
    config = _web_config(tmp_path, f"basic_auth_users:\n  prometheus: '{hashed}'\n  late: '{hashed}'\n")
    exporter = start_exporter(["--collector.disable-defaults", "--collector.memory", f"--web.config.file={config}"])
    url = exporter.url + "/metrics"
    assert requests.get(url, timeout=30, auth=("prometheus", "s3cret")).status_code == 200

    def wrong(index: int) -> int:
        credential = base64.b64encode(f"prometheus:guess-{index}".encode()).decode()
        connection = http.client.HTTPConnection("127.0.0.1", exporter.port, timeout=60,
                                                source_address=("127.0.0.2", 0))
        try:
            connection.request("GET", "/metrics", headers={"Authorization": f"Basic {credential}"})
            return connection.getresponse().status
        finally:
            connection.close()

    with ThreadPoolExecutor(16) as pool:
        flood = [pool.submit(wrong, index) for index in range(240)]
        legit = [requests.get(url, timeout=30, auth=("prometheus", "s3cret")) for _ in range(10)]
        late = requests.get(url, timeout=30, auth=("late", "s3cret"))
        codes = [f.result() for f in flood]
    assert all(r.status_code == 200 and "bottleneck_memory_total_bytes" in r.text for r in legit)
    assert late.status_code == 200, late.text
    assert set(codes) <= {401, 503} and 401 in codes, set(codes)


def test_a_scraper_never_checked_goes_before_addresses_that_flood() -> None:
    """The queue's order: with every place taken by addresses that each had a check lately, a newcomer takes the
    place of the last of them, and its check runs next."""
    import asyncio

    from bottleneck_exporter.web.passwords import PasswordChecks

    order: list[str] = []
    gate = threading.Event()

    def verify(header: str | None) -> bool:
        gate.wait(30)
        order.append(str(header))
        return header == "right"

    async def scenario() -> dict[str, bool | None]:
        checks = PasswordChecks(verify, waiting=8)
        flooders = [f"10.0.0.{n}" for n in range(1, 11)]
        gate.set()
        for address in flooders:  # each flooding address has had a check lately
            assert await checks.check(address, "wrong") is False
        gate.clear()
        pending = {a: asyncio.ensure_future(checks.check(a, "wrong")) for a in flooders}
        await asyncio.sleep(0.05)  # one runs, eight wait, the tenth is refused
        newcomer = asyncio.ensure_future(checks.check("10.9.9.9", "right"))
        again = await checks.check(flooders[1], "wrong")  # its check waits already: refused
        order.clear()
        gate.set()
        answers = {a: await task for a, task in pending.items()}
        answers["newcomer"] = await newcomer
        answers["again"] = again
        checks.shutdown()
        return answers

    answers = asyncio.run(scenario())
    assert answers["newcomer"] is True and answers["again"] is None
    assert order[:2] == ["wrong", "right"], "the newcomer's check runs right after the one that was running"
    assert [v for k, v in answers.items() if k.startswith("10.0.0.")].count(None) == 2, \
        "the tenth flooder is refused at once, and the last waiting one makes room for the newcomer"


@pytest.mark.live
def test_a_password_flood_from_more_addresses_than_the_queue_holds_leaves_a_new_scraper_its_turn(
        start_exporter, tmp_path: Path) -> None:
    """Regression: with one check waiting per address and eight places, nine flooding addresses kept every place
    taken, and a scraper not yet verified (Prometheus right after an exporter restart) was answered 503."""
    import base64
    import http.client

    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=10)).decode()
    config = _web_config(tmp_path, f"basic_auth_users:\n  prometheus: '{hashed}'\n")
    exporter = start_exporter(["--collector.disable-defaults", "--collector.memory", f"--web.config.file={config}"])
    flooders = [f"127.0.0.{n}" for n in range(2, 14)]
    refused: dict[str, int] = dict.fromkeys(flooders, 0)
    stop = threading.Event()

    def flood(address: str) -> None:
        for index in itertools.count():
            if stop.is_set():
                return
            credential = base64.b64encode(f"prometheus:guess-{address}-{index}".encode()).decode()
            connection = http.client.HTTPConnection("127.0.0.1", exporter.port, timeout=60,
                                                    source_address=(address, 0))
            try:
                connection.request("GET", "/metrics", headers={"Authorization": f"Basic {credential}"})
                if connection.getresponse().status == 401:
                    refused[address] += 1
            except OSError:
                pass
            finally:
                connection.close()

    threads = [threading.Thread(target=flood, args=(a,), daemon=True) for a in flooders]
    for thread in threads:
        thread.start()
    try:
        wait_until(lambda: all(refused.values()), 120, "every flooding address to have had a password checked")
        first = requests.get(exporter.url + "/metrics", timeout=60, auth=("prometheus", "s3cret"))
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
    assert first.status_code == 200 and "bottleneck_memory_total_bytes" in first.text, first.status_code


# -- config errors never print what the file holds ---------------------------------------------------------------
SECRET = "hunter2-SECRET-7f3a"


@pytest.mark.parametrize("flag", ["--config.file", "--web.config.file"])
@pytest.mark.parametrize(("shape", "content", "names"), [
    # /etc/shadow read as YAML: each line is a key.
    ("shadow", f"root:$y$j9T${SECRET}:19000:0:99999:7:::\ndaemon:*:19000:0:99999:7:::\n", "not a setting name"),
    ("broken_yaml", f"a: b\n  bad: [{SECRET}\n", "not valid YAML at line 2"),
    ("quoted_in_error", f"a: *{SECRET}\n", "not valid YAML at line 1"),
])
def test_a_config_error_names_the_file_but_never_prints_its_contents(
    tmp_path: Path, flag: str, shape: str, content: str, names: str
) -> None:
    # Regression: --config.file=/etc/shadow printed a line of it as the "unknown top-level key".
    path = tmp_path / "secret.yml"
    path.write_text(content)
    stderr = _refused([f"{flag}={path}"])
    assert str(path) in stderr and names in stderr, stderr
    assert SECRET not in stderr, stderr


FILE_FLAGS = ["--config.file", "--web.config.file", "--collector.gpu.profile"]


@pytest.mark.parametrize("flag", FILE_FLAGS)
@pytest.mark.parametrize(("content", "names"), [
    # Regression: a 2 KB file of nested brackets ended start-up with a 3,000-line RecursionError traceback.
    pytest.param(b"[" * 1000 + b"]" * 1000, "nested too deeply", id="nested"),
    # Regression: a 10.5 MB file took 27 s and 1 GB of memory before its error.
    pytest.param((f"{SECRET}: 1\n" * (1 + (1 << 20) // 20)).encode(), "larger than 1 MiB", id="huge"),
    # Regression: the error of a file that is not UTF-8 named neither the file nor the flag.
    pytest.param(f"a: {SECRET}\xe9\n".encode("latin-1"), f"not UTF-8 text (byte {len(SECRET) + 4})", id="latin-1"),
    # Regression: --collector.gpu.profile=/etc/shadow printed root's line as an "unknown key".
    pytest.param(f"root:$y$j9T${SECRET}:19000:0:99999:7:::\n".encode(), "not a setting name", id="shadow"),
])
def test_a_file_given_at_start_that_is_not_one_gets_one_line_naming_it(
        tmp_path: Path, flag: str, content: bytes, names: str) -> None:
    path = tmp_path / "given.yml"
    path.write_bytes(content)
    stderr = _refused([f"{flag}={path}"])
    assert stderr.count("\n") == 1 and str(path) in stderr and names in stderr, stderr
    assert SECRET not in stderr and "Traceback" not in stderr, stderr


@pytest.mark.parametrize(("content", "names"), [
    (f"collectors:\n  disk:\n    device-exclude: '{SECRET}(('\n", "collectors.disk.device-exclude: not a valid"),
    (f"push:\n  socket-mode: {SECRET}\n", "push.socket-mode: expected octal permission bits"),
    (f"push:\n  max-jobs: {SECRET}\n", "push.max-jobs: expected a whole number"),
])
def test_a_bad_value_in_a_config_file_is_named_by_key_not_printed(tmp_path: Path, content: str, names: str) -> None:
    path = tmp_path / "config.yml"
    path.write_text(content)
    stderr = _refused([f"--config.file={path}"])
    assert f"{path}: {names}" in stderr and SECRET not in stderr, stderr


def test_a_bcrypt_cost_that_would_stall_every_new_password_is_refused(tmp_path: Path) -> None:
    hashed = "$2y$16$" + "a" * 53  # cost 16: ~5.5 s per check here
    stderr = _refused([f"--web.config.file={_web_config(tmp_path, f'basic_auth_users:{chr(10)}  p: {hashed!r}')}"])
    assert "basic_auth_users.p: bcrypt cost must be 4 to 14" in stderr, stderr


def test_at_the_connection_bound_the_longest_waiting_stalled_connection_makes_room(monkeypatch, caplog) -> None:
    # However many connections stall, a new one (a scrape) gets in: the stalled client waiting longest goes.
    from prometheus_client import CollectorRegistry

    import bottleneck_exporter.web.server as web
    from tests.conftest import free_port

    monkeypatch.setattr(web, "_MAX_CONNECTIONS", 20)
    server = web.serve(f"127.0.0.1:{free_port()}", CollectorRegistry(auto_describe=False))
    web.start_in_thread(server)
    port = server.server_address[1]
    stalled = _stall(port, 40, b"GET /metr")
    try:
        response = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=30)
        assert response.status_code == 200
        stalled[0].settimeout(30)
        assert stalled[0].recv(1024) == b"", "the oldest stalled connection should have been dropped"
    finally:
        for sock in stalled:
            sock.close()
        server.shutdown()
    # Dropping a connection is routine: asyncio must not log a traceback for each one.
    assert not [r for r in caplog.records if r.levelname == "ERROR"], caplog.text


def _server_side(client: socket.socket) -> socket.socket:
    """This process's end of the TCP connection whose other end is ``client`` (the server runs in a thread)."""
    wanted = client.getsockname()
    for fd in os.listdir("/proc/self/fd"):
        try:
            copy = os.dup(int(fd))
        except OSError:  # the listing's own descriptor, closed by now
            continue
        try:
            candidate = socket.socket(fileno=copy)
        except OSError:  # not a socket
            os.close(copy)
            continue
        try:
            if candidate.type == socket.SOCK_STREAM and candidate.getpeername() == wanted:
                return candidate
        except OSError:
            pass
        candidate.close()
    raise AssertionError("no socket of this process is connected to the client")


def test_kept_alive_scrapes_do_not_wait_for_the_client_s_delayed_ack() -> None:
    """Regression: with Nagle's algorithm on (asyncio leaves it on for sockets from socket.create_server),
    every response after the first on a kept-alive connection (Prometheus keeps them) sat out the client's
    delayed-ACK timer, about 40 ms a scrape. The server's end has TCP_NODELAY, and a response is one write."""
    import http.client

    from prometheus_client import CollectorRegistry

    import bottleneck_exporter.web.server as web

    server = web.serve(f"127.0.0.1:{free_port()}", CollectorRegistry(auto_describe=False))
    web.start_in_thread(server)
    connection = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=30)
    try:
        for _ in range(3):  # the same connection throughout
            connection.request("GET", "/-/healthy")
            response = connection.getresponse()
            assert response.status == 200 and response.read() == b"Healthy.\n"
        assert connection.sock is not None
        ours = _server_side(connection.sock)
        with ours:
            assert ours.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    finally:
        connection.close()
        server.shutdown()


# -- pages beside scrapes --------------------------------------------------------------------------------------
class _HeldPage:
    """A page whose render waits until released, and what it saw: whether a scrape was in flight then."""

    def __init__(self, scrape: _BlockingCollector | None = None) -> None:
        self.release = threading.Event()
        self.entered = threading.Semaphore(0)
        self.scrape = scrape
        self.during_scrape: list[bool] = []
        self.renders = 0

    def __call__(self) -> tuple[bytes, str, str]:
        self.renders += 1
        if self.scrape is not None:
            self.during_scrape.append(not self.scrape.release.is_set())
        self.entered.release()
        self.release.wait(60)
        return b"<p>a page</p>" * 100, "text/html; charset=utf-8", 'W/"1-0.000"'


def _page_server(page: _HeldPage, registry: object = None, max_requests: int = 2):  # type: ignore[no-untyped-def]
    from prometheus_client import CollectorRegistry

    from bottleneck_exporter.web.server import serve, start_in_thread

    server = serve(f"127.0.0.1:{free_port()}", registry or CollectorRegistry(auto_describe=False),  # type: ignore[arg-type]
                   max_requests=max_requests, pages={"/": page, "/status.json": page})
    start_in_thread(server)
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def test_pages_being_rendered_neither_hold_a_scrape_nor_take_its_places() -> None:
    """Regression: pages ran in the four scrape threads and counted against --web.max-requests, so clients
    asking for the status page at the push bounds held /metrics for seconds, and 60 of them got it 503s."""
    from concurrent.futures import ThreadPoolExecutor

    from bottleneck_exporter.web.server import MAX_PAGE_REQUESTS

    page = _HeldPage()
    server, url = _page_server(page, max_requests=2)
    try:
        with ThreadPoolExecutor(MAX_PAGE_REQUESTS + 4) as pool:
            pages = [pool.submit(requests.get, url + "/", timeout=60) for _ in range(MAX_PAGE_REQUESTS + 4)]
            assert page.entered.acquire(timeout=30)  # a page is being rendered, and more wait for it
            for _ in range(3):
                scrape = requests.get(url + "/metrics", timeout=30)
                assert scrape.status_code == 200, scrape.text
            page.release.set()
            # Beyond the pages' own bound a request waits for a place: none is refused.
            assert [f.result().status_code for f in pages] == [200] * len(pages)
    finally:
        page.release.set()
        server.shutdown()


def test_a_page_waits_for_the_scrape_in_flight_before_it_renders(monkeypatch) -> None:
    """Both need the interpreter's lock: a page rendered beside a scrape made the scrape wait for it."""
    from concurrent.futures import ThreadPoolExecutor

    from prometheus_client import CollectorRegistry

    import bottleneck_exporter.web.server as web

    monkeypatch.setattr(web, "_PAGE_YIELD_SECONDS", 60.0)
    held = _BlockingCollector()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(held)  # type: ignore[arg-type]
    page = _HeldPage(scrape=held)
    page.release.set()
    server, url = _page_server(page, registry)
    try:
        with ThreadPoolExecutor(2) as pool:
            scrape = pool.submit(requests.get, url + "/metrics", timeout=60)
            assert held.entered.acquire(timeout=30)
            asked = pool.submit(requests.get, url + "/", timeout=60)
            wait_until(lambda: server._pools[web.PAGES].in_flight or page.renders, 30, "the page request to arrive")
            held.release.set()
            assert scrape.result().status_code == 200 and asked.result().status_code == 200
        assert page.during_scrape == [False], "the page was rendered while the scrape was in flight"
    finally:
        held.release.set()
        server.shutdown()


def test_a_page_is_sent_gzipped_when_asked_and_a_client_holding_its_etag_gets_304() -> None:
    page = _HeldPage()
    page.release.set()
    server, url = _page_server(page)
    try:
        plain = requests.get(url + "/", timeout=30, headers={"Accept-Encoding": "identity"})
        assert plain.status_code == 200 and "Content-Encoding" not in plain.headers
        zipped = requests.get(url + "/", timeout=30, headers={"Accept-Encoding": "gzip"})
        assert zipped.headers["Content-Encoding"] == "gzip" and zipped.content == plain.content
        assert int(zipped.headers["Content-Length"]) < len(plain.content) / 10
        etag = plain.headers["ETag"]
        assert zipped.headers["ETag"] == etag and plain.headers["Cache-Control"] == "no-cache"
        again = requests.get(url + "/", timeout=30, headers={"If-None-Match": etag})
        assert again.status_code == 304 and again.content == b""
        other = requests.get(url + "/", timeout=30, headers={"If-None-Match": 'W/"0-0.000"'})
        assert other.status_code == 200 and other.content == plain.content
    finally:
        server.shutdown()


@pytest.mark.live
def test_a_flood_of_page_requests_at_the_push_bounds_never_gets_metrics_a_503(start_exporter, tmp_path: Path) -> None:
    """Regression: at the push bounds (8 jobs x 16 ranks, 4 GPUs) a page cost 70 ms of CPU and pages took the
    scrapes' places: 60 clients asking for / got 4 of 10 Prometheus scrapes a 503, and 30 held most over 1 s."""
    import collections
    from concurrent.futures import ThreadPoolExecutor

    from bottleneck_exporter.push.settings import OPTIONS
    from bottleneck_exporter.wire.encode import encode
    from tests.conftest import FIXTURES
    from tests.datagrams import full_payload

    sock = tmp_path / "push.sock"
    exporter = start_exporter([f"--push.socket={sock}", "--web.max-requests=2",
                               f"--collector.gpu.profile={FIXTURES / 'gpu-profiles' / 'hopper-4x-h100.yaml'}"])
    bounds = {option.name: option.default for option in OPTIONS}
    jobs, ranks = bounds["max-jobs"], bounds["max-ranks-per-job"]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender:
        for job in range(jobs):
            for rank in range(ranks):
                sender.sendto(encode(full_payload(f"job-{job}", rank)), str(sock))
    wait_until(lambda: f"bottleneck_push_jobs {jobs:.1f}" in exporter.scrape(), 30, "every job on /metrics")
    pages: collections.Counter[int] = collections.Counter()
    stop = threading.Event()

    def client() -> None:
        with requests.Session() as session:
            while not stop.is_set():
                pages[session.get(exporter.url + "/", timeout=60).status_code] += 1

    with ThreadPoolExecutor(24) as pool:
        clients = [pool.submit(client) for _ in range(24)]
        try:
            wait_until(lambda: sum(pages.values()) >= 24, 60, "the flood of page requests")
            scrapes = [requests.get(exporter.url + "/metrics", timeout=60,
                                    headers={"Accept-Encoding": "gzip"}).status_code for _ in range(10)]
        finally:
            stop.set()
        for future in clients:
            future.result()
    assert scrapes == [200] * 10, scrapes
    assert set(pages) == {200}, f"page requests beyond their bound wait for a place: {pages}"
