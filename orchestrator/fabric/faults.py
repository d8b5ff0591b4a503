"""Injected faults, kept in `<fabric root>/faults.json` where the running simulator polls them.

`orchestrator fault` edits the file (read, change, atomic replace, under an exclusive lock so two
commands never lose each other's edit); the simulator reads it every step. A fault has an
optional end time, so `--duration` needs no process to remember to clear it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from orchestrator.fabric.model import FaultKind

FAULTS_FILE: Final = "faults.json"
_LOCK_FILE: Final = "faults.lock"


@dataclass(frozen=True, slots=True)
class Fault:
    """`kind` on `node` since `since_s` (Unix time) until `until_s` (None: until cleared)."""

    node: str
    kind: FaultKind
    since_s: float
    until_s: float | None = None

    def active(self, now_s: float) -> bool:
        return self.since_s <= now_s and (self.until_s is None or now_s < self.until_s)

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "kind": self.kind.value, "since": self.since_s,
                "until": self.until_s}  # fmt: skip

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Fault:
        until = raw.get("until")
        return cls(
            str(raw["node"]),
            FaultKind(raw["kind"]),
            float(raw["since"]),
            None if until is None else float(until),
        )


def read_faults(fabric_root: Path) -> list[Fault]:
    """The faults on file; none when there is no file. A file that does not parse is an error
    (ValueError), so a hand-edited typo is not silently read as "no faults"."""
    path = fabric_root / FAULTS_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    try:
        return [Fault.from_json(entry) for entry in json.loads(text)]
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{path}: not a faults file ({error})") from None


def active_faults(fabric_root: Path, node: str, now_s: float) -> frozenset[FaultKind]:
    """The kinds of fault active on `node` at `now_s`."""
    return frozenset(f.kind for f in read_faults(fabric_root) if f.node == node and f.active(now_s))


def add_fault(fabric_root: Path, fault: Fault) -> None:
    """Add `fault`, replacing one of the same kind on the same node."""
    with _locked(fabric_root):
        kept = [f for f in read_faults(fabric_root) if (f.node, f.kind) != (fault.node, fault.kind)]
        _write(fabric_root, [*kept, fault])


def remove_faults(
    fabric_root: Path, *, node: str | None = None, kind: FaultKind | None = None
) -> list[Fault]:
    """Remove the faults matching `node` and `kind` (None matches any); returns those removed."""
    with _locked(fabric_root):
        faults = read_faults(fabric_root)
        removed = [
            f
            for f in faults
            if (node is None or f.node == node) and (kind is None or f.kind is kind)
        ]
        _write(fabric_root, [f for f in faults if f not in removed])
    return removed


@contextlib.contextmanager
def _locked(fabric_root: Path) -> Iterator[None]:
    with open(fabric_root / _LOCK_FILE, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _write(fabric_root: Path, faults: list[Fault]) -> None:
    handle, temporary = tempfile.mkstemp(dir=fabric_root, prefix=".faults.")
    with os.fdopen(handle, "w") as out:
        json.dump([f.to_json() for f in faults], out, indent=1)
    os.replace(temporary, fabric_root / FAULTS_FILE)
