"""Writes a set of files into a folder without losing what a person changed there.

Reads and writes ``DIR/SHA256SUMS`` (``sha256sum`` format, so ``sha256sum -c SHA256SUMS`` in DIR checks it):
the files the last write wrote, with their content then. A file of the new set that is absent is added; one
equal to the new text is left alone; one that differs is updated if it still holds what was written last time,
else it is a conflict (edited, or never ours). A file written last time that the new set lacks (another bundle,
a renamed file) is removed on the same terms. Any conflict and nothing is written, unless ``force``. Exposes
``write(root, files, force) -> Outcome``; raises ``WriteError`` with a one-line message.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import posixpath
import tempfile
from collections.abc import Mapping
from pathlib import Path

MANIFEST = "SHA256SUMS"


class WriteError(Exception):
    """The folder cannot be written, or holds files the write would clobber: one line, for the command."""


@dataclasses.dataclass
class Outcome:
    added: list[str] = dataclasses.field(default_factory=list)
    updated: list[str] = dataclasses.field(default_factory=list)
    unchanged: list[str] = dataclasses.field(default_factory=list)
    removed: list[str] = dataclasses.field(default_factory=list)
    replaced: list[str] = dataclasses.field(default_factory=list)  # conflicts overwritten or removed by force

    def summary(self) -> str:
        counts = [(len(self.added), "added"), (len(self.updated), "updated"), (len(self.unchanged), "unchanged"),
                  (len(self.removed), "removed"), (len(self.replaced), "replaced by --force")]
        return ", ".join(f"{n} {what}" for n, what in counts if n) or "nothing to do"


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_manifest(root: Path) -> dict[str, str]:
    """path → sha256 of what the last write wrote; lines that are not ``<sha256>  <relative path>`` of a path
    inside ``root`` are ignored (a file they name is then treated as not ours)."""
    try:
        text = (root / MANIFEST).read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError, UnicodeDecodeError):
        return {}
    except OSError as err:
        raise WriteError(f"{root / MANIFEST}: {err.strerror}") from None
    found = {}
    for line in text.splitlines():
        checksum, sep, path = line.partition("  ")
        normal = posixpath.normpath(path)
        if (sep and len(checksum) == 64 and all(c in "0123456789abcdef" for c in checksum) and path == normal
                and not normal.startswith(("/", "../")) and normal not in (".", "..", MANIFEST)):
            found[path] = checksum
    return found


def _current(path: Path) -> bytes | None:
    """The file's bytes; None where there is nothing; WriteError where something else is in the way."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise WriteError(f"{path} is a directory, where the bundle has a file") from None
    except OSError as err:
        raise WriteError(f"{path}: {err.strerror}") from None


def write(root: Path, files: Mapping[str, str], force: bool = False) -> Outcome:
    """Write ``files`` (path relative to ``root`` → text) into ``root``, creating it; see the module's rules."""
    try:
        root.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise WriteError(f"{root} exists and is not a directory") from None
    except OSError as err:
        raise WriteError(f"cannot create {root}: {err.strerror}") from None
    if not os.access(root, os.W_OK | os.X_OK):
        raise WriteError(f"{root} is not writable")
    written = read_manifest(root)
    outcome = Outcome()
    writes: dict[str, bytes] = {}
    conflicts: list[str] = []
    for relative, text in files.items():
        data = text.encode("utf-8")
        on_disk = _current(root / relative)
        if on_disk == data:
            outcome.unchanged.append(relative)
            continue
        writes[relative] = data
        if on_disk is None:
            outcome.added.append(relative)
        elif written.get(relative) == digest(on_disk):
            outcome.updated.append(relative)
        else:
            conflicts.append(relative)
    removals = []
    for relative in sorted(set(written) - set(files)):
        on_disk = _current(root / relative)
        if on_disk is None:
            continue
        removals.append(relative)
        if written[relative] == digest(on_disk):
            outcome.removed.append(relative)
        else:
            conflicts.append(relative)
    if conflicts and not force:
        raise WriteError(f"{len(conflicts)} file(s) in {root} differ from the bundle and from what bundle write "
                         f"last wrote there (edited?), kept as they are: {', '.join(sorted(conflicts))}; "
                         "--force replaces them")
    outcome.replaced = sorted(conflicts)
    # The manifest says what is on disk at the end, even where a write fails half-way: the next run then
    # treats the files written so far as ours.
    manifest = {p: c for p, c in written.items() if p in files or p in removals}
    manifest.update((p, digest(files[p].encode("utf-8"))) for p in outcome.unchanged)
    failure: OSError | None = None
    try:
        for relative, data in writes.items():
            _replace(root / relative, data)
            manifest[relative] = digest(data)
        for relative in removals:
            (root / relative).unlink()
            del manifest[relative]
            _prune(root, (root / relative).parent)
    except OSError as err:
        failure = err
    try:
        _replace(root / MANIFEST, "".join(f"{c}  {p}\n" for p, c in sorted(manifest.items())).encode())
    except OSError as err:
        failure = failure or err
    if failure is not None:
        raise WriteError(f"{failure.filename or root}: {failure.strerror or failure}")
    return outcome


def _replace(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file beside it: a reader sees the old file or the new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        # The mode open() would give it: mkstemp's 0600 would hide it from a Prometheus running as another user.
        os.chmod(temporary, 0o666 & ~_umask())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _prune(root: Path, folder: Path) -> None:
    """Remove the folders a removal left empty, up to ``root``."""
    while folder != root and folder.is_relative_to(root):
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent
