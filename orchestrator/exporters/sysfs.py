"""Read-only access to a sysfs tree under a configurable root.

The root plays the role of `/sys` (tests and the embedded stack point it at a directory they
build). Paths are relative to it, e.g. `class/infiniband/mlx5_0/ports/1/counters/port_xmit_data`.
A missing file means "no data" (`None`, never an exception); a file that exists but does not hold
what its format promises raises `MalformedFile`, which names the path so one bad file can be
logged and counted while the rest of the scrape goes on.
"""

from __future__ import annotations

import os
from pathlib import Path

_PAGE = 4096


class MalformedFile(ValueError):
    """A sysfs (or ethtool) file whose contents do not parse as its format promises."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


class SysfsRoot:
    """A sysfs tree rooted at `root` (a real `/sys` or a fake one); reads happen on each call.

    Paths are joined as strings rather than `Path` objects because a full scrape reads several
    hundred small files and `Path` arithmetic would dominate its cost.
    """

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)
        self._prefix = os.fspath(self.root)

    def __repr__(self) -> str:
        return f"SysfsRoot({self._prefix!r})"

    def path(self, rel: str) -> str:
        """The absolute path of `rel` under the root."""
        return os.path.join(self._prefix, rel)

    def read_text(self, rel: str) -> str | None:
        """The file's contents without the trailing newline; None when it does not exist or
        cannot be read (sysfs answers some reads, e.g. `speed` of a down link, with an error)."""
        try:
            data = _read_bytes(os.path.join(self._prefix, rel))
        except OSError:
            return None
        try:
            return data.decode().rstrip("\n")
        except UnicodeDecodeError:
            raise MalformedFile(rel, "not UTF-8 text") from None

    def read_int(self, rel: str) -> int | None:
        """The file's single integer (decimal, or hex with a 0x prefix); None when missing.

        Raises `MalformedFile` when the file holds anything else (empty, words, several numbers).
        """
        text = self.read_text(rel)
        if text is None:
            return None
        return parse_int(text, rel)

    def list_dir(self, rel: str) -> list[str]:
        """The entry names of a directory, sorted; empty when it is missing or not a directory."""
        try:
            return sorted(os.listdir(os.path.join(self._prefix, rel)))
        except OSError:
            return []

    def link_name(self, rel: str) -> str | None:
        """The last component of a symlink's target (sysfs `device/driver` points at the driver's
        directory, so this is the kernel driver's name); None when `rel` is not a symlink."""
        try:
            target = os.readlink(os.path.join(self._prefix, rel))
        except OSError:
            return None
        return os.path.basename(target.rstrip("/")) or None


def _read_bytes(path: str) -> bytes:
    """A whole small file through the raw descriptor: sysfs answers in one read of at most a
    page, and skipping Python's buffered file objects halves the cost of a scrape's reads."""
    fd = os.open(path, os.O_RDONLY)
    try:
        chunks = [os.read(fd, _PAGE)]
        while len(chunks[-1]) == _PAGE:
            chunks.append(os.read(fd, _PAGE))
    finally:
        os.close(fd)
    return b"".join(chunks)


def parse_int(text: str, where: str) -> int:
    """Parse one integer as sysfs writes it: decimal, or hex with a 0x prefix (PCI ids)."""
    value = text.strip()
    try:
        if value[:2].lower() == "0x":
            return int(value[2:], 16)
        return int(value, 10)
    except ValueError:
        raise MalformedFile(where, f"expected an integer, found {text[:40]!r}") from None


def resolve_sysfs_root(path: Path | str) -> Path:
    """The directory that plays `/sys`: `path` itself, or `path/sys` when `path` is a filesystem
    root (has `sys/` but no `class/`), so `--sysfs-root /` and `--sysfs-root /sys` read the same."""
    root = Path(path)
    if not (root / "class").is_dir() and (root / "sys" / "class").is_dir():
        return root / "sys"
    return root
