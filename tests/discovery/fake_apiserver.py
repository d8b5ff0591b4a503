"""A small Kubernetes API server for pods, on loopback: list and watch, as the real one answers.

It speaks the part of the API that discovery uses: `GET /api/v1/namespaces/{ns}/pods` with a
`labelSelector` (equality terms) returns a `PodList` carrying the current `resourceVersion`; with
`watch=true` it streams chunked JSON lines of ADDED/MODIFIED/DELETED events newer than the given
`resourceVersion`, then live ones, until `timeoutSeconds`. History older than `compact()` is gone:
a watch from before it gets 410 Gone, as an HTTP status or as an ERROR event (`gone_as`).
Tests change pods from their own thread; every request is recorded.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from aiohttp import web

_END = object()
_GONE = object()


@dataclass
class _Event:
    version: int
    kind: str
    pod: dict[str, Any]


@dataclass
class RecordedRequest:
    watch: bool
    namespace: str
    selector: str
    resource_version: str | None


@dataclass
class FakeApiServer:
    """Pods of any namespace; `url` is set once started."""

    url: str = ""
    gone_as: Literal["status", "event"] = "event"
    requests: list[RecordedRequest] = field(default_factory=list)
    _pods: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    _history: list[_Event] = field(default_factory=list)
    _version: int = 100
    _compacted: int = 0
    _watchers: list[asyncio.Queue[Any]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _loop: asyncio.AbstractEventLoop | None = None
    _uids: Iterator[int] = field(default_factory=itertools.count)

    # --- what tests do to the cluster -------------------------------------------------------

    def add_pod(
        self,
        name: str,
        labels: Mapping[str, str],
        ip: str,
        *,
        ready: bool = True,
        namespace: str = "llm",
    ) -> None:
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": f"uid-{next(self._uids)}",
                "labels": dict(labels),
            },
            "spec": {"containers": [{"name": "engine", "image": "vllm/vllm-openai-rocm"}]},
            "status": {"phase": "Running", "podIP": ip, "conditions": _conditions(ready)},
        }
        self._change("ADDED", namespace, pod)

    def set_ready(self, name: str, ready: bool, *, namespace: str = "llm") -> None:
        with self._lock:
            pod = json.loads(json.dumps(self._pods[(namespace, name)]))
        pod["status"]["conditions"] = _conditions(ready)
        self._change("MODIFIED", namespace, pod)

    def delete_pod(self, name: str, *, namespace: str = "llm") -> None:
        with self._lock:
            pod = json.loads(json.dumps(self._pods[(namespace, name)]))
        self._change("DELETED", namespace, pod)

    def compact(self) -> None:
        """Forget the event history: watches from an older version get 410 Gone."""
        with self._lock:
            self._compacted = self._version
            self._history.clear()

    def end_watches(self, *, gone: bool = False) -> None:
        """End every open watch: normally (as at `timeoutSeconds`), or with a 410 ERROR event."""
        self._broadcast(_GONE if gone else _END)

    def lists(self) -> list[RecordedRequest]:
        return [r for r in self.requests if not r.watch]

    def watches(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.watch]

    def open_watches(self) -> int:
        with self._lock:
            return len(self._watchers)

    # --- the server ---------------------------------------------------------------------------

    def _change(self, kind: str, namespace: str, pod: dict[str, Any]) -> None:
        with self._lock:
            self._version += 1
            pod["metadata"]["resourceVersion"] = str(self._version)
            key = (namespace, pod["metadata"]["name"])
            if kind == "DELETED":
                self._pods.pop(key, None)
            else:
                self._pods[key] = pod
            event = _Event(self._version, kind, pod)
            self._history.append(event)
        self._broadcast(event)

    def _broadcast(self, item: object) -> None:
        loop = self._loop
        if loop is None:
            return
        with self._lock:
            queues = list(self._watchers)
        for queue in queues:
            loop.call_soon_threadsafe(queue.put_nowait, item)

    async def _pods_handler(self, request: web.Request) -> web.StreamResponse:
        namespace = request.match_info["namespace"]
        selector = _parse_selector(request.query.get("labelSelector", ""))
        watching = request.query.get("watch") in ("true", "1", "True")
        self.requests.append(
            RecordedRequest(
                watching,
                namespace,
                request.query.get("labelSelector", ""),
                request.query.get("resourceVersion"),
            )
        )
        if watching:
            return await self._watch(request, namespace, selector)
        with self._lock:
            items = [
                pod
                for (ns, _), pod in sorted(self._pods.items())
                if ns == namespace and _matches(pod, selector)
            ]
            version = self._version
        return web.json_response(
            {
                "kind": "PodList",
                "apiVersion": "v1",
                "metadata": {"resourceVersion": str(version)},
                "items": items,
            }
        )

    async def _watch(
        self, request: web.Request, namespace: str, selector: dict[str, str]
    ) -> web.StreamResponse:
        since = int(request.query.get("resourceVersion") or self._version)
        timeout_s = float(request.query.get("timeoutSeconds") or 300)
        queue: asyncio.Queue[Any] = asyncio.Queue()
        with self._lock:
            expired = since < self._compacted
            backlog = [e for e in self._history if e.version > since]
            if not expired:
                self._watchers.append(queue)
        if expired and self.gone_as == "status":
            return web.json_response(_gone_status(since, self._compacted), status=410)
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        try:
            if expired:
                await _write(response, {"type": "ERROR", "object": _gone_status(since, 0)})
                return response
            for event in backlog:
                await self._send(response, event, namespace, selector)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout_s
            while (left := deadline - loop.time()) > 0:
                try:
                    item = await asyncio.wait_for(queue.get(), left)
                except TimeoutError:
                    break
                if item is _END:
                    break
                if item is _GONE:
                    gone = _gone_status(since, self._version)
                    await _write(response, {"type": "ERROR", "object": gone})
                    break
                await self._send(response, item, namespace, selector)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            with self._lock:
                if queue in self._watchers:
                    self._watchers.remove(queue)
        return response

    async def _send(
        self, response: web.StreamResponse, event: _Event, namespace: str, selector: dict[str, str]
    ) -> None:
        if event.pod["metadata"]["namespace"] == namespace and _matches(event.pod, selector):
            await _write(response, {"type": event.kind, "object": event.pod})


async def _write(response: web.StreamResponse, event: Mapping[str, Any]) -> None:
    await response.write(json.dumps(event).encode() + b"\n")


def _conditions(ready: bool) -> list[dict[str, str]]:
    return [
        {"type": "PodScheduled", "status": "True"},
        {"type": "Ready", "status": "True" if ready else "False"},
    ]


def _gone_status(asked: int, oldest: int) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f"too old resource version: {asked} ({oldest})",
        "reason": "Expired",
        "code": 410,
    }


def _parse_selector(text: str) -> dict[str, str]:
    terms = [term for term in text.split(",") if term]
    return dict(term.split("=", 1) for term in terms)


def _matches(pod: Mapping[str, Any], selector: Mapping[str, str]) -> bool:
    labels = pod["metadata"].get("labels") or {}
    return all(labels.get(key) == value for key, value in selector.items())


@contextmanager
def running_apiserver(*, gone_as: Literal["status", "event"] = "event") -> Iterator[FakeApiServer]:
    """A `FakeApiServer` on 127.0.0.1 (a free port), served from a thread of its own."""
    server = FakeApiServer(gone_as=gone_as)
    loop = asyncio.new_event_loop()
    started = threading.Event()
    app = web.Application()
    app.router.add_get("/api/v1/namespaces/{namespace}/pods", server._pods_handler)
    runner = web.AppRunner(app, shutdown_timeout=0.5)

    async def start() -> None:
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        server.url = f"http://127.0.0.1:{port}"
        server._loop = loop
        started.set()

    thread = threading.Thread(target=loop.run_forever, name="fake-apiserver", daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(start(), loop).result(timeout=10)
    started.wait(10)
    try:
        yield server
    finally:
        server.end_watches()
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()
