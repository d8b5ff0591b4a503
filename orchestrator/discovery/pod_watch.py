"""`PodWatch`: the ready endpoints of the pods matching a label selector, pushed on every change.

The usual list-then-watch of Kubernetes clients, kept thin over the `kubernetes` client: list the
pods once (which gives a `resourceVersion`), then watch from that version; each ADDED, MODIFIED or
DELETED event updates the pods held, and the callback gets the new set of ready endpoints whenever
it changes. A watch that ends (the server's timeout) resumes from the last version seen; a version
too old for the server (410 Gone, as an HTTP status or an ERROR event) means events were missed,
so the pods are listed again. Other failures (the API server restarting) are logged and retried,
relisting, after a jittered delay that starts below `retry_s` and doubles per failure up to
`MAX_RETRY_S` (`core.backoff`), so many watchers do not hit a recovering API server at once.
The client blocks, so `run` blocks: run it in a thread; `stop()` from any other thread ends it
promptly, closing the open watch.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from orchestrator.core.backoff import Backoff
from orchestrator.discovery.pods import PodEndpoint, ready_endpoint, selector_string

log = logging.getLogger(__name__)

DEFAULT_WATCH_TIMEOUT_S: Final = 300
DEFAULT_RETRY_S: Final = 2.0
MAX_RETRY_S: Final = 30.0
_HTTP_GONE: Final = 410
_CONNECT_TIMEOUT_S: Final = 5.0
_LIST_TIMEOUT_S: Final = 30.0
_SERVICE_ACCOUNT_NAMESPACE: Final = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")

EndpointsCallback = Callable[[Mapping[str, PodEndpoint]], None]


class _Gone(Exception):
    """The watched resourceVersion is too old: relist."""


def kubernetes_api() -> Any:
    """A `CoreV1Api` from the pod's service account, else from the kubeconfig ($KUBECONFIG, read
    now: the client reads it once, at import, or `~/.kube/config`)."""
    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    except config.ConfigException:
        config.load_kube_config(config_file=os.environ.get("KUBECONFIG"))  # type: ignore[no-untyped-call]
    return client.CoreV1Api()


def own_namespace() -> str:
    """The namespace this process runs in: $POD_NAMESPACE, the service account's, or default."""
    if namespace := os.environ.get("POD_NAMESPACE"):
        return namespace
    try:
        return _SERVICE_ACCOUNT_NAMESPACE.read_text(encoding="utf-8").strip() or "default"
    except OSError:
        return "default"


class PodWatch:
    """Watches the pods of `namespace` matching `selector`; `on_change` gets every new ready set.

    `on_change` is called from the thread running `run`, with a mapping of pod name to endpoint;
    the first call follows the first list (possibly empty), later ones only real changes.
    """

    def __init__(
        self,
        api: Any,
        *,
        namespace: str,
        selector: Mapping[str, str],
        port: int,
        on_change: EndpointsCallback,
        watch_timeout_s: int = DEFAULT_WATCH_TIMEOUT_S,
        retry_s: float = DEFAULT_RETRY_S,
    ) -> None:
        self._api = api
        self._namespace = namespace
        self._selector = selector_string(selector)
        self._port = port
        self._on_change = on_change
        self._watch_timeout_s = watch_timeout_s
        self._backoff = Backoff(retry_s, max(retry_s, MAX_RETRY_S))
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._response: Any = None  # the open watch, for `stop()` to close
        self._pods: dict[str, Mapping[str, Any]] = {}
        self._published: dict[str, PodEndpoint] | None = None
        self.lists = 0  # how many times the pods were listed (the first, then after 410 or errors)

    def run(self) -> None:
        """List, then watch, until `stop()`."""
        while not self._stopped.is_set():
            try:
                version = self._list()
                self._backoff.reset()
                while not self._stopped.is_set():
                    version = self._watch_from(version)
            except _Gone:
                log.info("pods %s: watch expired (410 Gone), listing again", self._selector)
            except Exception as exc:  # API server unreachable or restarting: relist later
                if self._stopped.is_set():
                    return
                delay_s = self._backoff.next_delay_s()
                log.warning("pods %s: %s; retrying in %.1fs", self._selector, exc, delay_s)
                self._stopped.wait(delay_s)

    def stop(self) -> None:
        """End `run` soon: closes a watch that is waiting for events."""
        self._stopped.set()
        with self._lock:
            if self._response is not None:
                self._response.shutdown()  # urllib3 >= 2.3: unblocks the read in `_watch_from`

    def _request(self, read_timeout_s: float, **query: Any) -> Any:
        """A raw response of the pods query; raises `_Gone` on 410, `ApiException` on others.

        The timeouts keep a silent API server from holding the thread: a watch is expected to
        stay quiet for up to its own `timeoutSeconds`.
        """
        response = self._api.list_namespaced_pod(
            self._namespace,
            label_selector=self._selector,
            _preload_content=False,
            _request_timeout=(_CONNECT_TIMEOUT_S, read_timeout_s),
            **query,
        )
        if not 200 <= response.status <= 299:
            body = response.data.decode("utf-8", errors="replace")
            response.release_conn()
            if response.status == _HTTP_GONE:
                raise _Gone(body)
            raise ApiException(status=response.status, reason=body[:200])
        return response

    def _list(self) -> str:
        response = self._request(_LIST_TIMEOUT_S)
        try:
            listing = json.loads(response.data)
        finally:
            response.release_conn()
        self.lists += 1
        self._pods = {pod["metadata"]["name"]: pod for pod in listing.get("items") or ()}
        self._publish()
        return str(listing["metadata"]["resourceVersion"])

    def _watch_from(self, version: str) -> str:
        """Apply events from `version` on until the watch ends; returns the last version seen."""
        response = self._request(
            self._watch_timeout_s + _LIST_TIMEOUT_S,
            watch=True,
            resource_version=version,
            allow_watch_bookmarks=True,
            timeout_seconds=self._watch_timeout_s,
        )
        with self._lock:
            if self._stopped.is_set():
                response.release_conn()
                return version
            self._response = response
        try:
            for line in iter_resp_lines(response):  # type: ignore[no-untyped-call]
                if line:
                    version = self._apply(json.loads(line), version)
        finally:
            with self._lock:
                self._response = None
            response.release_conn()
        return version

    def _apply(self, event: Mapping[str, Any], version: str) -> str:
        kind = event.get("type")
        pod = event.get("object") or {}
        if kind == "ERROR":
            if pod.get("code") == _HTTP_GONE:
                raise _Gone(pod.get("message"))
            raise ApiException(status=pod.get("code"), reason=pod.get("message"))
        metadata = pod.get("metadata") or {}
        name = metadata.get("name")
        if kind in ("ADDED", "MODIFIED") and name:
            self._pods[name] = pod
        elif kind == "DELETED" and name:
            self._pods.pop(name, None)
        elif kind != "BOOKMARK":
            log.debug("pods %s: ignoring a %s event", self._selector, kind)
        self._publish()
        return str(metadata.get("resourceVersion") or version)

    def _publish(self) -> None:
        endpoints = {
            endpoint.name: endpoint
            for pod in self._pods.values()
            if (endpoint := ready_endpoint(pod, self._port)) is not None
        }
        if endpoints != self._published:
            self._published = endpoints
            try:
                self._on_change(dict(endpoints))
            except Exception:  # the consumer's failure must not end the watch
                log.exception("pods %s: the change callback failed", self._selector)
