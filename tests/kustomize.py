"""The Kubernetes manifests as the cluster gets them: ``kubectl kustomize`` of a folder of deploy/kubernetes."""

from __future__ import annotations

import functools
import subprocess
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
