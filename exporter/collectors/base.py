"""What every collector is: a small class with one ``collect()`` that yields fresh metric families.

Collectors register themselves by name with a default on/off state; the command line derives
``--[no-]collector.<name>`` and ``--collector.<name>.<option>`` from this registration, never from a
hand-kept list (node_exporter's model).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client.metrics_core import Metric

if TYPE_CHECKING:
    from bottleneck_exporter.gpu.backend import GpuBackend
    from bottleneck_exporter.training.registry import TrainingRegistry


class Collector(Protocol):
    def collect(self) -> Iterable[Metric]: ...


@dataclasses.dataclass(frozen=True)
class Option:
    """One ``--collector.<name>.<option>`` setting, also accepted under ``collectors.<name>`` in the YAML config."""

    name: str
    default: Any
    help: str
    # Parses a command-line / YAML value; raises ValueError with a readable message. A default given as a
    # string goes through it too, so that it can be written (and shown in --help) as a user would type it.
    parse: Callable[[Any], Any] = str
    # A flag without a value (``--push.disable``) rather than ``--<prefix>.<name>=VALUE``; YAML takes true/false.
    switch: bool = False


@dataclasses.dataclass
class Context:
    """Everything a collector may read from: injected so tests point it at fixture trees and fakes."""

    procfs: str = "/proc"
    sysfs: str = "/sys"
    rootfs: str = "/"
    # Options of this collector only, already parsed: {option name: value}.
    options: dict[str, Any] = dataclasses.field(default_factory=dict)
    gpu_backend_factory: Callable[[], GpuBackend] | None = None
    training: TrainingRegistry | None = None


@dataclasses.dataclass(frozen=True)
class Registration:
    name: str
    default_enabled: bool
    help: str
    factory: Callable[[Context], Collector]
    options: tuple[Option, ...] = ()


REGISTRY: dict[str, Registration] = {}


def register(
    name: str, *, default_enabled: bool = True, help: str, options: tuple[Option, ...] = ()
) -> Callable[[Callable[[Context], Collector]], Callable[[Context], Collector]]:
    """Class decorator: ``@register("cpu", help="...")`` on a class whose constructor takes a Context."""

    def wrap(factory: Callable[[Context], Collector]) -> Callable[[Context], Collector]:
        if name in REGISTRY:
            raise RuntimeError(f"collector {name!r} registered twice")
        REGISTRY[name] = Registration(name, default_enabled, help, factory, options)
        return factory

    return wrap


def parse_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected true or false, got {value!r}")


def parse_positive_int(value: Any) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"expected a whole number, got {value!r}") from None
    if number <= 0 or isinstance(value, bool):
        raise ValueError(f"expected a positive whole number, got {value!r}")
    return number


def parse_regex(value: Any) -> str:
    import re

    try:
        re.compile(str(value))
    except re.error as err:
        raise ValueError(f"not a valid regular expression ({err}): {value!r}") from None
    return str(value)
