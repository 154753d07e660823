"""``bottleneck-exporter diagnose``: the catalogue's verdicts, with evidence and advice, in a terminal.

Two ways to get the data, one set of rules (exporter/heuristics/catalogue.py):

* ``--prometheus.url URL``: runs every alert expression as an instant query against a Prometheus that
  scrapes the exporters (recording rules spelled out, so our rule files need not be installed; ``for:`` is
  ignored, the ALERTS series tells which verdicts are already firing).
* standalone (no Prometheus): samples this node for ``--window`` seconds (a running exporter found at
  ``--exporter.url``, else the collectors and the push receiver in this process, so a training run instrumented with the
  hook is seen; and node_exporter and dcgm-exporter where ``--node-exporter.url`` and ``--dcgm-exporter.url`` say they
  are, labelled as Prometheus labels them: ``bottleneck_exporter.peers``), then evaluates the expressions of the bundle
  those exporters feed (``--bundle`` picks another) over the samples with the Python evaluator
  (exporter/heuristics/promql.py), rate windows being the sampled window. ``for:`` is respected as far as the window
  allows: the expressions are evaluated at every sample, and a verdict whose condition has not held for its ``for:`` is
  shown as pending, with the time it still needs.

Exit status: 0 no critical verdict, 1 at least one critical verdict, 2 usage or configuration error,
3 Prometheus or the exporter could not be reached (or every query failed), 4 internal error (a bug).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import socket
import sys
import textwrap
import time
import traceback
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TextIO

from bottleneck_exporter.config import Parser
from bottleneck_exporter.heuristics import gotemplate
from bottleneck_exporter.heuristics.catalogue import AlertRule, Catalogue, resolve
from bottleneck_exporter.heuristics.model import SEVERITIES, CatalogueError
from bottleneck_exporter.heuristics.parameters import parse_sets
from bottleneck_exporter.heuristics.promql import PromQLError, SeriesStore, evaluate, parse, parse_duration
from bottleneck_exporter.heuristics.sources import (
    BUNDLES,
    DCGM,
    DCGM_TWINS,
    DEFAULT_BUNDLE,
    NODE_EXPORTER,
    NODE_EXPORTER_TWINS,
)
from bottleneck_exporter.peers import (
    DEFAULT_URLS,
    PEER_NAMES,
    Peer,
    PeerError,
    Points,
    bundle_for,
    check_bundle,
    peer,
    scrape,
    unjudged,
)
from bottleneck_exporter.push.schema import JOB_LABEL

EXIT_OK, EXIT_CRITICAL, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_INTERNAL = 0, 1, 2, 3, 4
DEFAULT_EXPORTER_URL = "http://127.0.0.1:9847/metrics"
SEVERITY_RANK = {severity: rank for rank, severity in enumerate(SEVERITIES)}
PEER_TIMEOUT = 5.0  # seconds for one scrape of node_exporter or dcgm-exporter
# What each family tells (ours, or its twin from node_exporter or dcgm-exporter); shown when none of them is
# there, because the rules that need it cannot fire then.
DATA_HINTS = (
    (("bottleneck_train_steps_total",), "training telemetry: no process instrumented with the hook pushed to "
                                        "the exporter (docs/hook.md)"),
    (("bottleneck_gpu_up", DCGM_TWINS["bottleneck_gpu_utilization_ratio"][0].series),
     "GPU metrics: no NVML GPU (or the gpu collector is off), no dcgm-exporter series"),
    (("bottleneck_training_process_info",), "training processes: none found on the node(s)"),
    (("bottleneck_cpu_seconds_total", NODE_EXPORTER_TWINS["bottleneck_cpu_seconds_total"][0].series),
     "host CPU metrics: the cpu collector is off and no node_exporter series (beside node_exporter: "
     "--node-exporter.url, docs/coexistence.md)"),
)


class Unreachable(Exception):
    """Prometheus or the exporter did not answer."""


@dataclasses.dataclass
class Finding:
    rule: AlertRule
    labels: dict[str, str]
    value: float
    state: str | None = None  # firing / pending (Prometheus' ALERTS, or standalone from the samples)
    needs_seconds: float | None = None  # standalone, pending: how much longer the condition must hold

    @property
    def evidence(self) -> str:
        return gotemplate.render(self.rule.description, self.labels, self.value)

    @property
    def subject(self) -> str:
        """Where the verdict belongs: a training job for per-rank and per-job verdicts, the scrape job for a
        verdict about it as a whole (no exporter scraped), else a node."""
        scope = self.rule.heuristic.scope
        if JOB_LABEL in scope:
            return f"job {self.labels.get(JOB_LABEL, '?')}"
        if "job" in scope and "instance" not in scope:
            return f"scrape job {self.labels.get('job', '?')}"
        return f"node {self.labels.get('instance', '?')}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "alert": self.rule.alert, "heuristic": self.rule.heuristic.name, "verdict": self.rule.heuristic.verdict,
            "severity": self.rule.severity, "subject": self.subject, "labels": self.labels,
            "value": None if math.isnan(self.value) else self.value, "unit": self.rule.heuristic.unit,
            "evidence": self.evidence, "advice": self.rule.advice, "runbook_url": self.rule.runbook_url,
            "state": self.state, "needs_seconds": self.needs_seconds,
        }


@dataclasses.dataclass
class Report:
    source: str  # prometheus | exporter | in-process
    target: str
    evaluated_at: float
    rules: int
    findings: list[Finding]
    errors: list[tuple[str, str]]  # (alert, message)
    missing: list[str]
    window_seconds: float | None = None
    bundle: str = DEFAULT_BUNDLE
    # What was sampled (standalone): name, url, job, scrapes, failed, error (the first failure's), alerts it
    # left unjudged when it never answered.
    sources: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    @property
    def critical(self) -> bool:
        """A critical verdict that fires (or whose state is unknown): a pending one has not held its for: yet."""
        return any(f.rule.severity == "critical" and f.state != "pending" for f in self.findings)


def _sorted(findings: Iterable[Finding]) -> list[Finding]:
    """Ordered by subject and severity; a warning whose critical twin holds is left out, as Alertmanager's
    inhibition (alerts/alertmanager.yml) leaves it out."""
    findings = list(findings)
    critical = {(f.rule.alert, tuple(sorted(f.labels.items()))) for f in findings if f.rule.severity == "critical"}
    findings = [f for f in findings
                if f.rule.severity != "warning" or (f.rule.alert, tuple(sorted(f.labels.items()))) not in critical]
    return sorted(findings, key=lambda f: (f.subject, SEVERITY_RANK[f.rule.severity], f.rule.alert,
                                           sorted(f.labels.items())))


# ---------------------------------------------------------------------------------------------- Prometheus


class PrometheusClient:
    def __init__(self, url: str, timeout: float) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout

    def query(self, expr: str) -> list[dict[str, Any]]:
        """Instant query; raises Unreachable when Prometheus does not answer, PromQLError for a bad query."""
        params = urllib.parse.urlencode({"query": expr})
        request = urllib.request.Request(f"{self.url}/api/v1/query", data=params.encode(),
                                         headers={"Content-Type": "application/x-www-form-urlencoded"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                body = json.load(response)
        except urllib.error.HTTPError as err:
            try:
                body = json.load(err)
            except (ValueError, OSError):
                raise Unreachable(f"{self.url}: HTTP {err.code} {err.reason}") from None
            if err.code >= 500 and body.get("errorType") not in ("execution", "timeout"):
                raise Unreachable(f"{self.url}: HTTP {err.code}: {body.get('error')}") from None
        except (urllib.error.URLError, OSError, ValueError) as err:
            raise Unreachable(f"{self.url}: {getattr(err, 'reason', err)}") from None
        if body.get("status") != "success":
            raise PromQLError(f"{body.get('errorType')}: {body.get('error')}")
        data = body.get("data", {})
        if data.get("resultType") != "vector":
            raise PromQLError(f"expected a vector, got {data.get('resultType')}")
        return list(data.get("result", []))


def _labels(metric: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in metric.items() if k != "__name__"}


def diagnose_prometheus(catalogue: Catalogue, client: PrometheusClient) -> Report:
    findings: list[Finding] = []
    errors: list[tuple[str, str]] = []
    for rule in catalogue.alerts:
        try:
            result = client.query(rule.inline_expr)
        except PromQLError as err:
            errors.append((rule.alert, str(err)))
            continue
        for sample in result:
            findings.append(Finding(rule, _labels(sample["metric"]), float(sample["value"][1])))
    if len(errors) == len(catalogue.alerts):
        raise Unreachable(f"{client.url}: every query failed, first: {errors[0][1]}")
    states: dict[tuple, str] = {}
    try:
        for sample in client.query('ALERTS{alertname=~"Bottleneck.+"}'):
            labels = _labels(sample["metric"])
            state = labels.pop("alertstate", "")
            states[tuple(sorted(labels.items()))] = state
    except PromQLError as err:
        errors.append(("ALERTS", str(err)))
    for finding in findings:
        key = {**finding.labels, "alertname": finding.rule.alert, "severity": finding.rule.severity}
        finding.state = states.get(tuple(sorted(key.items())))
    missing = []
    for families, hint in DATA_HINTS:
        try:
            if not client.query(f'count({{__name__=~"{"|".join(families)}"}})'):
                missing.append(hint)
        except PromQLError:
            pass
    return Report("prometheus", client.url, time.time(), len(catalogue.alerts), _sorted(findings), errors, missing,
                  bundle=catalogue.bundle)


# ---------------------------------------------------------------------------------------------- standalone

Sample = tuple[str, dict[str, str], float]


class ScrapeSource:
    """Samples a running exporter over HTTP (it owns the push socket, so it sees the training runs)."""

    def __init__(self, url: str, timeout: float = 10.0) -> None:
        self.url = url if urllib.parse.urlparse(url).path not in ("", "/") else url.rstrip("/") + "/metrics"
        self.timeout = timeout

    def describe(self) -> str:
        return f"the exporter at {self.url}"

    def start(self) -> None:
        self.samples()

    def stop(self) -> None:
        pass

    def samples(self) -> list[Sample]:
        from prometheus_client.parser import text_string_to_metric_families

        try:
            with urllib.request.urlopen(self.url, timeout=self.timeout) as response:
                text = response.read().decode("utf-8", errors="replace")
        except (urllib.error.URLError, OSError) as err:
            raise Unreachable(f"{self.url}: {getattr(err, 'reason', err)}") from None
        return [(s.name, dict(s.labels), float(s.value))
                for family in text_string_to_metric_families(text) for s in family.samples]


class InProcessSource:
    """The collectors and the push receiver, run inside this process (no exporter running on the node)."""

    def __init__(self, exporter_args: Sequence[str]) -> None:
        from prometheus_client import CollectorRegistry

        from bottleneck_exporter.collectors.orchestrator import Orchestrator
        from bottleneck_exporter.config import load_yaml
        from bottleneck_exporter.parts import build_parts
        from bottleneck_exporter.training.registry import TrainingRegistry

        args = exporter_parser().parse_args(list(exporter_args))
        file_config = load_yaml(args.config_file) if args.config_file else {}
        self.parts = build_parts(args, file_config, TrainingRegistry(), args.config_file or "")
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(Orchestrator(self.parts))

    def describe(self) -> str:
        return "this node (collectors and push receiver in this process)"

    def start(self) -> None:
        from bottleneck_exporter.parts import start

        start(self.parts)

    def stop(self) -> None:
        from bottleneck_exporter.parts import stop

        stop(self.parts)

    def samples(self) -> list[Sample]:
        return [(s.name, dict(s.labels), float(s.value)) for family in self.registry.collect() for s in family.samples]


@dataclasses.dataclass
class Sampled:
    """One exporter's record over the window: how many scrapes, how many failed, the first failure."""

    name: str
    url: str
    job: str
    scrapes: int = 0
    failed: int = 0
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def sample(source: ScrapeSource | InProcessSource, window: float, interval: float, instance: str,
           progress: Callable[[float, float], None], scrape_job: str, peers: Sequence[Peer] = (),
           clock: Callable[[], float] = time.time,
           sleep: Callable[[float], None] = time.sleep) -> tuple[SeriesStore, float, float, list[Sampled]]:
    """Sample ``source`` (and ``peers``) every ``interval`` seconds for ``window`` seconds; returns (store,
    first, last, what each exporter answered).

    The samples are labelled as a Prometheus scrape labels them (``bottleneck_exporter.peers``): ``source`` in the
    ``scrape_job``, each peer in its own job, all with ``instance``, and each scrape records its ``up``. The
    rules about the monitoring itself (exporter down or absent) then read what they would read in Prometheus.
    A peer that does not answer costs its own series (``up`` 0), never the others'."""
    points = Points(instance)
    record = [Sampled("bottleneck-exporter", getattr(source, "url", "in-process"), scrape_job),
              *(Sampled(p.name, p.url, p.job) for p in peers)]
    first = last = clock()
    end = first + window
    while True:
        now = clock()
        points.add(now, scrape_job, source.samples())
        record[0].scrapes += 1
        for target, sampled in zip(peers, record[1:], strict=True):
            sampled.scrapes += 1
            try:
                points.add(now, target.job, scrape(target, PEER_TIMEOUT))
            except PeerError as error:
                sampled.failed += 1
                sampled.error = sampled.error or str(error)
                points.add(now, target.job, (), up=False)
        last = now
        progress(now - first, window)
        if now >= end:
            break
        sleep(max(0.0, min(interval, end - clock())))
    return points.store(), first, last, record


def diagnose_store(catalogue: Catalogue, store: SeriesStore, at: float) -> tuple[list[Finding], list[tuple[str, str]]]:
    """Evaluate every alert expression of ``catalogue`` over ``store`` at ``at`` (the Python evaluator)."""
    findings: list[Finding] = []
    errors: list[tuple[str, str]] = []
    for rule in catalogue.alerts:
        try:
            result = evaluate(parse(rule.inline_expr), store, at)
        except PromQLError as err:
            errors.append((rule.alert, str(err)))
            continue
        if isinstance(result, float):
            errors.append((rule.alert, "expression returned a scalar"))
            continue
        findings.extend(Finding(rule, _labels(s.labels), s.value) for s in result)
    return _sorted(findings), errors


def hold_states(catalogue: Catalogue, store: SeriesStore, times: Sequence[float], findings: list[Finding]) -> None:
    """Set each finding's state as Prometheus' ``for:`` would, evaluating at every sample time: firing when its
    condition held at every sample for at least its ``for:``, else pending with the seconds it still needs."""
    if not times:
        return
    active: dict[tuple[str, str], list[set[tuple[tuple[str, str], ...]]]] = {}
    parsed = {(rule.alert, rule.severity): parse(rule.inline_expr) for rule in catalogue.alerts}
    for at in times:
        for key, node in parsed.items():
            try:
                result = evaluate(node, store, at)
            except PromQLError:
                result = []
            held = {tuple(sorted(_labels(s.labels).items())) for s in result} if isinstance(result, list) else set()
            active.setdefault(key, []).append(held)
    for finding in findings:
        key = (finding.rule.alert, finding.rule.severity)
        labels = tuple(sorted(finding.labels.items()))
        since = times[-1]
        for at, held in zip(reversed(times), reversed(active.get(key, [])), strict=False):
            if labels not in held:
                break
            since = at
        missing = parse_duration(finding.rule.for_) - (times[-1] - since)
        finding.state = "firing" if missing <= 0 else "pending"
        finding.needs_seconds = None if missing <= 0 else missing


def sample_times(store: SeriesStore, job: str) -> list[float]:
    """When the samples were taken: the times of the ``up`` series ``sample`` records for ``job``."""
    for labels, times, _ in store.series():
        if labels.get("__name__") == "up" and labels.get("job") == job:
            return list(times)
    return []


def missing_in(store: SeriesStore) -> list[str]:
    names = {labels["__name__"] for labels, _, _ in store.series()}
    return [hint for families, hint in DATA_HINTS if not names.intersection(families)]


# ---------------------------------------------------------------------------------------------- output


def render_text(report: Report, min_severity: str = "info", width: int = 100) -> str:
    shown = [f for f in report.findings if SEVERITY_RANK[f.rule.severity] <= SEVERITY_RANK[min_severity]]
    where = f"{report.source} {report.target}"
    if report.window_seconds is not None:
        where += f", {report.window_seconds:.0f}s sampled"
    lines = [f"bottleneck-exporter diagnose: {len(shown)} verdict(s) from {where}; "
             f"{report.rules} rules evaluated, bundle {report.bundle}"]
    for source in report.sources:
        answered = f"{source['scrapes'] - source['failed']}/{source['scrapes']} scrapes answered"
        lines.append(f"  {source['name']} ({source['url']}, job {source['job']}): {answered}")
    if not shown:
        lines.append("No bottleneck found: no rule's condition holds.")
    subject = None
    indent = " " * 12
    for finding in shown:
        if finding.subject != subject:
            subject = finding.subject
            lines += ["", subject]
        state = f"  [{finding.state}]" if finding.state else ""
        if finding.needs_seconds is not None:
            state = (f"  [pending: holds {finding.rule.for_} before it fires, needs "
                     f"{gotemplate.humanize_duration(finding.needs_seconds)} more; sample longer with --window]")
        lines.append(f"  {finding.rule.severity.upper():<9} {finding.rule.heuristic.verdict}  "
                     f"({finding.rule.alert}){state}")
        for label, text in (("evidence", finding.evidence), ("advice", finding.rule.advice),
                            ("runbook", finding.rule.runbook_url)):
            wrapped = textwrap.wrap(text, width=width - len(indent) - 10, break_on_hyphens=False,
                                    break_long_words=False) or [""]
            lines.append(f"{indent}{label + ':':<10}{wrapped[0]}")
            lines += [f"{indent}{'':<10}{rest}" for rest in wrapped[1:]]
    if report.missing:
        lines += ["", "No data for (rules that need it cannot fire):"] + [f"  - {m}" for m in report.missing]
    for source in report.sources:
        if source["error"]:
            lines += ["", f"{source['name']} did not answer {source['failed']} of {source['scrapes']} scrapes "
                      f"(first: {source['error']})"
                      + (f"; judged without its series: {', '.join(source['unjudged'])}" if source["unjudged"]
                         else "")]
    if report.errors:
        lines += ["", "Could not evaluate:"] + [f"  - {alert}: {message}" for alert, message in report.errors]
    return "\n".join(lines) + "\n"


def render_json(report: Report, min_severity: str = "info") -> str:
    shown = [f for f in report.findings if SEVERITY_RANK[f.rule.severity] <= SEVERITY_RANK[min_severity]]
    return json.dumps({
        "source": report.source, "target": report.target, "bundle": report.bundle, "sources": report.sources,
        "evaluated_at": report.evaluated_at,
        "window_seconds": report.window_seconds, "rules_evaluated": report.rules,
        "critical": report.critical, "verdicts": [f.as_dict() for f in shown],
        "missing": report.missing, "errors": [{"alert": a, "error": e} for a, e in report.errors],
    }, indent=2) + "\n"


# ---------------------------------------------------------------------------------------------- command line


_EXAMPLES = """\
examples:
  bottleneck-exporter diagnose --prometheus.url=http://prometheus:9090
  bottleneck-exporter diagnose --window=60          # this node: the running exporter, else in-process
  bottleneck-exporter diagnose --severity=critical --json
  bottleneck-exporter diagnose --set data_wait_ratio=0.3 --window=30 --no-collector.gpu
  bottleneck-exporter diagnose --node-exporter.url=http://localhost:9100/metrics   # bundle node-exporter
  bottleneck-exporter diagnose --node-exporter.url=http://localhost:9100/metrics \\
      --dcgm-exporter.url=http://localhost:9400/metrics                          # bundle node-exporter-dcgm

Standalone without a running exporter, the exporter's own flags (--path.procfs, --no-collector.gpu,
--push.socket, ...; see bottleneck-exporter --help) configure the collectors sampled in this process.

exit status: 0 no critical verdict, 1 a critical verdict, 2 usage error, 3 Prometheus or the exporter
unreachable, 4 internal error."""


def build_parser() -> Parser:
    parser = Parser(
        prog="bottleneck-exporter diagnose",
        description="Print bottleneck verdicts with their evidence and advice, per node and training job.",
        epilog=_EXAMPLES,
    )
    add = parser.add_argument
    add("--prometheus.url", dest="prometheus_url", metavar="URL",
        help="evaluate the rules with this Prometheus (e.g. http://prometheus:9090)")
    add("--bundle", choices=list(BUNDLES), default=None,
        help="the rule bundle matching the exporters, e.g. node-exporter where node_exporter provides the host "
        "series (default: with --prometheus.url bottleneck; standalone, the bundle the exporters given feed: "
        "bottleneck, node-exporter with --node-exporter.url, node-exporter-dcgm with both; docs/runbook.md#bundles)")
    add("--prometheus.timeout", dest="timeout", type=float, default=30.0, metavar="SECONDS",
        help="per-query timeout (default: 30)")
    add("--exporter.url", dest="exporter_url", metavar="URL",
        help=f"standalone: sample this running exporter (default: {DEFAULT_EXPORTER_URL} when it answers, "
        "else the collectors and push receiver in this process)")
    for source in PEER_NAMES:
        flag = PEER_NAMES[source].replace("_", "-")
        add(f"--{flag}.url", dest=f"{flag.replace('-', '_')}_url", metavar="URL",
            help=f"standalone: also sample {PEER_NAMES[source]} here, e.g. {DEFAULT_URLS[source]}")
    add("--window", type=float, default=60.0, metavar="SECONDS",
        help="standalone: how long to sample (default: 60)")
    add("--interval", type=float, default=5.0, metavar="SECONDS",
        help="standalone: seconds between samples (default: 5)")
    add("--set", dest="sets", action="append", default=[], metavar="NAME=VALUE",
        help="override a rule parameter, e.g. --set data_wait_ratio=0.3 (see docs/runbook.md#parameters)")
    add("--severity", choices=list(reversed(SEVERITIES)), default="info",
        help="show verdicts of this severity and above (default: info)")
    add("--json", action="store_true", help="print JSON instead of a table")
    return parser


def exporter_parser() -> Parser:
    """The exporter's part flags, for the collectors and push receiver diagnose runs in-process; a misspelled
    flag is matched against diagnose's own flags as well."""
    from bottleneck_exporter.parts import add_arguments

    parser = Parser(prog="bottleneck-exporter diagnose", add_help=False, suggest=build_parser().flags())
    add_arguments(parser)
    return parser


def _progress(stream: TextIO) -> Callable[[float, float], None]:
    tty = stream.isatty()
    reported = [-1]

    def show(elapsed: float, window: float) -> None:
        done = min(elapsed, window)
        if tty:
            bar = "#" * int(30 * done / window) if window else "#" * 30
            stream.write(f"\rsampling [{bar:<30}] {done:4.0f}/{window:.0f}s")
            if done >= window:
                stream.write("\n")
        elif int(done // 10) != reported[0] or done >= window:
            reported[0] = int(done // 10)
            stream.write(f"sampling {done:.0f}/{window:.0f}s\n")
        stream.flush()

    return show


def _exporter_answers(url: str) -> bool:
    base = url.rsplit("/metrics", 1)[0] if url.endswith("/metrics") else url.rstrip("/")
    try:
        with urllib.request.urlopen(f"{base}/-/healthy", timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def main(argv: Sequence[str] | None = None, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    err = stderr or sys.stderr
    try:
        return _run(argv, stdout or sys.stdout, err)
    except Exception:
        # An uncaught exception would exit 1, which scripts read as "a critical verdict was found".
        traceback.print_exc(file=err)
        print("bottleneck-exporter diagnose: internal error (a bug; the traceback above says where)", file=err)
        return EXIT_INTERNAL


def _run(argv: Sequence[str] | None, out: TextIO, err: TextIO) -> int:
    parser = build_parser()
    try:
        args, rest = parser.parse_known_args(list(sys.argv[1:] if argv is None else argv))
        if args.prometheus_url is None and rest:
            exporter_parser().parse_args(rest)  # a misspelled flag stops here, before any sampling
    except SystemExit as exit_:
        return int(exit_.code or 0)
    try:
        if args.window <= 0 or args.interval <= 0:
            raise CatalogueError("--window and --interval must be positive")
        overrides: dict[str, object] = dict(parse_sets(args.sets))
        if args.prometheus_url and rest:
            raise CatalogueError(f"unknown arguments with --prometheus.url: {' '.join(rest)}")
        peers = _peers(args)
        if args.prometheus_url and peers:
            raise CatalogueError("--node-exporter.url and --dcgm-exporter.url are for standalone diagnose; with "
                                 "--prometheus.url, Prometheus scrapes them (pick their bundle with --bundle)")
        if args.prometheus_url:
            args.bundle = args.bundle or DEFAULT_BUNDLE
        else:
            args.bundle = args.bundle or bundle_for(p.source for p in peers)
            check_bundle(args.bundle, (p.source for p in peers))
        catalogue = resolve(overrides, bundle=args.bundle)
    except (CatalogueError, ValueError) as error:
        print(f"bottleneck-exporter diagnose: error: {error}", file=err)
        return EXIT_USAGE
    try:
        if args.prometheus_url:
            report = diagnose_prometheus(catalogue, PrometheusClient(args.prometheus_url, args.timeout))
        else:
            report = _standalone(args, rest, overrides, peers, err)
    except Unreachable as error:
        print(f"bottleneck-exporter diagnose: cannot reach {error}", file=err)
        return EXIT_UNREACHABLE
    except (CatalogueError, ValueError) as error:
        print(f"bottleneck-exporter diagnose: error: {error}", file=err)
        return EXIT_USAGE
    out.write(render_json(report, args.severity) if args.json else render_text(report, args.severity))
    out.flush()
    return EXIT_CRITICAL if report.critical else EXIT_OK


def _peers(args: argparse.Namespace) -> list[Peer]:
    """The peers given by flag; raises ValueError for a URL that is not http(s)."""
    urls = {NODE_EXPORTER: args.node_exporter_url, DCGM: args.dcgm_exporter_url}
    return [peer(source, url) for source, url in urls.items() if url]


def _standalone(args: argparse.Namespace, rest: list[str], overrides: dict[str, object], peers: list[Peer],
                err: TextIO) -> Report:
    from bottleneck_exporter.config import ConfigError

    source: ScrapeSource | InProcessSource
    if args.exporter_url:
        source = ScrapeSource(args.exporter_url)
    elif not rest and _exporter_answers(DEFAULT_EXPORTER_URL):
        source = ScrapeSource(DEFAULT_EXPORTER_URL)
    else:
        try:
            source = InProcessSource(rest)
        except SystemExit:  # argparse already said which of the exporter's flags is wrong
            raise CatalogueError(f"bad exporter flags: {' '.join(rest)}") from None
        except ConfigError as error:
            raise CatalogueError(str(error)) from None
    described = ", ".join([source.describe(), *(p.describe() for p in peers)])
    err.write(f"sampling {described} for {args.window:.0f}s, every {args.interval:g}s (bundle {args.bundle})\n")
    for given in peers:
        try:
            scrape(given, PEER_TIMEOUT)
        except PeerError as error:  # said now, and in the report: the rest is still worth sampling
            err.write(f"warning: {error}; the verdicts that read it cannot be judged\n")
    scrape_job = str(resolve(overrides).parameters["exporter_job"])
    source.start()
    try:
        # A first scrape primes collectors whose ratios are "since the previous scrape".
        store, first, last, sampled = sample(source, args.window, args.interval, socket.gethostname(),
                                             _progress(err), scrape_job, peers)
    finally:
        source.stop()
    window = max(1, math.ceil(last - first) + 1)
    catalogue = resolve({**overrides, "rate_window": f"{window}s"}, bundle=args.bundle)
    findings, errors = diagnose_store(catalogue, store, last)
    hold_states(catalogue, store, sample_times(store, scrape_job), findings)
    kind = "exporter" if isinstance(source, ScrapeSource) else "in-process"
    target = source.url if isinstance(source, ScrapeSource) else socket.gethostname()
    # A peer that never answered leaves the verdicts that read it unjudged: named, not silently absent.
    sources = [{**sampled[0].as_dict(), "unjudged": []}] + [
        {**s.as_dict(), "unjudged": unjudged(catalogue, [p.source]) if s.failed == s.scrapes else []}
        for p, s in zip(peers, sampled[1:], strict=True)]
    return Report(kind, target, last, len(catalogue.alerts), findings, errors, missing_in(store), last - first,
                  args.bundle, sources)


if __name__ == "__main__":
    sys.exit(main())
