"""The command line as a new user meets it: grouped --help with defaults as typed, no abbreviations, a close
match for a misspelled flag or collector, errors naming the flag or the file and key; the import graph."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bottleneck_exporter.cli import build_parser
from bottleneck_exporter.collectors import REGISTRY
from bottleneck_exporter.config import ConfigError, option_values
from bottleneck_exporter.options import parse_duration
from bottleneck_exporter.push import settings as push_settings
from tests.conftest import PACKAGE, ROOT


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", PACKAGE, *args], capture_output=True, text=True, timeout=60,
                          cwd=ROOT)


def _groups(help_text: str) -> dict[str, str]:
    """Help text per group heading (a line ending in ':' at column 0)."""
    groups: dict[str, str] = {}
    current = ""
    for line in help_text.splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            current = line[:-1]
            groups[current] = ""
        elif current:
            groups[current] += line + "\n"
    return groups


def test_help_groups_the_flags_by_what_they_configure() -> None:
    groups = _groups(build_parser().format_help())
    expected = {"web": "--web.listen-address", "collectors": "--collector.gpu.profile", "push": "--push.socket",
                "logging": "--log.format", "paths": "--path.procfs"}
    for group, flag in expected.items():
        assert flag in groups.get(group, ""), f"{flag} not under {group}: {list(groups)}"
    assert "--push.socket" not in groups["collectors"] and "--log.level" not in groups["web"]


def test_help_prints_defaults_as_a_user_would_type_them() -> None:
    text = build_parser().format_help()
    for shown in ("(default: 0660)", "(default: 10m)", "(default: 15s)", "(default: 2s)", "(default: :9847)",
                  "(default: on)", "(default: 32)",
                  r"(default: ^(z?ram|loop|fd|sr)\d+$)"):
        assert shown in " ".join(text.split()), shown
    for python_value in ("0o", "None", "\\\\", "(default: '", "(default: False)", "(default: True)", "600.0"):
        assert python_value not in text, python_value


def test_an_abbreviated_flag_is_refused_and_the_full_one_suggested() -> None:
    result = _run("--web.listen=127.0.0.1:1")
    assert result.returncode == 2
    assert "--web.listen: unknown flag; did you mean --web.listen-address?" in result.stderr
    assert len(result.stderr.splitlines()) <= 4, "the whole usage was printed: " + result.stderr


@pytest.mark.parametrize(("flag", "suggested"), [
    ("--no-collector.gpuu", "--no-collector.gpu"),
    ("--collector.trainig", "--collector.training"),
    ("--collector.disk.device-exlude=x", "--collector.disk.device-exclude"),
    ("--push.max-job=3", "--push.max-jobs"),
])
def test_a_misspelled_flag_gets_the_closest_one(flag: str, suggested: str) -> None:
    result = _run(flag)
    assert result.returncode == 2 and f"did you mean {suggested}?" in result.stderr, result.stderr


def test_an_invalid_choice_gets_the_closest_one() -> None:
    result = _run("--log.level=warning")
    assert result.returncode == 2 and "--log.level" in result.stderr and "did you mean 'warn'?" in result.stderr


@pytest.mark.parametrize(("content", "names"), [
    ("collectors:\n  gpuu: {}\n", f"collectors.gpuu: unknown collector (known: {', '.join(sorted(REGISTRY))}); "
                                  "did you mean 'gpu'?"),
    ("collectors:\n  disk:\n    device-exclude: '('\n", "collectors.disk.device-exclude: not a valid regular"),
    ("collectors:\n  gpu:\n    max-processes: 0\n", "collectors.gpu.max-processes: expected a positive"),
    ("push:\n  max-job: 3\n", "push.max-job: unknown setting"),
    ("push:\n  job-expiry: soon\n", "push.job-expiry: expected a duration"),
    ("collectors:\n  kubernetes:\n    timeout: 2h\n",
     "collectors.kubernetes.timeout: expected a duration of at most 1h"),
    ("colectors: {}\n",
     "colectors: unknown top-level key (known: collectors, push, status); did you mean 'collectors'?"),
])
def test_a_config_file_error_names_the_file_and_the_key(tmp_path: Path, content: str, names: str) -> None:
    config = tmp_path / "exporter.yml"
    config.write_text(content)
    result = _run(f"--config.file={config}", "--web.listen-address=127.0.0.1:0")
    assert result.returncode == 2
    assert f"bottleneck-exporter: error: {config}: {names}" in result.stderr, result.stderr


def test_a_bad_flag_value_names_the_flag() -> None:
    result = _run("--collector.gpu.max-processes=0", "--web.listen-address=127.0.0.1:0")
    assert result.returncode == 2
    assert "error: --collector.gpu.max-processes: expected a positive whole number, got '0'" in result.stderr


@pytest.mark.parametrize(("value", "seconds"), [
    ("1h30m", 5400), ("10m", 600), ("90s", 90), ("500ms", 0.5), ("2d", 172800), ("1w", 604800), ("1y", 31536000),
    ("1.5h", 5400), ("0.5s", 0.5), ("30", 30), (" 10m ", 600), ("0", 0), (2, 2), (0.25, 0.25),
])
def test_a_duration_is_written_as_prometheus_writes_it(value: Any, seconds: float) -> None:
    assert parse_duration(value) == seconds


@pytest.mark.parametrize("value", ["", "soon", "10x", "30m1h", "1h1h", "10 m", "-1s", "1e3", "inf", ".5s", True])
def test_anything_else_is_not_a_duration(value: Any) -> None:
    with pytest.raises(ValueError, match="expected a duration like 1h30m, 10m, 90s or 500ms"):
        parse_duration(value)


# Every flag that takes a duration (and its config key, resolved by the same parser).
DURATION_FLAGS = ("--push.job-expiry", "--collector.kubernetes.timeout", "--collector.kubernetes.refresh-interval",
                  "--web.status-interval")


def _duration_flag(flag: str, value: str) -> float:
    """``flag=value`` as the exporter resolves it, in seconds."""
    args = build_parser().parse_args([f"{flag}={value}"])
    if flag == "--web.status-interval":
        return float(args.status_interval)
    prefix, name = flag[2:].rsplit(".", 1)
    if prefix == "push":
        return float(push_settings.settings(args, {})[name])
    collector = prefix.removeprefix("collector.")
    values, _ = option_values(REGISTRY[collector].options, {}, f"collectors.{collector}", args, prefix,
                              prefix.replace(".", "_"))
    return float(values[name])


@pytest.mark.parametrize("flag", DURATION_FLAGS)
@pytest.mark.parametrize(("value", "seconds"), [("1h", 3600), ("1m30s", 90), ("500ms", 0.5), ("0.5s", 0.5),
                                                ("30", 30)])
def test_every_duration_flag_takes_the_one_syntax(flag: str, value: str, seconds: float) -> None:
    assert _duration_flag(flag, value) == seconds


@pytest.mark.parametrize("flag", DURATION_FLAGS)
def test_a_duration_flag_refuses_another_syntax_naming_itself(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    if flag == "--web.status-interval":  # an argparse flag: argparse names it
        with pytest.raises(SystemExit):
            _duration_flag(flag, "30m1h")
        assert f"argument {flag}: expected a duration like 1h30m" in capsys.readouterr().err
    else:
        with pytest.raises(ConfigError, match=f"^{re.escape(flag)}: expected a duration like 1h30m"):
            _duration_flag(flag, "30m1h")


def test_diagnose_help_shows_examples() -> None:
    result = _run("diagnose", "--help")
    assert result.returncode == 0
    assert "examples:" in result.stdout
    assert "bottleneck-exporter diagnose --prometheus.url=http://prometheus:9090" in result.stdout
    assert "(default: 1m)" in result.stdout and "60.0" not in result.stdout


def test_a_misspelled_diagnose_flag_gets_diagnose_s_own_flag() -> None:
    result = _run("diagnose", "--windw=5")
    assert result.returncode == 2 and "did you mean --window?" in result.stderr, result.stderr
    result = _run("diagnose", "--no-collector.cpuu", "--window=1")
    assert result.returncode == 2 and "did you mean --no-collector.cpu?" in result.stderr, result.stderr


# -- the import graph -------------------------------------------------------------------------------------------------
def _imports(path: Path, module: str) -> set[str]:
    """Every exporter module ``path`` imports, at the top or inside a function, TYPE_CHECKING blocks aside."""
    tree = ast.parse(path.read_text())
    typing_only = {id(node) for block in ast.walk(tree) if isinstance(block, ast.If)
                   and "TYPE_CHECKING" in ast.unparse(block.test) for stmt in block.body for node in ast.walk(stmt)}
    found: set[str] = set()
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {name for name in found if name.startswith("bottleneck_exporter")}


def _graph() -> dict[str, set[str]]:
    modules = {}
    for path in (ROOT / "exporter").rglob("*.py"):
        # The source folder exporter/ installs as the package bottleneck_exporter.
        parts = ("bottleneck_exporter", *path.relative_to(ROOT / "exporter").with_suffix("").parts)
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = path
    return {name: {dep for dep in _imports(path, name) if dep in modules and dep != name}
            for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for dep in graph[node]:
            if dep not in index:
                visit(dep)
                low[node] = min(low[node], low[dep])
            elif dep in on_stack:
                low[node] = min(low[node], index[dep])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(component)

    sys.setrecursionlimit(10_000)
    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_anywhere_in_the_package() -> None:
    """Once: catalogue -> sources -> scenarios -> catalogue (the daemon depended on test data), the status page
    importing the diagnose command line, hook/collective.py and collective_fsdp1.py importing each other, and the
    dashboards package importing its own modules that import it. Imports inside functions count."""
    graph = _graph()
    heuristics = f"{PACKAGE}.heuristics"
    assert f"{heuristics}.areas" in graph[f"{heuristics}.catalogue"] \
        and f"{PACKAGE}.hook.collective.clock" in graph[f"{PACKAGE}.hook.collective.fsdp1"] \
        and f"{PACKAGE}.parts" in graph[f"{PACKAGE}.verdicts.standalone"], \
        "the graph lost the edges it should see: the check would prove nothing"
    assert not _cycles(graph)


def _reachable(graph: dict[str, set[str]], roots: set[str]) -> set[str]:
    found, todo = set(), list(roots)
    while todo:
        module = todo.pop()
        if module not in found:
            found.add(module)
            todo.extend(graph[module])
    return found


# The daemon's entry points: the command line, the status page, diagnose and run.
DAEMON_ROOTS = tuple(f"{PACKAGE}.{m}" for m in ("cli", "status", "diagnose", "run.command"))
TEST_DATA = (f"{PACKAGE}.heuristics.scenarios", f"{PACKAGE}.heuristics.generate")


def test_the_daemon_never_imports_the_scenario_table() -> None:
    """The scenario table is test data; the daemon reached it through catalogue -> sources -> scenarios. Neither
    an import the daemon runs nor one inside a function it may call leads there."""
    assert not {m for m in _reachable(_graph(), set(DAEMON_ROOTS))
                if any(m == d or m.startswith(f"{d}.") for d in TEST_DATA)}
    loaded = _loaded_after("import " + ", ".join(DAEMON_ROOTS))
    assert f"{PACKAGE}.heuristics.catalogue" in loaded, "the catalogue was not imported: the check would prove nothing"
    assert not _daemon_modules(loaded, TEST_DATA)


def _loaded_after(statement: str) -> set[str]:
    code = f"import sys; {statement}; print(' '.join(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    return set(result.stdout.split())


# The hook shares only bottleneck_exporter.wire with the receiver: nothing of push/, not even its __init__.
DAEMON_ONLY = ("prometheus_client", "yaml", "bcrypt", "pynvml", "psutil", *(f"{PACKAGE}.{m}" for m in (
    "collectors", "config", "parts", "status", "push", "heuristics", "cli", "web", "gpu")))


def _daemon_modules(loaded: set[str], names: tuple[str, ...]) -> set[str]:
    return {m for m in loaded if any(m == d or m.startswith(d + ".") for d in names)}


def test_importing_the_hook_pulls_in_nothing_only_the_daemon_needs() -> None:
    loaded = _loaded_after("from bottleneck_exporter.hook import instrument")
    assert "bottleneck_exporter.hook.session" in loaded, "the hook was not imported: the check would prove nothing"
    assert "bottleneck_exporter.wire.schema" in loaded, "the hook no longer builds datagrams from wire.schema"
    assert not _daemon_modules(loaded, (*DAEMON_ONLY, "torch"))


def test_the_framework_callbacks_pull_in_none_of_the_daemon_s_modules() -> None:
    # Lightning and transformers bring torch (and their own YAML, NVML...) with them; ours must add nothing.
    loaded = _loaded_after("import bottleneck_exporter.hook.lightning, bottleneck_exporter.hook.huggingface")
    assert not _daemon_modules(loaded, tuple(d for d in DAEMON_ONLY if d.startswith("bottleneck_exporter.")))


def test_the_status_page_judges_with_the_engine_not_the_diagnose_command_line() -> None:
    """Regression: the status page imported the diagnose CLI for its evaluator."""
    loaded = _loaded_after("import bottleneck_exporter.status")
    assert f"{PACKAGE}.verdicts.evaluation" in loaded, "the page's evaluator was not loaded: the check proves nothing"
    assert f"{PACKAGE}.diagnose" not in loaded
