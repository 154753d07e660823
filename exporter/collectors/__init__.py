"""The collectors. Importing this package imports every module in it, which registers each collector.

Adding a collector = one module here (decorated with ``@register``), a fixture, a test.
"""

import importlib
import pkgutil

from exporter.collectors.base import REGISTRY, Collector, Context, Option, Registration, register

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "base":
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["REGISTRY", "Collector", "Context", "Option", "Registration", "register"]
