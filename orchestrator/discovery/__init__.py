"""Kubernetes discovery: the ready pods behind a label selector, kept current by a watch.

Layer 9: may import `core/` and the layers below the frontends; the control plane's external
pools use it.
"""

from __future__ import annotations

from orchestrator.discovery.pod_watch import PodWatch, kubernetes_api, own_namespace
from orchestrator.discovery.pods import PodEndpoint, ready_endpoint, selector_string

__all__ = [
    "PodEndpoint",
    "PodWatch",
    "kubernetes_api",
    "own_namespace",
    "ready_endpoint",
    "selector_string",
]
