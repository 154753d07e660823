"""The exporter under hostile clients, forged pushes and floods: the probes of issue 12, re-measured.

    .venv/bin/python benchmarks/hostile_clients.py [--probe bounds slow flood forge fuzz pages] [--stalled 300]
        [--clients 30] [--seconds 30]

Each probe starts a real exporter (``python -m bottleneck_exporter``) on a free loopback port, except ``bounds``, and
prints what it measured:

  load    50 keep-alive scrapers for 30 s against every default collector: answers by status (beyond
          --web.max-requests, 40, a scrape is answered 503), latency, open file descriptors before and after.
  bounds  push series, scrape bytes (plain and gzip) and scrape time with the default --push.max-jobs and
          --push.max-ranks-per-job filled by one sender with every optional part (GPU, DataLoader).
  slow    scrape latency (median, max of 20) before and while ``--stalled`` connections have sent half a
          request line (plain HTTP) or never started the TLS handshake, and the exporter's thread count.
  flood   latency of a verified scraper's scrapes while 60 distinct wrong passwords a second arrive from
          another address (127.0.0.2; bcrypt cost 10), for 10 s; how many tries (0.1 s apart) a scraper
          verified for the first time during the flood needs; how the wrong ones were answered.
  addresses  wrong passwords retried without pause from 12 addresses (more than the 8 places of the password
          queue), and ten scrapers never verified arriving from addresses of their own: how many got in at the
          first try, and how long it took; how the wrong ones were answered.
  forge   a second process pushing for a job/rank another process owns; steps_total before and after, and
          bottleneck_push_rejected_total{reason="not_owner"}.
  fuzz    100,000 mutated and random datagrams through the Unix socket; received, counted by reason, and rate.
  pages   the status page at the push bounds (--push.max-jobs x --push.max-ranks-per-job ranks pushing every
          second, 4 GPUs from a recorded profile): what one page costs in CPU (a collection, the verdicts over a
          full ring, the page's data and HTML, its JSON), then --clients clients asking for / without pause for
          --seconds while a Prometheus-style scrape of /metrics comes every second: the scrapes' latency
          (median, max) and status codes before and during, the pages' answers, how many renders they shared
          (distinct ETags) and the exporter's CPU.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import random
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import bcrypt
import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bottleneck_exporter.push.receiver import PushReceiver  # noqa: E402
from bottleneck_exporter.push.settings import OPTIONS  # noqa: E402
from bottleneck_exporter.push.store import JobStore  # noqa: E402
from bottleneck_exporter.wire.encode import encode  # noqa: E402
from tests.conftest import ExporterProcess  # noqa: E402
from tests.datagrams import full_payload, hook_payload  # noqa: E402

BASE = ["--collector.disable-defaults", "--collector.memory", "--collector.cpu"]
GPU_PROFILE = ROOT / "tests" / "fixtures" / "gpu-profiles" / "hopper-4x-h100.yaml"
# What Prometheus sends when it scrapes.
SCRAPE_HEADERS = {"Accept": "application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.4",
                  "Accept-Encoding": "gzip"}


def timed(get: Callable[[], requests.Response], count: int = 20) -> tuple[float, float, int]:
    """(median, max) seconds of ``count`` requests, and how many did not answer 200."""
    seconds, failed = [], 0
    for _ in range(count):
        start = time.perf_counter()
        try:
            failed += get().status_code != 200
        except requests.RequestException:
            failed += 1
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), max(seconds), failed


def threads(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"^Threads:\s+(\d+)", status, re.M).group(1))  # type: ignore[union-attr]


def probe_bounds() -> None:
    defaults = {option.name: option.default for option in OPTIONS}
    rx = PushReceiver(JobStore(defaults["max-jobs"], defaults["max-ranks-per-job"], 600.0))
    for job in range(defaults["max-jobs"] * 2):
        for rank in range(defaults["max-ranks-per-job"] * 2):
            rx.handle(encode(full_payload(f"job-{job}", rank)))
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(rx)
    seconds = []
    for _ in range(5):
        start = time.perf_counter()
        text = generate_latest(registry)
        seconds.append(time.perf_counter() - start)
    import gzip

    series = sum(1 for line in text.decode().splitlines() if line and not line.startswith("#"))
    print(f"bounds: {defaults['max-jobs']} jobs x {defaults['max-ranks-per-job']} ranks = {len(rx.store.ranks())} "
          f"ranks, {series} series, {len(text) / 1e6:.2f} MB ({len(gzip.compress(text, 1)) / 1e6:.2f} MB gzip), "
          f"render {statistics.median(seconds) * 1000:.0f} ms (median of 5)")


def _tls_config(directory: Path) -> Path:
    import trustme

    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.cert_chain_pems[0].write_to_path(str(directory / "server.crt"))
    cert.private_key_pem.write_to_path(str(directory / "server.key"))
    ca.cert_pem.write_to_path(str(directory / "ca.crt"))
    config = directory / "web.yml"
    config.write_text(f"tls_server_config:\n  cert_file: {directory}/server.crt\n  key_file: {directory}/server.key\n")
    return config


def probe_slow(stalled: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for tls in (False, True):
            args = [*BASE, f"--web.config.file={_tls_config(Path(tmp))}"] if tls else BASE
            exporter = ExporterProcess(args)
            url = (exporter.url.replace("http:", "https:") if tls else exporter.url) + "/metrics"
            verify: str | bool = f"{tmp}/ca.crt" if tls else True

            def scrape(url: str = url, verify: str | bool = verify) -> requests.Response:
                return requests.get(url, timeout=30, verify=verify)
            try:
                deadline = time.monotonic() + 30
                while timed(scrape, 1)[2]:
                    assert time.monotonic() < deadline, exporter.output()
                before = timed(scrape)
                idle_threads = threads(exporter.proc.pid)
                socks = []
                for _ in range(stalled):
                    sock = socket.create_connection(("127.0.0.1", exporter.port))
                    if not tls:
                        sock.sendall(b"GET /metr")
                    socks.append(sock)
                during = timed(scrape)
                print(f"slow ({'tls, no handshake' if tls else 'http, half a request line'}): scrape median/max "
                      f"{before[0] * 1000:.0f}/{before[1] * 1000:.0f} ms before, {during[0] * 1000:.0f}/"
                      f"{during[1] * 1000:.0f} ms with {stalled} stalled ({during[2]} failed); threads "
                      f"{idle_threads} -> {threads(exporter.proc.pid)}")
                for sock in socks:
                    sock.close()
            finally:
                exporter.stop()


def _basic_get(port: int, source: str, user: str, password: str) -> int:
    """The status of GET /metrics with these credentials, on a new connection from the local address ``source``
    (an attacker or a scraper elsewhere on the network); 0 when the connection failed."""
    credential = base64.b64encode(f"{user}:{password}".encode()).decode()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30, source_address=(source, 0))
    try:
        connection.request("GET", "/metrics", headers={"Authorization": f"Basic {credential}"})
        return connection.getresponse().status
    except OSError:
        return 0
    finally:
        connection.close()


def probe_flood(rate: float = 60.0, seconds: float = 10.0) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=10)).decode()
        config = Path(tmp) / "web.yml"
        config.write_text(f"basic_auth_users:\n  prometheus: '{hashed}'\n  late: '{hashed}'\n")
        exporter = ExporterProcess([*BASE, f"--web.config.file={config}"])
        url = exporter.url + "/metrics"
        try:
            exporter.wait_ready()
            legit = ("prometheus", "s3cret")
            before = timed(lambda: requests.get(url, timeout=30, auth=legit))
            answers: dict[int, int] = {}
            stop, lock = threading.Event(), threading.Lock()

            def wrong(index: int) -> None:
                # From another address than the scrapers' (127.0.0.2): an attacker elsewhere on the network.
                code = _basic_get(exporter.port, "127.0.0.2", "prometheus", f"guess-{index}")
                with lock:
                    answers[code] = answers.get(code, 0) + 1

            def flood() -> None:
                with ThreadPoolExecutor(32) as pool:
                    index, start = 0, time.monotonic()
                    while not stop.is_set() and time.monotonic() - start < seconds:
                        pool.submit(wrong, index)
                        index += 1
                        time.sleep(max(0.0, start + index / rate - time.monotonic()))

            flooder = threading.Thread(target=flood)
            flooder.start()
            time.sleep(1)
            # One scrape every 0.25 s for as long as the flood lasts.
            during = timed(lambda: (time.sleep(0.25), requests.get(url, timeout=30, auth=legit))[1],
                           int((seconds - 4) / 0.3))
            # A scraper whose password was never checked needs one bcrypt: it waits its turn with the flood.
            tries = 1
            while requests.get(url, timeout=30, auth=("late", "s3cret")).status_code != 200 and tries < 20:
                tries += 1
                time.sleep(0.1)
            stop.set()
            flooder.join()
            print(f"flood ({rate:.0f} wrong passwords/s, bcrypt cost 10): verified scraper median/max "
                  f"{before[0] * 1000:.0f}/{before[1] * 1000:.0f} ms before, {(during[0] - 0.25) * 1000:.0f}/"
                  f"{(during[1] - 0.25) * 1000:.0f} ms during ({during[2]} failed); a scraper first verified during "
                  f"the flood got in at try {tries}; wrong ones answered {answers}")
        finally:
            exporter.stop()


def probe_addresses(addresses: int = 12, newcomers: int = 10) -> None:
    """Wrong passwords retried without pause from more addresses than the password queue holds (8 places), and
    scrapers never verified arriving one by one from addresses of their own (Prometheus after a restart)."""
    with tempfile.TemporaryDirectory() as tmp:
        hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=10)).decode()
        config = Path(tmp) / "web.yml"
        config.write_text("basic_auth_users:\n" + "".join(f"  late{n}: '{hashed}'\n" for n in range(newcomers)))
        exporter = ExporterProcess([*BASE, f"--web.config.file={config}"])
        try:
            exporter.wait_ready()
            answers: dict[int, int] = {}
            stop, lock = threading.Event(), threading.Lock()

            def flood(address: str) -> None:
                index = 0
                while not stop.is_set():
                    index += 1
                    code = _basic_get(exporter.port, address, "late0", f"guess-{address}-{index}")
                    with lock:
                        answers[code] = answers.get(code, 0) + 1

            flooders = [threading.Thread(target=flood, args=(f"127.0.0.{n}",)) for n in range(2, 2 + addresses)]
            for thread in flooders:
                thread.start()
            time.sleep(2)
            first_try, latencies = 0, []
            for n in range(newcomers):
                t0 = time.perf_counter()
                status = _basic_get(exporter.port, f"127.0.1.{n + 1}", f"late{n}", "s3cret")
                latencies.append(time.perf_counter() - t0)
                first_try += status == 200
                time.sleep(0.5)
            stop.set()
            for thread in flooders:
                thread.join()
            print(f"password flood from {addresses} addresses (bcrypt cost 10, retried without pause): "
                  f"{first_try} of {newcomers} scrapers never verified got 200 at the first try, in "
                  f"{statistics.median(latencies) * 1000:.0f} ms (median), {max(latencies) * 1000:.0f} ms (max); "
                  f"wrong ones answered {answers}")
        finally:
            exporter.stop()


_SENDER = """
import json, sys
from bottleneck_exporter.hook.transport import Transport
from bottleneck_exporter.wire.encode import encode
payload = json.loads(sys.argv[2])
for seq in range(int(sys.argv[3])):
    payload["seq"] = seq + 1
    Transport(sys.argv[1]).send(encode(payload))
print("sent", flush=True)
sys.stdin.read()
"""


def _sender(address: str, steps: int, count: int) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", _SENDER, address, json.dumps(hook_payload("victim", steps)),
                             str(count)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "sent"
    return proc


def _sample(text: str, prefix: str) -> str:
    return next((line.rsplit(" ", 1)[1] for line in text.splitlines() if line.startswith(prefix)), "absent")


def probe_forge() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        exporter = ExporterProcess(["--collector.disable-defaults", f"--push.socket={tmp}/push.sock"])
        procs = []
        try:
            exporter.wait_ready()
            procs.append(_sender(f"unix://{tmp}/push.sock", 128, 1))
            time.sleep(0.5)
            steps = 'bottleneck_train_steps_total{rank="0",training_job="victim"}'
            before = _sample(exporter.scrape(), steps)
            procs.append(_sender(f"unix://{tmp}/push.sock", 1, 100))
            time.sleep(0.5)
            text = exporter.scrape()
            not_owner = _sample(text, 'bottleneck_push_rejected_total{reason="not_owner"}')
            print(f"forge: steps_total {before} -> {_sample(text, steps)} after 100 datagrams from another process; "
                  f"not_owner {not_owner}")
        finally:
            for proc in procs:
                proc.kill()
                proc.communicate()
            exporter.stop()


def probe_fuzz(count: int = 100_000) -> None:
    rng = random.Random(12)
    base = encode(full_payload("fuzz", 0))
    with tempfile.TemporaryDirectory() as tmp:
        exporter = ExporterProcess(["--collector.disable-defaults", f"--push.socket={tmp}/push.sock"])
        try:
            exporter.wait_ready()
            sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)  # blocking: every datagram arrives
            start = time.perf_counter()
            for index in range(count):
                if index % 4 == 0:
                    data = rng.randbytes(rng.randrange(1, 9000))
                else:
                    mutable = bytearray(base)
                    for _ in range(rng.randrange(1, 6)):
                        mutable[rng.randrange(len(mutable))] = rng.randrange(256)
                    data = bytes(mutable)
                sender.sendto(data, f"{tmp}/push.sock")
            sent_seconds = time.perf_counter() - start
            deadline = time.monotonic() + 60
            while True:
                text = exporter.scrape()
                received = float(_sample(text, "bottleneck_push_datagrams_total"))
                if received >= count or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            rejected = {m.group(1): float(m.group(2)) for m in
                        re.finditer(r'bottleneck_push_rejected_total\{reason="(\w+)"\} (\S+)', text)}
            accepted = received - sum(rejected.values())
            print(f"fuzz: {count} sent in {sent_seconds:.1f} s ({count / sent_seconds:.0f}/s), {received:.0f} "
                  f"received, {accepted:.0f} accepted, rejected { {k: int(v) for k, v in rejected.items() if v} }; "
                  f"exporter alive: {exporter.proc.poll() is None}")
        finally:
            exporter.stop()


def _bounds_payload(job: str, rank: int, seq: int) -> dict:
    """A full datagram of a rank that has run ``seq`` pushes' worth of steps, sent now."""
    payload = full_payload(job, rank)
    payload.update(seq=seq, time=time.time(), steps=3 * seq, samples=3.0 * seq)
    payload["phase_seconds"] = {phase: 0.01 * seq * (4 if phase == "step" else 1) for phase in payload["phase_seconds"]}
    payload["step_buckets"] = [3 * seq] + [0] * (len(payload["step_buckets"]) - 1)
    return payload


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _page_cost(jobs: int, ranks: int) -> None:
    """One page at the bounds, in this process: the same parts as the exporter's, a full ring."""
    from bottleneck_exporter.cli import build_parser
    from bottleneck_exporter.collectors.orchestrator import Orchestrator
    from bottleneck_exporter.parts import PUSH, build_parts
    from bottleneck_exporter.status import Status, model, page
    from bottleneck_exporter.status.recorder import MAX_SNAPSHOTS
    from bottleneck_exporter.status.verdicts import evaluate
    from bottleneck_exporter.training.registry import TrainingRegistry

    with tempfile.TemporaryDirectory() as tmp:
        args = build_parser().parse_args([f"--push.socket={tmp}/push.sock", f"--collector.gpu.profile={GPU_PROFILE}"])
        parts = build_parts(args, {}, TrainingRegistry(), "")
        status = Status(Orchestrator(parts), parts, listen_address=":0", telemetry_path="/metrics", interval=15.0)
        status.recorder.spacing = 0.0  # a full ring now, rather than after five minutes
        collections = []
        for seq in range(1, MAX_SNAPSHOTS + 1):
            for job in range(jobs):
                for rank in range(ranks):
                    parts[PUSH].handle(encode(_bounds_payload(f"job-{job}", rank, seq)))
            start = time.process_time()
            list(status.recorder.collect())
            collections.append(time.process_time() - start)
        snapshots = status.recorder.snapshots()
        facts = {**status.facts, "ready": True}

        def cost(work: Callable[[], object], count: int = 3) -> float:
            start = time.process_time()
            for _ in range(count):
                work()
            return (time.process_time() - start) / count * 1000

        verdicts = evaluate(snapshots, str(facts["instance"]), status.bundle)
        data = model.build(snapshots, parts, facts, verdicts=verdicts)
        print(f"pages: one page at {jobs} jobs x {ranks} ranks, 4 GPUs, {len(snapshots)} snapshots of "
              f"{len(snapshots[-1].series)} series: a collection {statistics.median(collections) * 1000:.1f} ms CPU, "
              f"the verdicts {cost(lambda: evaluate(snapshots, str(facts['instance']), status.bundle)):.0f} ms, "
              f"the page's data {cost(lambda: model.build(snapshots, parts, facts, verdicts=verdicts)):.1f} ms, "
              f"its HTML {cost(lambda: page.render(data)):.1f} ms, "
              f"its JSON {cost(lambda: json.dumps(data, indent=2)):.1f} ms")
        parts[PUSH].stop()


def probe_pages(clients: int = 30, seconds: float = 30.0) -> None:
    defaults = {option.name: option.default for option in OPTIONS}
    jobs, ranks = defaults["max-jobs"], defaults["max-ranks-per-job"]
    _page_cost(jobs, ranks)
    with tempfile.TemporaryDirectory() as tmp:
        sock_path = f"{tmp}/push.sock"
        exporter = ExporterProcess([f"--push.socket={sock_path}", f"--collector.gpu.profile={GPU_PROFILE}"])
        stop = threading.Event()

        def push() -> None:  # every rank of every job, once a second, as training processes would
            sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            seq = 0
            while not stop.is_set():
                seq += 1
                for job in range(jobs):
                    for rank in range(ranks):
                        sender.sendto(encode(_bounds_payload(f"job-{job}", rank, seq)), sock_path)
                stop.wait(1.0)
            sender.close()

        pusher = threading.Thread(target=push)
        try:
            exporter.wait_ready()
            pusher.start()
            deadline = time.monotonic() + 30
            while f"bottleneck_push_jobs {jobs:.1f}" not in exporter.scrape():
                assert time.monotonic() < deadline, "the pushed jobs never showed on /metrics"
                time.sleep(0.2)
            scrape_url = exporter.url + "/metrics"

            def scrapes(until: float) -> tuple[list[float], dict[int, int]]:
                """Prometheus-style until ``until`` (monotonic): one kept-alive connection, one scrape a second,
                a 10 s timeout."""
                latencies: list[float] = []
                codes: dict[int, int] = {}
                with requests.Session() as session:
                    while time.monotonic() < until:
                        start = time.perf_counter()
                        try:
                            code = session.get(scrape_url, headers=SCRAPE_HEADERS, timeout=10).status_code
                        except requests.RequestException:
                            code = 0
                        latencies.append(time.perf_counter() - start)
                        codes[code] = codes.get(code, 0) + 1
                        time.sleep(max(0.0, 1.0 - latencies[-1]))
                return latencies, codes

            quiet, quiet_codes = scrapes(time.monotonic() + 5)
            answers: dict[int, int] = {}
            page_latencies: list[float] = []
            etags: set[str] = set()
            lock = threading.Lock()
            flood_end = time.monotonic() + seconds

            def client() -> None:
                with requests.Session() as session:
                    while time.monotonic() < flood_end:
                        start = time.perf_counter()
                        try:
                            response = session.get(exporter.url + "/", timeout=30)
                            code, etag = response.status_code, response.headers.get("ETag")
                        except requests.RequestException:
                            code, etag = 0, None
                        with lock:
                            answers[code] = answers.get(code, 0) + 1
                            page_latencies.append(time.perf_counter() - start)
                            if etag:
                                etags.add(etag)

            cpu_before = _cpu_seconds(exporter.proc.pid)
            with ThreadPoolExecutor(clients) as pool:
                for _ in range(clients):
                    pool.submit(client)
                time.sleep(0.5)
                during, during_codes = scrapes(flood_end - 0.5)
            cpu = _cpu_seconds(exporter.proc.pid) - cpu_before
            renders = f"{len(etags)} renders (distinct ETags)" if etags else \
                f"no ETag: each of the {answers.get(200, 0)} pages rendered"
            print(f"pages: {clients} clients asking for / for {seconds:.0f} s: {sum(answers.values())} pages "
                  f"{answers}, median {statistics.median(page_latencies) * 1000:.0f} ms, {renders}; exporter CPU "
                  f"{cpu:.1f} s ({cpu / seconds:.0%} of a core)")
            print(f"pages: /metrics every second: quiet median/max {statistics.median(quiet) * 1000:.0f}/"
                  f"{max(quiet) * 1000:.0f} ms {quiet_codes}; during the flood {statistics.median(during) * 1000:.0f}/"
                  f"{max(during) * 1000:.0f} ms {during_codes}, {sum(1 for s in during if s > 1)} of {len(during)} "
                  f"over a second")
        finally:
            stop.set()
            if pusher.is_alive():
                pusher.join()
            exporter.stop()


def probe_load(scrapers: int = 50, seconds: float = 30.0) -> None:
    exporter = ExporterProcess(["--push.disable"])  # every default collector
    try:
        exporter.wait_ready()
        fds = len(os.listdir(f"/proc/{exporter.proc.pid}/fd"))
        codes: dict[int, int] = {}
        latencies: list[float] = []
        lock = threading.Lock()
        deadline = time.monotonic() + seconds

        def scraper() -> None:
            with requests.Session() as session:  # keep-alive, as Prometheus scrapes
                while time.monotonic() < deadline:
                    start = time.perf_counter()
                    try:
                        code = session.get(exporter.url + "/metrics", timeout=30).status_code
                    except requests.RequestException:
                        code = 0
                    with lock:
                        codes[code] = codes.get(code, 0) + 1
                        latencies.append(time.perf_counter() - start)

        with ThreadPoolExecutor(scrapers) as pool:
            for _ in range(scrapers):
                pool.submit(scraper)
        after = len(os.listdir(f"/proc/{exporter.proc.pid}/fd"))
        latencies.sort()
        p99 = latencies[int(len(latencies) * 0.99)]
        print(f"load: {scrapers} keep-alive scrapers for {seconds:.0f} s: {sum(codes.values())} scrapes {codes}, "
              f"median {statistics.median(latencies) * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms; open fds {fds} before, "
              f"{after} after; threads {threads(exporter.proc.pid)}")
    finally:
        exporter.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    probes = ["bounds", "load", "slow", "flood", "addresses", "forge", "fuzz", "pages"]
    parser.add_argument("--probe", nargs="+", default=probes, choices=probes)
    parser.add_argument("--stalled", type=int, default=300)
    parser.add_argument("--clients", type=int, default=30, help="pages: clients asking for / (default: 30)")
    parser.add_argument("--seconds", type=float, default=30.0, help="pages: how long they ask (default: 30)")
    args = parser.parse_args()
    for probe in args.probe:
        if probe == "slow":
            probe_slow(args.stalled)
        elif probe == "pages":
            probe_pages(args.clients, args.seconds)
        else:
            {"bounds": probe_bounds, "load": probe_load, "flood": probe_flood, "addresses": probe_addresses,
             "forge": probe_forge, "fuzz": probe_fuzz}[probe]()


if __name__ == "__main__":
    main()
