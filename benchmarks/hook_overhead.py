"""What the training hook costs per step: the same tiny CPU training step with and without it, side by side.

    PYTHONPATH=. python benchmarks/hook_overhead.py [--pairs 6000] [--rounds 6] [--without PART] [--parts]
                                                    [--auto] [--ddp [--plain-comm-hook]]

Two identical setups (model, optimizer, DataLoader over in-memory tensors, one torch thread) take turns step
by step, so whatever else the machine does hits both alike; the hooked one is instrumented with
``bottleneck_exporter.hook.instrument`` and sends its datagrams (once a second, as by default) to a live Unix socket,
as with a running exporter. The pairs are spread over ``--rounds`` fresh pairs of setups, built in
alternating order: one setup runs a few us a step faster than its twin for reasons of its own (where its
tensors landed in memory), which a single pair would read as the hook's cost.

Every part of the hook is on, and these CPU steps give each something to do (the cheap ways below); the first
lines printed count what each part saw in the last hooked setup, and the run fails when one saw nothing:

- the phases, the DataLoader, the step ends and the datagrams: the training loop itself;
- collections (``gc.callbacks``): each step of both setups ends with a young collection (``gc.collect(0)``), as
  a loop that allocates Python objects has a few a step (without it these steps collect about once in 300);
- checkpoint saves: both setups save their model's state dict into memory every ``CHECKPOINT_EVERY`` steps,
  the hooked one through ``torch.save`` (which the hook wraps), the plain one through the function torch had;
- torch.compile's counters: dynamo is loaded (nothing is compiled: a compilation takes seconds, the callbacks
  around it microseconds), so every datagram carries the counts;
- the pin check: the hooked session is told its rank trains on a GPU, so one batch in ``CHECK_EVERY`` is
  checked for pinned memory as on a CUDA rank (``Tensor.is_pinned()`` answers on the CPU too);
- start-up: read from /proc when each session starts, sent in every datagram;
- the collectives and their exposed wait: only with ``--ddp`` (both models in DDP over a one-rank gloo group:
  each step all-reduces its gradients through the hook's communication hook), a step several times as long;
  ``--plain-comm-hook`` gives the plain twin DDP's default all-reduce as a Python communication hook
  (``default_hooks.allreduce_hook``), so that the difference leaves out what DDP charges any Python hook;
- not here: the GPU's event timing and the CUDA allocator's readings (``torch.cuda.memory_stats()`` at each
  datagram), which need CUDA; ``scripts/device-check`` runs the hook on a CUDA loop.

Process-wide parts (``gc.callbacks``, the save wrapper's clock) are in place only while the hooked setup
steps, as ``--auto``'s global hooks are: otherwise the plain twin would pay for them too. Printed:

- the median step time of each, and the median of the per-pair differences: the added cost of a typical
  step, which holds no fold and no datagram; and that median per pair of setups, whose spread is that
  setup-to-setup difference;
- the datagrams (fold + formatting + send, inline at a step end), in a phase of their own after the rounds
  (the last pair of setups, until five were sent at the session's interval): how long each took on the
  training thread, timed around the call;
- the training-thread time lost per datagram: how much longer than the median pair the pair that held it
  took (what the datagram cost the step, cache misses and all, not only its own code); and the same for the
  pair after it, whose first forward is looked at for the rank's setup (``hook.setup``: the autocast probe);
- a datagram sent right after a step against one sent straight after it (cold caches against warm);
- what this machine charges code and memory left alone for one datagram interval: a tiny JSON dump, and a
  write to each of 64 pages, against the same at once again;
- the folds between datagrams (every ``FOLD_ENTRIES`` log entries, at a step end) and their cost per step;
- the mean of the per-pair differences (everything included: marks, folds and datagrams);
- the same median for *unhooked* pairs of setups, which shows this machine's noise floor;
- the hook's bookkeeping alone (its entry points in a loop with nothing else, warm caches): the floor of
  what it can add.

``--parts`` adds each part of a datagram timed alone (the fold with the totals, one float's formatting, the
whole formatting, the send), cold and warm as the two probes above: what each us of a datagram goes to.

``--without PART`` (repeatable) leaves one part of the hook out of the hooked setup, or its work undone, so that
the difference says what that part costs: ``model`` / ``optimizer`` instrument it without the forward wrapper
or the optimizer hooks (without an optimizer each fetch ends a step); ``loader``: its loader is iterated as
torch has it (no data wait, no sample count, no pin check); ``collections``: the collector's clock stays out of
``gc.callbacks``; ``saves``: it saves through torch's own function; ``pin-check``: its session is left on the
CPU, where no batch is checked; ``probe``: no forward is looked at for its setup after each datagram.

``--auto`` measures the hooked setup with the automatic instrumentation of ``bottleneck-exporter run``
(``bottleneck_exporter.hook.auto``: the DataLoader's iterator, the optimizers' global step hooks, the model found
by a global module hook that then goes) instead of ``instrument()``: a fresh attachment per pair of setups. Its
hooks are global, so they sit in torch's hook tables only while the hooked setup steps (put there and taken out
outside the timed step) and the plain twin iterates its loader with ``DataLoader.__iter__`` as torch has it.
"""

from __future__ import annotations

import argparse
import bisect
import gc
import io
import itertools
import json
import os
import socket
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch._dynamo  # what the first torch.compile loads: the session then counts compilations
from torch.utils.data import DataLoader, TensorDataset

from bottleneck_exporter.hook import auto, instrument
from bottleneck_exporter.hook.gcpauses import GcClock
from bottleneck_exporter.hook.session import Session

# As torch has them, before the hook wraps them: how plain setups iterate their loaders and save.
PLAIN_ITER = DataLoader.__iter__
PLAIN_SAVE = torch.save
# Steps between two checkpoint saves of each setup: the saves are timed, and a long step the hook counts.
CHECKPOINT_EVERY = 100


class Setup:
    def __init__(self, address: str | None, without: tuple[str, ...] = (), wrapped_iter: bool = False,
                 ddp: bool = False, comm_hook: bool = False) -> None:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
        self.model = torch.nn.parallel.DistributedDataParallel(model) if ddp else model
        if ddp and comm_hook:  # --plain-comm-hook: DDP's own all-reduce, called as a Python hook
            from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

            self.model.register_comm_hook(self.model.process_group, allreduce_hook)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.001)
        loader: Any = DataLoader(TensorDataset(torch.randn(4096, 64), torch.randn(4096, 1)), batch_size=32)
        if address is not None:
            loader = instrument(loader, model=None if "model" in without else self.model,
                                optimizer=None if "optimizer" in without else self.optimizer, address=address)
        self.loader = loader
        self.iterate: Callable[[Any], Iterator[Any]] = PLAIN_ITER if address is None and not wrapped_iter else iter
        if address is not None and "loader" in without:
            self.iterate = _unwrapped_iter
        self.iterator: Iterator[Any] = self.iterate(loader)
        self.started = 0.0
        self.steps = 0
        session = self.session  # started by now: instrument(), or the automatic instrumentation's iter()
        self.save: Callable[..., None] = PLAIN_SAVE if session is None or "saves" in without else torch.save
        self.gc_clock = None if session is None else engage_every_part(session, without)

    @property
    def session(self) -> Session | None:
        return getattr(self.loader, "bottleneck_session", None)

    def close(self) -> None:
        if self.session is not None:
            self.session.close()

    def step(self) -> float:
        clock = self.gc_clock
        if clock is not None:
            gc.callbacks.append(clock.callback)
        try:
            return self._timed_step()
        finally:
            if clock is not None:
                clock.detach()

    def _timed_step(self) -> float:
        start = self.started = time.perf_counter()
        try:
            x, y = next(self.iterator)
        except StopIteration:
            self.iterator = self.iterate(self.loader)
            x, y = next(self.iterator)
        self.optimizer.zero_grad()
        torch.nn.functional.mse_loss(self.model(x), y).backward()
        self.optimizer.step()
        gc.collect(0)
        self.steps += 1
        if self.steps % CHECKPOINT_EVERY == 0:
            self.save(self.model.state_dict(), io.BytesIO())
        return time.perf_counter() - start


def _unwrapped_iter(loader: Any) -> Iterator[Any]:
    """The iterator of the loader an instrumented loader wraps, as torch has it (``--without loader``)."""
    return PLAIN_ITER(loader.loader)  # type: ignore[no-any-return]


def _no_probe(model: Any) -> None:
    """``SetupFacts.sample`` that looks at nothing (``--without probe``)."""


def engage_every_part(session: Session, without: tuple[str, ...] = ()) -> GcClock | None:
    """Give the parts of the hook that CPU steps leave idle something to do (the module's docstring says
    how), but those ``without`` names: the pin check, told the rank trains on a GPU; the collections' clock,
    taken out of ``gc.callbacks`` for the hooked setup to put back while it steps. That clock."""
    if "pin-check" not in without:
        session.device = "cuda:0"
        session._identity_json = ""
    if "probe" in without:
        session.setup.sample = _no_probe  # type: ignore[method-assign]
    session.gc.detach()
    return None if "collections" in without else session.gc


# The part each count of parts_seen comes from, as --without names it.
_COUNTED_BY = {"collections": "collections", "checkpoint saves": "saves", "batches pin-checked": "pin-check",
               "sampled forwards": "probe"}


def parts_seen(session: Session, collectives: bool, without: tuple[str, ...] = ()) -> str:
    """What each part of the hook counted in ``session`` (from its datagram), ``collectives`` included; raises
    when a part sent nothing, or counted nothing that these steps give it to count (but those ``without``
    leaves idle)."""
    sent = session.payload()
    counted = {"collections": sum(sent["gc"]["collections"]), "checkpoint saves": sent["checkpoint"]["saves"],
               "batches pin-checked": sum(sent.get("host_batches", {}).values()),
               "sampled forwards": sent["setup"]["sampled_forwards"]}
    idle = [part for part, count in counted.items()
            if not count and _COUNTED_BY[part] not in without and not (part == "batches pin-checked"
                                                                        and "loader" in without)
            and not (part == "sampled forwards" and "model" in without)]
    idle += [part for key, part in (("compile", "torch.compile's counts"), ("startup_seconds", "start-up"))
             if key not in sent]
    exposed = sent.get("collective_exposed_seconds")
    if collectives and exposed is None:
        idle.append("the collectives' exposed wait")
    text = ", ".join(f"{count} {part}" for part, count in counted.items())
    text += (f", {sent.get('compile', {}).get('compiles', 0)} compilations, {sent['long_steps']['count']} long "
             f"steps, start-up {sent.get('startup_seconds', 0.0):.1f} s")
    if exposed is not None:
        text += (f", collectives {sent['phase_seconds']['collective'] * 1e3:.0f} ms "
                 f"(exposed {exposed * 1e3:.0f} ms)")
    if idle:
        raise RuntimeError(f"parts of the hook this benchmark left idle: {', '.join(idle)} ({text})")
    return text


class AutoSetup(Setup):
    """A plain setup measured by a fresh attachment of ``hook.auto``, whose global hooks are in torch's tables
    only while this setup steps: put there before its timed step, taken out after it."""

    def __init__(self, address: str, ddp: bool = False) -> None:
        os.environ["BOTTLENECK_PUSH_ADDRESS"] = address
        auto.detach()
        attached = auto.attach()
        if attached is None:
            raise RuntimeError("the automatic instrumentation did not attach")
        self.auto = attached
        self._out: list[tuple[dict[int, Any], int, Any]] = []
        super().__init__(None, wrapped_iter=True, ddp=ddp)  # its iter() starts the session and the model search
        self._take_out()

    @property
    def session(self) -> Session | None:
        session: Session | None = self.auto.session
        return session

    def close(self) -> None:
        self._out.clear()
        auto.detach()

    def _take_out(self) -> None:
        for handle in (*self.auto._handles, self.auto._search):
            table = handle.hooks_dict_ref() if handle is not None else None
            if table is not None and handle.id in table:
                self._out.append((table, handle.id, table.pop(handle.id)))

    def step(self) -> float:
        for table, key, hook in self._out:
            table[key] = hook
        self._out.clear()
        try:
            return super().step()
        finally:
            self._take_out()


class Pairs:
    """Step times of two setups taking turns, and when each pair of steps ran."""

    def __init__(self, first: Setup, second: Setup, pairs: int, drain: socket.socket) -> None:
        self.first_times: list[float] = []
        self.second_times: list[float] = []
        # Each pair's span runs from the end of the one before, so that no wall time escapes them.
        self.spans: list[tuple[float, float]] = []
        previous_end = time.perf_counter()
        for index in range(pairs):
            if index % 256 == 0:
                _drain(drain)
            if index % 2:  # alternate which goes first: neither always runs right after the other
                a, b = first.step(), second.step()
            else:
                b, a = second.step(), first.step()
            self.first_times.append(a)
            self.second_times.append(b)
            end = time.perf_counter()
            self.spans.append((previous_end, end))
            previous_end = end
        self.differences = [b - a for a, b in zip(self.first_times, self.second_times, strict=True)]
        self.added = statistics.median(self.differences)

    def lost_to(self, spans: list[tuple[float, float]]) -> list[float]:
        """Per span (a datagram): how much longer than the median pair the pairs that overlapped it took,
        summed (one pair for an inline datagram)."""
        usual = statistics.median(end - start for start, end in self.spans)
        return [sum(finish - begin - usual for begin, finish in self.spans if begin < end and finish > start)
                for start, end in spans]

    def lost_after(self, spans: list[tuple[float, float]]) -> list[float]:
        """Per span (a datagram): how much longer than the median pair the pair after the one that held it took
        (its first forward is the one looked at for the setup); none for a span in the last pair."""
        usual = statistics.median(end - start for start, end in self.spans)
        after = []
        for _, end in spans:
            index = bisect.bisect_left(self.spans, end, key=lambda span: span[0])
            if index < len(self.spans):
                begin, finish = self.spans[index]
                after.append(finish - begin - usual)
        return after


def _drain(sock: socket.socket) -> None:
    while True:
        try:
            sock.recv(65536)
        except BlockingIOError:
            return


class _Batch:
    """Stands in for a batch tensor in the bookkeeping loop: only its shape is read."""

    shape = (32, 64)


class _Module:
    def forward(self, x: Any) -> Any:
        return x

    def parameters(self) -> Iterator[Any]:
        return iter(())


class _Hook:
    def remove(self) -> None:
        pass


class _Optimizer:
    """Stands in for an optimizer: keeps the step hooks the session registers, to call them by hand."""

    def __init__(self) -> None:
        self.hooks: list[Callable[[Any, Any, Any], None]] = []

    def register_step_pre_hook(self, hook: Callable[[Any, Any, Any], None]) -> _Hook:
        self.hooks.append(hook)
        return _Hook()

    register_step_post_hook = register_step_pre_hook


def _empty_hook(optimizer: Any, args: Any, kwargs: Any) -> None:
    pass


def bookkeeping_only(steps: int) -> float:
    """The hook's own per-step work, warm: a loop of fetch, forward and optimizer step with nothing in them,
    instrumented through the same entry points, minus the same loop without the hook."""

    def loop(batches: Iterator[Any], module: Any, pre: Callable[..., None], post: Callable[..., None]) -> float:
        start = time.perf_counter()
        for _ in range(steps):
            batch = next(batches)
            module.forward(batch)
            pre(None, (), {})
            post(None, (), {})
        return (time.perf_counter() - start) / steps

    bare = loop(itertools.repeat(_Batch()), _Module(), _empty_hook, _empty_hook)
    session = Session(address="off")
    module, optimizer = _Module(), _Optimizer()
    loader = instrument(itertools.repeat(_Batch()), model=module, optimizer=optimizer, session=session)
    pre, post = optimizer.hooks
    hooked = loop(iter(loader), module, pre, post)
    assert session.clock.steps == steps and session.errors == 0
    session.close()
    return hooked - bare


class TimedTicks:
    """Stands in for the session's ``_tick`` (the step end's fold, and datagram when one is due) and times
    each call, apart by whether it sent a datagram."""

    def __init__(self, session: Session) -> None:
        self._session = session
        self._method = session._tick
        self.datagrams: list[tuple[float, float]] = []  # (start, end) of each tick that sent one
        self.folds: list[float] = []  # seconds of each tick that only folded
        session._tick = self  # type: ignore[method-assign]  # shadows the method on this one instance

    def __call__(self, now: float) -> None:
        session = self._session
        seq = session.seq
        start = time.perf_counter()
        self._method(now)
        end = time.perf_counter()
        if session.seq != seq:
            self.datagrams.append((start, end))
        else:
            self.folds.append(end - start)

    def remove(self) -> None:
        """The session's own ``_tick`` again: what runs after is not counted here."""
        del self._session._tick


def back_to_back(setup: Setup, session: Session, drain: socket.socket, datagrams: int = 40) -> tuple[float, float]:
    """Median seconds of a datagram sent right after a training step, and of one sent straight after that:
    the same work, with the caches the step left and with warm ones."""
    first, second = [], []
    for index in range(datagrams):
        for _ in range(16):
            setup.step()
        session.clock.fold()  # the marks of those steps: what is timed below is formatting + send
        start = time.perf_counter()
        session._send()
        middle = time.perf_counter()
        session._send()
        first.append(middle - start)
        second.append(time.perf_counter() - middle)
        if index % 8 == 7:
            _drain(drain)
    return statistics.median(first), statistics.median(second)


def train_for(setup: Setup, seconds: float) -> None:
    """Training steps for ``seconds``: what runs between two datagrams."""
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        setup.step()


def cold_and_warm(setup: Setup, interval: float, action: Callable[[int], object], probes: int = 5,
                  prepare: Callable[[], object] | None = None) -> tuple[float, float]:
    """Median seconds of ``action(probe)`` run once per ``interval`` of ``setup``'s training steps, as a datagram
    is (after ``prepare()``, untimed), and of the same action run again at once: what this machine charges
    code and data left alone for one datagram interval. On the 2-vCPU VMs this project is built on,
    Firecracker guests whose memory the hypervisor maps with nested paging (``nested_pvm=1`` on the kernel's
    command line), the cold run cost several times the warm one (no page faults, no context switches, thread
    CPU time = wall time); a datagram pays that like any other code, so compare its figure with these, not
    with its warm cost."""
    cold, warm = [], []
    for probe in range(probes):
        train_for(setup, interval)
        if prepare is not None:
            prepare()
        start = time.perf_counter()
        action(probe)
        middle = time.perf_counter()
        action(probe)
        cold.append(middle - start)
        warm.append(time.perf_counter() - middle)
    return statistics.median(cold), statistics.median(warm)


def cold_code_penalty(setup: Setup, interval: float) -> tuple[float, float]:
    """A tiny JSON dump (no hook code at all), cold and warm (``cold_and_warm``)."""
    small = {"job": "bench", "rank": 0, "phase_seconds": {"forward": 1.0, "backward": 2.0}}
    return cold_and_warm(setup, interval, lambda probe: json.dumps(small))


def page_touch_penalty(setup: Setup, interval: float, pages: int = 64, probes: int = 5) -> tuple[float, float]:
    """Seconds per page to write one byte in each of ``pages`` pages of memory, cold and warm
    (``cold_and_warm``): each probe its own pages, all mapped beforehand."""
    memory = bytearray(pages * 4096 * probes)
    for at in range(0, len(memory), 4096):
        memory[at] = 1

    def touch(probe: int) -> None:
        for at in range(probe * pages * 4096, (probe + 1) * pages * 4096, 4096):
            memory[at] += 1

    cold, warm = cold_and_warm(setup, interval, touch, probes)
    return cold / pages, warm / pages


def datagram_parts(setup: Setup, session: Session, drain: socket.socket) -> list[tuple[str, float, float]]:
    """Each part of a datagram alone, cold and warm (``cold_and_warm``) between the hooked setup's own steps
    (the session sends no datagram meanwhile): what each us of the datagram goes to, and how much of it this
    machine's toll on cold code is. Each cold run comes as a datagram does after fast steps: the step end
    before it folded the log, so the part folds one step's marks (``session.DATAGRAM_FOLD_ENTRIES``); the
    warm run folds none."""
    session.due = float("inf")
    data = session._datagram()
    number = 0.1234567890123  # a phase total as the datagram formats it: its shortest repr

    def send(probe: int) -> None:
        # Five probes send ten datagrams, which the receiver's queue holds (net.unix.max_dgram_qlen is 10 by
        # default, and a full queue refuses more): drained before this part, not between its sends.
        if not session.transport.send(data):
            raise RuntimeError("the receiving socket refused a datagram: its send was not measured")

    parts: list[tuple[str, Callable[[int], object]]] = [
        ("fold the log and read the totals", lambda probe: session.clock.totals()),
        ("format one float", lambda probe: repr(number)),
        ("format the datagram (totals included)", lambda probe: session._datagram()),
        (f"send it ({len(data)} bytes)", send),
    ]

    def as_a_datagram_comes() -> None:
        session.clock.fold()
        setup.step()

    measured = []
    for name, action in parts:
        _drain(drain)
        measured.append((name, *cold_and_warm(setup, session.interval, action, prepare=as_a_datagram_comes)))
    return measured


class Rounds:
    """``rounds`` fresh pairs of setups (a plain one and ``make()``), built in alternating order, each paired
    for ``pairs // rounds`` steps (why: the module's docstring). The last pair stays for what is measured
    after it."""

    def __init__(self, make: Callable[[], Setup], pairs: int, rounds: int, drain: socket.socket,
                 plain: Callable[[], Setup] = lambda: Setup(None)) -> None:
        self.differences: list[float] = []
        self.first_times: list[float] = []
        self.second_times: list[float] = []
        self.medians: list[float] = []  # per round
        for index in range(rounds):
            first, second = ((plain(), make()) if index % 2 == 0 else reversed((make(), plain())))
            for setup in (first, second):  # warm-up
                for _ in range(200):
                    setup.step()
            measured = Pairs(first, second, pairs // rounds, drain)
            self.differences += measured.differences
            self.first_times += measured.first_times
            self.second_times += measured.second_times
            self.medians.append(measured.added)
            if index < rounds - 1:
                second.close()
        self.plain, self.last = first, second

    @property
    def added(self) -> float:
        return statistics.median(self.differences)


class Datagrams:
    """The datagrams of one hooked setup paired with a plain one, at the session's own interval, until
    ``wanted`` were sent (or ``limit`` seconds): each round of ``Rounds`` may be shorter than an interval."""

    def __init__(self, plain: Setup, hooked: Setup, drain: socket.socket, wanted: int = 5,
                 limit: float = 30.0) -> None:
        session = hooked.session
        assert session is not None
        ticks = TimedTicks(session)
        self.lost: list[float] = []
        self.lost_after: list[float] = []
        self.pairs = 0
        until = time.perf_counter() + limit
        while len(ticks.datagrams) < wanted and time.perf_counter() < until:
            sent = len(ticks.datagrams)
            measured = Pairs(plain, hooked, 256, drain)
            self.lost += measured.lost_to(ticks.datagrams[sent:])
            self.lost_after += measured.lost_after(ticks.datagrams[sent:])
            self.pairs += 256
        ticks.remove()
        self.sent = [end - start for start, end in ticks.datagrams]
        self.folds = ticks.folds


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--pairs", type=int, default=6000, help="step pairs per comparison (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=6,
                        help="fresh pairs of setups the pairs are spread over (default: %(default)s)")
    parser.add_argument("--without", action="append", default=[],
                        choices=("model", "optimizer", "loader", "collections", "saves", "pin-check", "probe"),
                        help="the hooked setup without this part of the hook, or its work (repeatable)")
    parser.add_argument("--parts", action="store_true",
                        help="also time each part of a datagram alone, cold and warm (20 s more)")
    parser.add_argument("--auto", action="store_true",
                        help="measure the automatic instrumentation of bottleneck-exporter run, not instrument()")
    parser.add_argument("--ddp", action="store_true",
                        help="both models in DDP over a one-rank gloo group: the collectives' timing on too")
    parser.add_argument("--plain-comm-hook", action="store_true",
                        help="with --ddp: the plain twin all-reduces through DDP's allreduce_hook, in Python")
    args = parser.parse_args()
    if not 1 <= args.rounds <= args.pairs:
        parser.error("--rounds must be at least 1 and at most --pairs")
    if args.auto and args.without:
        parser.error("--without is for instrument(); --auto attaches to what it finds")
    if args.plain_comm_hook and not args.ddp:
        parser.error("--plain-comm-hook is for --ddp")
    torch.set_num_threads(1)

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "push.sock")
        receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        receiver.bind(path)
        receiver.setblocking(False)
        address = f"unix://{path}"
        if args.ddp:
            os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # one rank: no other host to reach
            torch.distributed.init_process_group("gloo", init_method=f"file://{tmp}/group", rank=0, world_size=1)

        def hooked_setup() -> Setup:
            if args.auto:
                return AutoSetup(address, args.ddp)
            return Setup(address, tuple(args.without), ddp=args.ddp)

        def plain_setup() -> Setup:
            return Setup(None, ddp=args.ddp, comm_hook=args.plain_comm_hook)

        measured = Rounds(hooked_setup, args.pairs, args.rounds, receiver, plain_setup)
        hooked = measured.last
        session = hooked.session
        assert session is not None and session.active, "the hooked setup is not measured"
        interval = session.interval
        datagrams = Datagrams(measured.plain, hooked, receiver)
        cold, warm = back_to_back(hooked, session, receiver)
        parts = datagram_parts(hooked, session, receiver) if args.parts else []
        assert not isinstance(hooked, AutoSetup) or hooked.session is session, "it measured more than one session"
        seen = parts_seen(session, args.ddp and "model" not in args.without, tuple(args.without))
        errors = session.errors
        hooked.close()
        noise = Rounds(plain_setup, args.pairs, args.rounds, receiver, plain_setup).added
        plain = plain_setup()
        penalty = cold_code_penalty(plain, interval)
        pages = page_touch_penalty(plain, interval)
        receiver.close()
        if args.ddp:
            torch.distributed.destroy_process_group()
    floor = bookkeeping_only(50000)

    print(f"torch {torch.__version__}, {args.pairs} step pairs over {args.rounds} pairs of setups, 1 torch thread, "
          f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs"
          + "".join(f", hook without the {part}" for part in args.without)
          + (", the automatic instrumentation (hook.auto) instead of instrument()" if args.auto else "")
          + (", both models in DDP (one-rank gloo group)" if args.ddp else "")
          + (", the plain one with allreduce_hook as its Python comm hook" if args.plain_comm_hook else ""))
    print(f"the hooked setup's parts saw: {seen}; internal errors: {errors}")
    base, added = statistics.median(measured.first_times), measured.added
    print(f"median step without hook:        {base * 1e6:8.1f} us")
    print(f"median step with hook:           {statistics.median(measured.second_times) * 1e6:8.1f} us")
    print(f"added per step (median of pairs): {added * 1e6:.1f} us")
    print(f"  = {added / base:.1%} of this step, {added / 0.002:.2%} of a 2 ms step; per pair of setups: "
          + ", ".join(f"{median * 1e6:.1f}" for median in measured.medians) + " us")
    sent = datagrams.sent
    print(f"datagrams (fold + encode + send): {len(sent)}, "
          f"{statistics.median(sent) * 1e6 if sent else 0.0:.1f} us each")
    if sent:
        print(f"  training-thread time lost per datagram: {statistics.median(datagrams.lost) * 1e6:.1f} us "
              f"(median; the pair that held it against the median pair), longest datagram {max(sent) * 1e6:.1f} us")
    if datagrams.lost_after:
        print(f"  training-thread time lost on the pair after a datagram (its forward looked at for the setup): "
              f"{statistics.median(datagrams.lost_after) * 1e6:.1f} us (median)")
    print(f"  a datagram right after a step: {cold * 1e6:.0f} us; straight after that one: {warm * 1e6:.0f} us "
          f"(medians; formatting + send, no fold)")
    print(f"  this machine's cold-code penalty: a JSON dump of 3 keys once per datagram interval between unhooked "
          f"steps: {penalty[0] * 1e6:.0f} us; at once again: {penalty[1] * 1e6:.1f} us (medians)")
    print(f"  this machine's page-touch penalty: a page of memory untouched for one datagram interval: "
          f"{pages[0] * 1e6:.2f} us to touch; at once again: {pages[1] * 1e6:.2f} us (medians of 64 pages)")
    if parts:
        print("  the datagram's parts, each alone once per datagram interval of hooked steps; at once again "
              "(medians):")
    for name, part_cold, part_warm in parts:
        print(f"    {name}: {part_cold * 1e6:.1f} us; {part_warm * 1e6:.1f} us")
    if datagrams.folds:
        print(f"  folds between datagrams: {len(datagrams.folds)}, {statistics.median(datagrams.folds) * 1e6:.1f} us "
              f"each (median), {sum(datagrams.folds) / datagrams.pairs * 1e6:.2f} us per step")
    print(f"mean added per step (everything): {statistics.fmean(measured.differences) * 1e6:.1f} us")
    print(f"noise floor (unhooked vs unhooked, median of pairs): {noise * 1e6:.1f} us")
    print(f"hook bookkeeping alone (warm):   {floor * 1e6:8.2f} us per step")


if __name__ == "__main__":
    main()
