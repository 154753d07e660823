"""The Kubernetes manifests as the cluster gets them (``kubectl kustomize`` of a folder of deploy/kubernetes), and
the generator scripts that write them."""

from __future__ import annotations

import functools
import importlib
import subprocess
import sys
from types import ModuleType
from typing import Any

import yaml

from tests.conftest import ROOT, require_tool

KUBERNETES = ROOT / "deploy" / "kubernetes"


@functools.cache
def render(kustomization: str) -> tuple[dict[str, Any], ...]:
    kubectl = require_tool("kubectl")
    result = subprocess.run([kubectl, "kustomize", str(KUBERNETES / kustomization)], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return tuple(doc for doc in yaml.safe_load_all(result.stdout) if doc)


def by_kind(objects: tuple[dict[str, Any], ...], kind: str) -> dict[str, Any]:
    (found,) = [o for o in objects if o["kind"] == kind]
    return found


def import_generator(name: str) -> ModuleType:
    """A generator script of deploy/kubernetes (not a package: the scripts import each other by name)."""
    sys.path.insert(0, str(KUBERNETES))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(KUBERNETES))
