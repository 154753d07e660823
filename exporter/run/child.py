"""The command ``bottleneck-exporter run`` starts: its own terminal, the signals meant for it, its exit status.

The child is spawned (``os.posix_spawn``) with this process's stdin, stdout and stderr (inherited, never piped: a
progress bar, a debugger and ``input()`` work as without ``run``), no signal blocked and SIGPIPE at its default, in
this process group.

Signals: ``FORWARDED`` (SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2) are blocked in every thread of
``run`` from its start (``block_signals``) and taken by one thread (``sigwaitinfo``), so none of them can end
``run`` before its child. A signal another process sent (``kill``, a supervisor's SIGTERM, Slurm's) is forwarded
to the child; one the kernel sent is not: Ctrl-C, Ctrl-\\ and a terminal's hang-up go to the whole foreground
process group, the child included, which must not get them twice.

Exit status, as a shell reports it: the child's own, 128 + N for a child killed by signal N, 127 for a command
not found, 126 for one that cannot be executed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import threading
from collections.abc import Callable, Mapping, Sequence

from bottleneck_exporter.hook.identity import job_name

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
NOT_FOUND, CANNOT_EXECUTE = 127, 126
# Python ignores these; an ignored signal stays ignored across exec, so the child gets them back at default
# (what subprocess's restore_signals does).
_RESTORED = tuple(getattr(signal, name) for name in ("SIGPIPE", "SIGXFSZ", "SIGXFZ") if hasattr(signal, name))


class CommandError(Exception):
    """The command cannot be started: ``status`` is what a shell would exit with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def block_signals() -> None:
    """Block ``FORWARDED`` in the calling thread, and so in every thread it starts from now on. Call it first,
    before any thread exists: a thread that has them unblocked could be handed one (SIGTERM would end ``run``)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)


def pending_signal() -> int | None:
    """A forwarded signal that arrived while there was no child yet (Ctrl-C during start-up), if any."""
    pending = signal.sigpending() & set(FORWARDED)
    return min(pending) if pending else None


def resolve(command: Sequence[str], env: Mapping[str, str]) -> str:
    """The executable ``command[0]`` names, looked up in ``env``'s PATH as a shell would; raises CommandError."""
    name = command[0]
    if "/" in name:
        path = name
        if not os.path.exists(name):
            raise CommandError(NOT_FOUND, f"{name}: no such file or directory")
    else:
        found = shutil.which(name, path=env.get("PATH", os.defpath))
        if found is None:
            raise CommandError(NOT_FOUND, f"{name}: command not found")
        path = found
    if os.path.isdir(path):
        raise CommandError(CANNOT_EXECUTE, f"{name}: is a directory")
    if not os.access(path, os.X_OK):
        raise CommandError(CANNOT_EXECUTE, f"{name}: permission denied")
    return path


# Modules that launch the script named after them (python -m torch.distributed.run train.py).
LAUNCHERS = ("torch.distributed.run", "torch.distributed.launch", "accelerate.commands.launch", "deepspeed")


def job_of(command: Sequence[str]) -> str:
    """The training job's default name, from the script the command runs: ``train`` for ``python train.py``,
    ``torchrun --nproc-per-node=2 train.py`` and ``python -m torch.distributed.run train.py``, ``pkg.train`` for
    ``python -m pkg.train``, else the program's name."""
    script = os.path.splitext(os.path.basename(command[0]))[0] or command[0]
    args = iter(command[1:])
    for arg in args:
        if arg.endswith(".py") and not arg.startswith("-"):
            script = os.path.splitext(os.path.basename(arg))[0]
            break
        if arg == "-m":
            module = next(args, "")
            if module not in LAUNCHERS:
                script = module or script
                break
    return job_name(env={}, argv0=script)


class Child:
    """The running command. ``exited`` is set once it has exited and ``status`` holds its exit status."""

    def __init__(self, command: Sequence[str], path: str, env: Mapping[str, str],
                 after_exit: Callable[[int], None] | None = None) -> None:
        """Spawn ``command`` (``path``: its executable, from ``resolve``); raises CommandError. ``after_exit(signo)``
        is called for a forwarded signal that comes once the child has exited."""
        self.command = list(command)
        self.exited = threading.Event()
        self.status: int | None = None
        self.after_exit = after_exit
        try:
            self.pid = os.posix_spawn(path, self.command, dict(env), setsigmask=(), setsigdef=_RESTORED)
        except FileNotFoundError:
            raise CommandError(NOT_FOUND, f"{command[0]}: no such file or directory") from None
        except OSError as err:
            raise CommandError(CANNOT_EXECUTE, f"{command[0]}: {err.strerror or err}") from None
        threading.Thread(target=self._wait, name="run-child", daemon=True).start()
        threading.Thread(target=self._forward, name="run-signals", daemon=True).start()

    def wait(self, timeout: float | None = None) -> bool:
        """Whether the child has exited, waiting at most ``timeout`` seconds for it."""
        return self.exited.wait(timeout)

    def _wait(self) -> None:
        # Not reaped yet (WNOWAIT): until reap(), its PID cannot name another process that a signal forwarded
        # late would reach.
        info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOWAIT)
        if info is None:  # only with WNOHANG
            return
        killed = info.si_code in (os.CLD_KILLED, os.CLD_DUMPED)
        self.status = 128 + info.si_status if killed else info.si_status
        self.exited.set()

    def reap(self) -> None:
        """Collect the exited child (after ``exited``)."""
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)

    def _forward(self) -> None:
        while True:
            info = signal.sigwaitinfo(FORWARDED)
            if self.exited.is_set():
                if self.after_exit is not None:
                    self.after_exit(info.si_signo)
                continue
            # si_code <= 0: sent by a process (kill, sigqueue, tgkill); > 0: by the kernel (the terminal).
            if info.si_code <= 0:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, info.si_signo)
