"""The push receiver's settings: ``--push.*`` flags and the ``push:`` section of the YAML config.

Builds an ``bottleneck_exporter.push.receiver.PushReceiver`` (a prometheus_client collector with start()/stop()) that
listens on a Unix datagram socket, and on loopback UDP when asked, for the per-step timings the in-process
hook (``bottleneck_exporter.hook``) sends. See docs/hook.md for every flag and the datagram schema. Exposes, once
running::

    bottleneck_push_datagrams_total 5120.0
    bottleneck_train_phase_seconds_total{training_job="resnet",phase="data_wait",rank="0"} 10.2

The options (``OPTIONS``, at the end) are registered and resolved as a collector's are: ``Option`` rows, flags from
``bottleneck_exporter.config.add_option_flags``, values by ``bottleneck_exporter.config.option_values`` (registered
default < config file < flag). A bad value is a ConfigError naming the flag, or the file and key.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import re
import stat
from typing import TYPE_CHECKING, Any

from bottleneck_exporter.config import ConfigError, add_option_flags, section_values
from bottleneck_exporter.options import Option, parse_bool, parse_mode, parse_positive_int, positive_duration
from bottleneck_exporter.training.registry import TrainingRegistry
from bottleneck_exporter.wire.paths import DEFAULT_SOCKET, socket_candidates

if TYPE_CHECKING:
    from bottleneck_exporter.push.receiver import PushReceiver

log = logging.getLogger(__name__)


def add_arguments(parser: argparse._ActionsContainer) -> None:
    """Add ``--push.*`` flags from ``OPTIONS``."""
    add_option_flags(parser, OPTIONS, "push", "push")


def settings(args: argparse.Namespace, file_config: dict[str, Any], source: str = "") -> dict[str, Any]:
    """Parsed settings {key: value}; raises ConfigError naming the flag, or the file (``source``) and key."""
    parsed, given = section_values(file_config, "push", OPTIONS, args, source)
    parsed["socket_given"] = "socket" in given
    if parsed["listen-udp"] is not None and not parsed["allow-non-loopback"]:
        host = parsed["listen-udp"][0]
        if not ipaddress.ip_address(host).is_loopback:
            raise ConfigError(f"--push.listen-udp: {host} is not a loopback address; anyone who can reach it "
                              "could push (add --push.allow-non-loopback to accept that)")
    return parsed


def build_receiver(args: argparse.Namespace, file_config: dict[str, Any],
                   training: TrainingRegistry, source: str = "") -> PushReceiver | None:
    """A bound, not yet started receiver, or None with --push.disable or when no socket could be bound."""
    conf = settings(args, file_config, source)
    if conf["disable"]:
        log.info("push receiver disabled (--push.disable)")
        return None
    from bottleneck_exporter.push.liveness import ProcessTable
    from bottleneck_exporter.push.receiver import PushReceiver
    from bottleneck_exporter.push.store import JobStore

    # Senders are looked up where the collectors read processes: --path.procfs (/proc without that flag).
    processes = ProcessTable(getattr(args, "procfs", "/proc"))
    store = JobStore(conf["max-jobs"], conf["max-ranks-per-job"], conf["job-expiry"], processes=processes)
    receiver = PushReceiver(store, training)
    if conf["socket_given"]:
        try:
            _prepare_directory(conf["socket"], private=False)
            receiver.bind_unix(conf["socket"], conf["socket-mode"], conf["socket-group"])
        except (OSError, ValueError) as err:
            raise ConfigError(f"--push.socket={conf['socket']}: {err}") from None
    else:
        _bind_first_usable(receiver, conf)
    if conf["listen-udp"] is not None:
        host, port = conf["listen-udp"]
        try:
            receiver.bind_udp(host, port)
        except OSError as err:
            receiver.stop()
            raise ConfigError(f"--push.listen-udp={host}:{port}: {err.strerror or err}") from None
    if receiver.unix_path is None and receiver.udp_address is None:
        return None
    return receiver


def _bind_first_usable(receiver: PushReceiver, conf: dict[str, Any]) -> None:
    tried: list[str] = []
    for index, path in enumerate(socket_candidates()):
        try:
            _prepare_directory(path, private=index > 0)
            receiver.bind_unix(path, conf["socket-mode"], conf["socket-group"])
        except (OSError, ValueError) as err:
            tried.append(f"{path}: {err}")
            continue
        if tried:
            log.warning("push socket %s not usable (%s); listening on %s instead (point the hook at it with "
                        "BOTTLENECK_PUSH_ADDRESS=unix://%s if it runs as another user)",
                        DEFAULT_SOCKET, tried[0].split(": ", 1)[1], path, path)
        return
    log.error("no usable push socket (tried %s); running without the Unix push receiver", "; ".join(tried))


def _prepare_directory(path: str, private: bool) -> None:
    """Create the socket's directory. A private fallback directory must be ours and closed to others."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, mode=0o700 if private else 0o755, exist_ok=True)
    if private:
        info = os.lstat(directory)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
            raise PermissionError(f"{directory} is not a directory owned by uid {os.getuid()} with mode 0700")


def _parse_path(value: Any) -> str:
    text = str(value)
    if not text or not os.path.isabs(text):
        raise ValueError(f"expected an absolute path, got {value!r}")
    if len(text.encode()) > 107:
        raise ValueError("Unix socket paths are limited to 107 bytes")
    return text


def _parse_group(value: Any) -> str | None:
    text = str(value).strip()
    if not text:
        raise ValueError("expected a group name or id")
    return text


def _parse_udp(value: Any) -> tuple[str, int]:
    text = str(value).strip()
    match = re.fullmatch(r"\[([0-9a-fA-F:.]+)\]:(\d+)|([^:\[\]]+):(\d+)", text)
    if not match:
        raise ValueError(f"expected HOST:PORT (or [IPv6]:PORT), got {value!r}")
    host = match.group(1) or match.group(3)
    port = int(match.group(2) or match.group(4))
    if host == "localhost":
        host = "127.0.0.1"
    try:
        ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(f"expected an IP address or localhost, got {host!r}") from None
    if not 0 < port < 65536:
        raise ValueError(f"port {port} out of range 1-65535")
    return host, port


# The push receiver's options, registered like a collector's (``bottleneck_exporter.options.Option``) and
# resolved by the same precedence (``bottleneck_exporter.config.option_values``): flags ``--push.<name>``, YAML
# ``push.<name>``. Bounds sized for a node, not a cluster: a job has at most one rank per GPU here (8 on HGX/DGX nodes,
# 16 leaves room for 16-GPU nodes and CPU ranks) and a node runs a handful of jobs (8: one per GPU). At these bounds the
# push series are 8 x 16 ranks x 41 series = 5,248 (0.42 MB of text, docs/hook.md); the old 32 x 64 let one local user
# add 84k series and a 6.8 MB scrape. MIG-partitioned nodes running many small jobs raise them by flag.
OPTIONS: tuple[Option, ...] = (
    Option("socket", DEFAULT_SOCKET,
           "Unix datagram socket the training hook sends to; when the default's directory cannot be created, "
           "falls back to $XDG_RUNTIME_DIR/bottleneck-exporter/ then /tmp/bottleneck-exporter-<uid>/",
           parse=_parse_path),
    Option("socket-mode", "0660", "Octal permissions of the socket file", parse=parse_mode),
    Option("socket-group", None, "Group owning the socket file (its members may push; default: the "
           "exporter's group)", parse=_parse_group),
    Option("listen-udp", None, "Also listen on this loopback HOST:PORT for UDP datagrams (default: off)",
           parse=_parse_udp),
    Option("allow-non-loopback", False,
           "Allow a non-loopback --push.listen-udp address (anyone who reaches it can push)", parse=parse_bool,
           switch=True),
    Option("disable", False, "Run without the push receiver", parse=parse_bool, switch=True),
    Option("job-expiry", "10m",
           "Forget a job/rank silent for this long (90s, 10m, 1h), unless it pushed over the Unix socket and its "
           "process still runs (a hung trainer stays visible until it exits)",
           parse=positive_duration()),
    Option("max-jobs", 8, "Training jobs tracked at once; more are counted and dropped", parse=parse_positive_int),
    Option("max-ranks-per-job", 16, "Ranks tracked per job; more are counted and dropped",
           parse=parse_positive_int),
)
