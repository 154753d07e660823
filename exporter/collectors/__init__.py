"""The collectors. Importing this package imports every module in it, which registers each collector.

Adding a collector = one module here (decorated with ``@register``), a fixture, a test. Besides the
collectors it holds what they share: ``base`` (the registration), ``devicefilter`` (device options),
``orchestrator`` (runs them on each scrape), ``problems`` (a problem of what they read, logged once) and
``coexistence`` (what node_exporter and dcgm-exporter already export, and the presets that leave it to them).
"""

import importlib
import pkgutil

from bottleneck_exporter.collectors.base import REGISTRY, Collector, Context, Registration, register

_NOT_COLLECTORS = ("base", "coexistence", "devicefilter", "orchestrator", "problems")

for _module in pkgutil.iter_modules(__path__):
    if _module.name not in _NOT_COLLECTORS:
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["REGISTRY", "Collector", "Context", "Registration", "register"]
