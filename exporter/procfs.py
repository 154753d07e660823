"""Small readers for /proc and /sys files. A missing or unreadable file is "no data", never an error:
processes vanish between listing and reading, and kernels differ in what they provide."""

from __future__ import annotations

import os


def read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except (FileNotFoundError, ProcessLookupError, PermissionError, NotADirectoryError, IsADirectoryError):
        return None
    except OSError:
        # e.g. ESRCH from a task that exited while we read it, EINVAL from some sysfs attributes.
        return None


def read_int(path: str) -> int | None:
    text = read_text(path)
    if text is None:
        return None
    try:
        return int(text.strip())
    except ValueError:
        return None


def read_key_values(path: str) -> dict[str, int]:
    """Parse ``Key:   123 kB`` (meminfo, status) or ``key 123`` (vmstat) lines; kB values become bytes."""
    result: dict[str, int] = {}
    text = read_text(path)
    if text is None:
        return result
    for line in text.splitlines():
        parts = line.replace(":", " ").split()
        if len(parts) < 2:
            continue
        try:
            value = int(parts[1])
        except ValueError:
            continue
        if len(parts) >= 3 and parts[2] == "kB":
            value *= 1024
        result[parts[0]] = value
    return result


def list_dir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


# USER_HZ is 100 on every Linux architecture exported to user space; /proc/stat counts in it.
USER_HZ = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
