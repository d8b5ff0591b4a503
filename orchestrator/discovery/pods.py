"""What a pod object says about serving: pure reading of Kubernetes-shaped dicts, no client.

A pod serves once it is Running, its `Ready` condition is True (its readiness probe passes), it
has an IP and it is not being deleted; anything else is not (yet, or any longer) a replica.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class PodEndpoint:
    """A ready pod: its name (unique in its namespace) and the URL of its serving port."""

    name: str
    url: str


def ready_endpoint(pod: Mapping[str, Any], port: int) -> PodEndpoint | None:
    """The pod's endpoint on `port` when it can serve now, else None."""
    metadata = pod.get("metadata") or {}
    status = pod.get("status") or {}
    name = metadata.get("name")
    ip = status.get("podIP")
    if not name or not ip or metadata.get("deletionTimestamp"):
        return None
    if status.get("phase") != "Running" or not _condition_true(status, "Ready"):
        return None
    host = f"[{ip}]" if ":" in ip else ip
    return PodEndpoint(str(name), f"http://{host}:{port}")


def _condition_true(status: Mapping[str, Any], kind: str) -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True" for c in status.get("conditions") or ()
    )


def selector_string(labels: Mapping[str, str]) -> str:
    """A label map as the API's `labelSelector` query (`a=b,c=d`), in a stable order."""
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items()))
