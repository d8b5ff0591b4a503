"""`ethtool -S` NIC statistics behind a small reader interface.

The real reader runs the `ethtool` binary; tests and the embedded stack feed text files in the
same format (`<dir>/<netdev>.txt`). Both return None for "no data" (no binary, no such netdev, no
file), and raise `MalformedFile` for output that is not `key: integer` lines.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from pathlib import Path
from typing import Protocol, runtime_checkable

from orchestrator.exporters.sysfs import MalformedFile

LOG = logging.getLogger(__name__)
ETHTOOL_TIMEOUT_S = 2.0
_HEADER = "NIC statistics:"


@runtime_checkable
class EthtoolReader(Protocol):
    """Source of `ethtool -S` counters for one network interface."""

    def stats(self, netdev: str) -> dict[str, int] | None:
        """The interface's counters by key; None when there is no data for it."""


def parse_ethtool_stats(text: str, where: str) -> dict[str, int]:
    """Parse `ethtool -S` output: an optional `NIC statistics:` header, then `key: value` lines
    (keys without spaces, integer values); any other non-blank line raises `MalformedFile`."""
    stats: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        key, colon, value = line.rpartition(":")
        key = key.strip()
        try:
            if key and colon and " " not in key:
                stats[key] = int(value)
                continue
        except ValueError:
            pass
        if line.strip() not in ("", _HEADER):
            raise MalformedFile(where, f"line {number} is not 'key: integer': {line[:60]!r}")
    return stats


class FileEthtoolReader:
    """Reads `<directory>/<netdev>.txt` in `ethtool -S` format (tests, the fabric simulator)."""

    def __init__(self, directory: Path | str) -> None:
        self.directory = Path(directory)
        self._prefix = os.fspath(self.directory)

    def __repr__(self) -> str:
        return f"FileEthtoolReader({self._prefix!r})"

    def stats(self, netdev: str) -> dict[str, int] | None:
        path = os.path.join(self._prefix, f"{netdev}.txt")
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                text = handle.read()
        except OSError:
            return None
        return parse_ethtool_stats(text, path)


class CommandEthtoolReader:
    """Runs `ethtool -S <netdev>`; no data (not an error) when the binary is absent or the
    interface has no statistics, so a host without ethtool still exports everything else."""

    def __init__(self, binary: str = "ethtool", timeout_s: float = ETHTOOL_TIMEOUT_S) -> None:
        self.path = shutil.which(binary)
        self.timeout_s = timeout_s
        if self.path is None:
            LOG.info("%s not found: PFC and pause counters will not be exported", binary)

    def stats(self, netdev: str) -> dict[str, int] | None:
        if self.path is None:
            return None
        try:
            done = subprocess.run(
                [self.path, "-S", netdev],
                capture_output=True,
                text=True,
                timeout=self.timeout_s,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            LOG.warning("ethtool -S %s failed: %s", netdev, error)
            return None
        if done.returncode != 0:
            return None
        return parse_ethtool_stats(done.stdout, f"ethtool -S {netdev}")
