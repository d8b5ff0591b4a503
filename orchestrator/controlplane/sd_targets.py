"""Engines as scrape targets: the labels every engine series gets, shared by the static targets of
`orchestrator up` and the HTTP service discovery the control plane serves.

Engines export vLLM's names with only `model_name` and `engine`; the target labels say which site,
generation, pool, replica and node a series is from, so rules and dashboards can group by them.
This module is pure (no Ray, no sockets) so the monitoring layer can import it too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final
from urllib.parse import urlsplit

from orchestrator.core.records import Replica

ENGINE_LABEL_NAMES: Final = ("site", "generation", "pool", "replica", "node")
_DEFAULT_PORTS: Final = {"http": 80, "https": 443}


def engine_labels(replica: Replica, node: str | None = None) -> dict[str, str]:
    """The target labels of `replica`'s engine; `node` overrides its Ray node id (a display name),
    and no `node` label is set for a replica on no known node (an external endpoint)."""
    labels = {
        "site": replica.site,
        "generation": replica.generation.value,
        "pool": replica.pool,
        "replica": replica.replica_id,
    }
    node = node or replica.node
    if node:
        labels["node"] = node
    return labels


def address_of(url: str) -> str:
    """host:port of an http(s) URL; raises ValueError when it has no explicit port."""
    parts = urlsplit(url)
    if parts.hostname is None or parts.port is None:
        raise ValueError(f"{url!r}: expected http://host:port")
    return _address(parts.hostname, parts.port)


def engine_target_groups(
    replicas: Sequence[Replica], node_names: Mapping[str, str]
) -> list[dict[str, Any]]:
    """Prometheus HTTP SD's document: one `{"targets": [...], "labels": {...}}` group per replica.

    `node_names` maps Ray node ids to the names the node's exporter uses, so engine and exporter
    series of one node share the `node` label; unmapped ids are used as they are. An https replica
    is scraped over https (`__scheme__`), a URL without a port on its scheme's default port.
    """
    groups = []
    for replica in sorted(replicas, key=lambda r: r.replica_id):
        parts = urlsplit(replica.url)
        if parts.hostname is None or parts.scheme not in _DEFAULT_PORTS:
            continue  # not a URL Prometheus could scrape; the registry validates them anyway
        labels = engine_labels(replica, node_names.get(replica.node))
        if parts.scheme == "https":
            labels["__scheme__"] = "https"
        port = parts.port or _DEFAULT_PORTS[parts.scheme]
        groups.append({"targets": [_address(parts.hostname, port)], "labels": labels})
    return groups


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
