"""``bottleneck-exporter run [FLAGS] -- COMMAND [ARGS...]``: runs a training command unchanged and reports what
holds it back (docs/run.md).

In this one process: the collectors and the push receiver (``verdicts.standalone``, on a private socket in a
fresh directory of mode 0700), the sampler, and the command as a child (``run.child``) whose Python interpreters
load the automatic instrumentation (``run.autoload``, ``hook.auto``). While the command runs, a status line on a
terminal (``run.statusline``); once it has exited, the report ``diagnose`` prints, on stderr (``--report=FILE``:
the same as JSON, with a ``run`` object added), and what the instrumentation could not see (``run.coverage``)::

    bottleneck-exporter diagnose: 1 verdict(s) from in-process node-1, 58s sampled; 30 rules evaluated, ...
    job train
      WARNING   input-bound (data loading)  (BottleneckInputBound)  [pending: ...]
    bottleneck-exporter run: python train.py exited with status 0 after 1m2s

Exit status: the command's (128 + N when signal N killed it), 127 for a command not found, 126 for one that
cannot be executed, 2 for a usage error of ``run``'s own (the command is not started then).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shlex
import shutil
import signal
import socket
import sys
import tempfile
import textwrap
import time
import traceback
from collections.abc import Sequence
from typing import TextIO

from bottleneck_exporter.config import Parser
from bottleneck_exporter.heuristics import BUNDLES, SEVERITIES, CatalogueError, parse_sets, resolve
from bottleneck_exporter.options import argument_type, format_duration, positive_duration
from bottleneck_exporter.parts import PUSH, add_arguments
from bottleneck_exporter.run import autoload, coverage
from bottleneck_exporter.run.child import Child, CommandError, block_signals, job_of, pending_signal
from bottleneck_exporter.run.child import resolve as resolve_command
from bottleneck_exporter.run.statusline import StatusLine, Watched
from bottleneck_exporter.verdicts import standalone
from bottleneck_exporter.verdicts.evaluation import SEVERITY_RANK, evaluate, exporter_job
from bottleneck_exporter.verdicts.peers import (
    DEFAULT_URLS,
    PEER_NAMES,
    add_url_flags,
    bundle_for,
    check_bundle,
    peers_given,
)
from bottleneck_exporter.verdicts.report import render_json, render_text
from bottleneck_exporter.verdicts.sampling import Sampler
from bottleneck_exporter.wire.schema import sanitize_job

PROG = "bottleneck-exporter run"
DURATION = argument_type(positive_duration())
EXIT_USAGE, EXIT_INTERNAL = 2, 4  # as diagnose's
# A command that fails within this time without a training step measured died at start-up (a typo, a missing
# file, an import error): one line says so, as a report of those seconds would tell nothing. Long enough for a
# script that fails just after importing torch, which alone takes seconds on a loaded machine.
STARTUP_SECONDS = 10.0
# The push options run sets itself: its receiver listens on its own socket, for its own command only.
_OWN_PUSH_FLAGS = {"push_socket": "--push.socket", "push_socket_mode": "--push.socket-mode",
                   "push_socket_group": "--push.socket-group", "push_disable": "--push.disable",
                   "push_listen_udp": "--push.listen-udp"}

_USAGE = "bottleneck-exporter run [FLAGS] -- COMMAND [ARGS...]"
_EXAMPLES = """\
examples:
  bottleneck-exporter run -- python train.py --epochs 3
  bottleneck-exporter run --report=report.json -- torchrun --nproc-per-node=2 train.py
  bottleneck-exporter run --job resnet --interval 5s --no-collector.gpu -- python -m mypkg.train

The exporter's collector flags (--no-collector.gpu, --collector.<name>.<option>, --path.procfs, --config.file;
see bottleneck-exporter --help) configure the collectors sampled in this process.

exit status: the command's (128 + N when signal N killed it); 127 command not found, 126 not executable,
2 a usage error (the command is not started)."""


def build_parser() -> Parser:
    parser = Parser(prog=PROG, usage=_USAGE, epilog=_EXAMPLES,
                    description="Run a training command unchanged, with automatic instrumentation, and report what "
                    "holds it back when it exits.")
    add = parser.add_argument
    add("--report", metavar="FILE", help="also write the report as JSON to FILE (checked before the command starts)")
    add("--job", metavar="NAME", help="the training job's name in the report (default: $BOTTLENECK_JOB, else the "
        "script's name: train for python train.py)")
    add("--interval", type=DURATION, default=2.0, metavar="DURATION",
        help="time between samples, and between redraws of the status line (default: 2s)")
    add("--window", type=DURATION, default=300.0, metavar="DURATION",
        help="the report judges the last DURATION of the run (default: 5m)")
    add("--bundle", choices=list(BUNDLES), default=None,
        help="the rule bundle matching the exporters (default: bottleneck; node-exporter with --node-exporter.url, "
        "node-exporter-dcgm with both; docs/runbook.md#bundles)")
    add_url_flags(parser, lambda source: f"also sample {PEER_NAMES[source]} here, e.g. {DEFAULT_URLS[source]}")
    add("--set", dest="sets", action="append", default=[], metavar="NAME=VALUE",
        help="override a rule parameter, e.g. --set data_wait_ratio=0.3 (see docs/runbook.md#parameters)")
    add("--severity", choices=list(reversed(SEVERITIES)), default="info",
        help="show verdicts of this severity and above (default: info)")
    # The exporter's part flags parse here but are listed by bottleneck-exporter --help (the epilog says so).
    actions, groups = len(parser._actions), len(parser._action_groups)
    add_arguments(parser)
    for action in parser._actions[actions:]:
        action.help = argparse.SUPPRESS
    del parser._action_groups[groups:]
    add("command", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return parser


def main(argv: Sequence[str] | None = None, stderr: TextIO | None = None) -> int:
    # First of all, before any thread exists: no signal meant for the command may end run before it.
    block_signals()
    err = stderr or sys.stderr
    try:
        args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as exit_:
        return int(exit_.code or 0)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    try:
        return Run(args, command, err).run()
    except (CatalogueError, ValueError, OSError) as error:
        print(f"{PROG}: error: {error}", file=err)
        return EXIT_USAGE
    except CommandError as error:
        print(f"{PROG}: error: {error}", file=err)
        return error.status
    except Exception:
        traceback.print_exc(file=err)
        print(f"{PROG}: internal error (a bug; the traceback above says where)", file=err)
        return EXIT_INTERNAL


class Run:
    """One run: checked and set up (``__init__``: nothing started yet), then ``run()``."""

    def __init__(self, args: argparse.Namespace, command: list[str], err: TextIO) -> None:
        self.args, self.command, self.err = args, command, err
        if not command:
            raise CatalogueError(f"no command to run: {_USAGE}")
        for dest, flag in _OWN_PUSH_FLAGS.items():
            if getattr(args, dest, None) is not None:
                raise CatalogueError(f"{flag}: run listens on a private socket of its own for the command's "
                                     "processes; give push flags to the exporter")
        self.overrides: dict[str, object] = dict(parse_sets(args.sets))
        self.peers = peers_given(args)
        self.bundle = args.bundle or bundle_for(p.source for p in self.peers)
        check_bundle(self.bundle, (p.source for p in self.peers))
        resolve(self.overrides, bundle=self.bundle)  # a bad --set stops here
        self.job = sanitize_job(args.job or os.environ.get("BOTTLENECK_JOB") or job_of(command))
        self.path = resolve_command(command, os.environ)
        self.child: Child | None = None
        self.report_file: TextIO | None = None
        self.report_created = False
        if args.report:
            self.report_created = not os.path.exists(args.report)
            try:
                # Opened now, so that a report that cannot be written stops run before the command starts;
                # appending leaves a report already there as it is until the new one replaces it.
                self.report_file = open(args.report, "a", encoding="utf-8")  # noqa: SIM115
            except OSError as error:
                raise OSError(f"--report={args.report}: {error.strerror or error}") from None

    def run(self) -> int:
        workdir = tempfile.mkdtemp(prefix="bottleneck-run-")  # mode 0700: the socket's directory is private
        try:
            return self._run_in(workdir)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
            if self.report_file is not None:
                self.report_file.close()

    def _run_in(self, workdir: str) -> int:
        args, err = self.args, self.err
        socket_path = os.path.join(workdir, "push.sock")
        if len(socket_path.encode()) > 107:
            raise CatalogueError(f"{socket_path}: too long for a Unix socket path; set TMPDIR=/tmp")
        args.push_socket, args.push_socket_mode = socket_path, "0600"
        source = standalone.in_process(args)
        receiver = source.parts.get(PUSH)
        watched = Watched(source)
        env = autoload.child_environment(os.environ, autoload.prepare(os.path.join(workdir, "site")),
                                         f"unix://{socket_path}", self.job)
        sampler = Sampler(watched, socket.gethostname(), exporter_job(self.overrides), self.peers,
                          keep=args.window)
        shown = shlex.join(self.command)
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        err.write(f"{PROG}: running {shown} as job {self.job}; sampling this node every "
                  f"{format_duration(args.interval)}, report at its exit\n")
        err.flush()
        source.start()
        try:
            interrupted = pending_signal()
            if interrupted is not None:
                raise CommandError(128 + interrupted, f"interrupted before {self.command[0]} started")
            started = time.monotonic()
            child = Child(self.command, self.path, env, after_exit=lambda signo: self._interrupted(signo, workdir))
            self.child = child
            self._sample(sampler, watched, child, receiver)
            child.wait()
            lifetime = time.monotonic() - started
            child.reap()
        finally:
            source.stop()
        status = child.status if child.status is not None else 0
        try:
            return self._report(sampler, status, lifetime, shown)
        except Exception:
            # The command ran: its exit status is what callers read, whatever became of the report.
            traceback.print_exc(file=err)
            print(f"{PROG}: internal error while judging (a bug; the traceback above says where); {shown} "
                  f"exited with status {status}", file=err)
            return status

    def _sample(self, sampler: Sampler, watched: Watched, child: Child, receiver: object) -> None:
        """Sample until the command exits; the last sample after its last datagrams arrived."""
        err = self.err
        finished = [False]

        def pause(seconds: float) -> None:
            if child.wait(seconds):
                settle = getattr(receiver, "settle", None)
                if settle is not None:
                    settle()
                finished[0] = True

        line = StatusLine(err, watched, lambda: self._leading(sampler)) if _is_terminal(err) else None
        try:
            sampler.run(math.inf, self.args.interval, line.show if line is not None else None,
                        done=lambda: finished[0], sleep=pause)
        except Exception:
            # The command runs on regardless: say what broke, and wait for it.
            traceback.print_exc(file=err)
            print(f"{PROG}: internal error while sampling (a bug); waiting for the command to exit", file=err)
        finally:
            if line is not None:
                line.clear()

    def _leading(self, sampler: Sampler) -> str | None:
        """The most severe verdict whose condition holds over the samples (for: not waited for)."""
        try:
            evaluation = evaluate(sampler.samples(), self.bundle, self.overrides, hold_for=False)
        except (ValueError, CatalogueError):
            return None
        shown = [f for f in evaluation.findings
                 if SEVERITY_RANK[f.rule.severity] <= SEVERITY_RANK[self.args.severity]]
        if not shown:
            return None
        first = min(shown, key=lambda f: SEVERITY_RANK[f.rule.severity])
        return f"{first.subject}: {first.rule.heuristic.verdict}"

    def _interrupted(self, signo: int, workdir: str) -> None:
        """A signal once the command has exited (Ctrl-C while judging): leave at once, without the report."""
        if signo in (signal.SIGUSR1, signal.SIGUSR2):
            return
        status = (self.child.status if self.child is not None else None) or 0
        with contextlib.suppress(Exception):
            self.err.write(f"\n{PROG}: interrupted; no report ({self.command[0]} exited with status {status})\n")
            self.err.flush()
        shutil.rmtree(workdir, ignore_errors=True)
        if self.report_created and self.args.report:
            with contextlib.suppress(OSError):
                os.unlink(self.args.report)
        os._exit(status)

    def _report(self, sampler: Sampler, status: int, lifetime: float, shown: str) -> int:
        err, args = self.err, self.args
        store = sampler.samples().store
        ranks = coverage.measured(store)
        unseen = coverage.unseen(ranks)
        refused = coverage.refused(store)
        ran = f"{shown} exited with status {status} after {_seconds(lifetime)}"
        if status != 0 and lifetime < STARTUP_SECONDS and unseen == [coverage.NO_TRAINING]:
            self._drop_report_file()
            print(f"{PROG}: error: {ran}, before any training step was measured; no report", file=err)
            return status
        report = standalone.judged(sampler, self.bundle, self.overrides)
        lines = [render_text(report, args.severity, heading=PROG)]
        if unseen:
            lines.append("\nWhat could not be seen (docs/run.md#what-it-cannot-see):\n" + "".join(
                textwrap.fill(text, width=100, initial_indent="  - ", subsequent_indent="    ") + "\n"
                for text in unseen))
        if refused:
            lines.append(f"\nThe push receiver refused {sum(refused.values()):.0f} of the command's datagrams ("
                         + ", ".join(f"{reason}: {count:.0f}" for reason, count in refused.items())
                         + "): docs/hook.md#datagram-schema-version-1\n")
        lines.append(f"{PROG}: {ran}\n")
        err.write("".join(lines))
        err.flush()
        if self.report_file is not None:
            document = json.loads(render_json(report, args.severity))
            document["run"] = {"command": self.command, "job": self.job, "exit_status": status,
                               "seconds": round(lifetime, 3), "measured": ranks, "unseen": unseen,
                               "refused": refused}
            try:
                self.report_file.seek(0)
                self.report_file.truncate()
                self.report_file.write(json.dumps(document, indent=2) + "\n")
                self.report_file.flush()
            except OSError as error:
                print(f"{PROG}: error: --report={args.report}: {error.strerror or error}", file=err)
        return status

    def _drop_report_file(self) -> None:
        if self.report_file is not None:
            self.report_file.close()
            self.report_file = None
            if self.report_created:
                with contextlib.suppress(OSError):
                    os.unlink(self.args.report)


def _seconds(seconds: float) -> str:
    return f"{seconds:.1f}s" if seconds < 10 else format_duration(round(seconds))


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
