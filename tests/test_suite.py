"""The suite's own rules: a test module imports no other test module (what several share lives in conftest.py
or in a helper module named for what it stands in for), and one poller (``conftest.wait_until``) waits for
everything."""

from __future__ import annotations

import ast
import re

from tests.conftest import ROOT

TESTS = ROOT / "tests"


def _modules() -> dict[str, ast.Module]:
    found = {p.name: ast.parse(p.read_text(), str(p)) for p in sorted(TESTS.glob("*.py"))}
    assert "conftest.py" in found and len(found) > 40, "the walk found too little to prove anything"
    return found


def test_no_test_module_imports_another() -> None:
    offenders = sorted(
        f"{name}: {node.module}" for name, tree in _modules().items() for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and re.fullmatch(r"tests\.test_\w+", node.module))
    assert not offenders, offenders


def test_only_the_one_poller_keeps_a_deadline() -> None:
    """A loop with a deadline of its own (``time.monotonic() + timeout``) is a second poller; scripts that a
    test runs as a child process (a ``__main__`` block's workload) are not tests and may."""
    offenders = []
    for name, tree in _modules().items():
        if name == "conftest.py":
            continue
        for node in ast.walk(tree):
            if (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add)
                    and ast.unparse(node.left) in ("time.monotonic()", "time.perf_counter()", "time.time()")):
                offenders.append(f"{name}:{node.lineno}")
    assert not offenders, offenders
