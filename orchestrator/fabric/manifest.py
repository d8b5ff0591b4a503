"""Where a running stack's fabric lives, and what is in it: the link from `orchestrator fault` to
`orchestrator up`.

`up` writes `<fabric root>/stack.json` once its simulated nodes run and removes it when it stops.
The fabric root is found from the control plane's port (one stack per control plane), so the
fault commands take the same `--control-plane` as `status`, `drain` and `scale`.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Final

MANIFEST_FILE: Final = "stack.json"


@dataclass(frozen=True, slots=True)
class NodeEntry:
    """One simulated node: its name, where it sits, its Ray node, its exporter and its tree."""

    name: str
    site: str
    generation: str
    ray_node: str
    replicas: tuple[str, ...]
    exporter_url: str
    root: str


@dataclass(frozen=True, slots=True)
class StackManifest:
    pid: int
    control_plane: str
    nodes: tuple[NodeEntry, ...]

    def node(self, name: str) -> NodeEntry | None:
        return next((n for n in self.nodes if n.name == name), None)


def default_fabric_root(control_plane: str) -> Path:
    """`<tmp>/orchestrator-<uid>/fabric-<control plane port>`: one per stack on this machine."""
    port = control_plane.rsplit(":", 1)[-1]
    return Path(tempfile.gettempdir()) / f"orchestrator-{os.getuid()}" / f"fabric-{port}"


def write_manifest(fabric_root: Path, manifest: StackManifest) -> None:
    handle, temporary = tempfile.mkstemp(dir=fabric_root, prefix=".stack.")
    with os.fdopen(handle, "w") as out:
        json.dump(asdict(manifest), out, indent=1)
    os.replace(temporary, fabric_root / MANIFEST_FILE)


def read_manifest(fabric_root: Path) -> StackManifest | None:
    """The manifest of the stack running there; None when there is none or its process is gone."""
    try:
        raw = json.loads((fabric_root / MANIFEST_FILE).read_text(encoding="utf-8"))
        manifest = StackManifest(
            pid=int(raw["pid"]),
            control_plane=str(raw["control_plane"]),
            nodes=tuple(
                NodeEntry(**{**entry, "replicas": tuple(entry["replicas"])})
                for entry in raw["nodes"]
            ),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return manifest if _alive(manifest.pid) else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
