"""What every collector is: a small class with one ``collect()`` that yields fresh metric families.

Collectors register themselves by name with a default on/off state and their options
(``bottleneck_exporter.options.Option``); the command line derives ``--[no-]collector.<name>`` and
``--collector.<name>.<option>`` from this registration, never from a hand-kept list (node_exporter's model).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client.metrics_core import Metric

from bottleneck_exporter.options import Option

if TYPE_CHECKING:
    from bottleneck_exporter.gpu.backend import GpuBackend
    from bottleneck_exporter.training.registry import TrainingRegistry


class Collector(Protocol):
    def collect(self) -> Iterable[Metric]: ...


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
