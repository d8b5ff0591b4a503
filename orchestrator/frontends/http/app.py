"""The router's OpenAI-compatible HTTP API: its handlers and route table, free of sockets.

Routes: `POST /v1/chat/completions` and `POST /v1/completions` (routed, forwarded unchanged,
streamed back as the replica's SSE bytes), `GET /v1/models` (from the routing table), `GET /health`
(the process is up), `GET /ready` (200 only while some replica is routable, else 503),
`GET /metrics`. Every error is an OpenAI-style JSON body with the status of its canonical code
(`messages.error_answer`); no traceback ever reaches a client; a 429 (a key's limit or the
fleet's capacity, `admission/`) carries `Retry-After`. The API key is checked from the head,
before the body is read. The connection (`connection.py`) frames answers, cancels the upstream
request of a client that goes away and cuts a stream whose client reads too slowly.

Hot path: one `json.loads` of the body, a handful of field checks, no validation models, no
per-request sessions; the response body or stream bytes are passed through untouched.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.exposition import generate_latest

from orchestrator.admission.keys import ApiKey
from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.forwarding.dispatcher import UpstreamReply, error_event
from orchestrator.frontends.http.auth import ApiKeys
from orchestrator.frontends.http.context import request_context
from orchestrator.frontends.http.messages import Answer, Request, StreamAnswer
from orchestrator.frontends.http.routes import Route, RouteTable
from orchestrator.router_service import RouterService

log = logging.getLogger(__name__)

FRONTEND: Final = "http"
CHAT_PATH: Final = "/v1/chat/completions"
COMPLETIONS_PATH: Final = "/v1/completions"
DEFAULT_MAX_BODY_BYTES: Final = 8 * 1024 * 1024
DEFAULT_STREAM_BUFFER_BYTES: Final = 1024 * 1024
REPLICA_HEADER: Final = "x-orchestrator-replica"
STREAM_HEADERS: Final = (("Cache-Control", "no-cache"), ("X-Accel-Buffering", "no"))


@dataclass(frozen=True, slots=True)
class HttpSettings:
    """`max_body_bytes` caps a request body; `api_keys` None means no authentication;
    `stream_buffer_bytes` caps a stream's bytes the client has not read yet (then it is cut)."""

    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    api_keys: ApiKeys | None = None
    stream_buffer_bytes: int = DEFAULT_STREAM_BUFFER_BYTES

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "stream_buffer_bytes"):
            if getattr(self, name) < 1:
                raise OrchestratorError(
                    ErrorCode.INVALID_ARGUMENT,
                    f"{name} must be >= 1, got {getattr(self, name)}",
                    param=name,
                )


class OpenAiFrontend:
    """Request handlers over one `RouterService`.

    `forward` and `count` are the transport-free core of a completion request; the gRPC front
    end shares the service, these handlers share the rest.
    """

    def __init__(self, service: RouterService, settings: HttpSettings) -> None:
        self._service = service
        self.settings = settings
        self._counted: dict[str, Callable[[], None]] = {}
        self._models_version = -1
        self._models_body = b""
        self._default_model: str | None = None

    async def chat_completions(self, request: Request) -> Answer | StreamAnswer:
        return await self._complete(request, CHAT_PATH)

    async def completions(self, request: Request) -> Answer | StreamAnswer:
        return await self._complete(request, COMPLETIONS_PATH)

    async def models(self, request: Request) -> Answer:
        self._refresh_models()
        return Answer(200, self._models_body)

    async def health(self, request: Request) -> Answer:
        return Answer.json({"status": "ok"})

    async def ready(self, request: Request) -> Answer:
        routable = self._service.routable_replicas()
        return Answer.json(
            {"ready": routable > 0, "routable_replicas": routable}, status=200 if routable else 503
        )

    async def metrics(self, request: Request) -> Answer:
        return Answer(200, generate_latest(self._service.registry), CONTENT_TYPE_LATEST)

    def check_head(self, headers: Mapping[str, str]) -> ApiKey | None:
        """The route table's head check: the caller's key, before any body is read."""
        return self.authorize(headers.get("authorization"))

    # -- completions, whatever the transport ----------------------------------------------------

    def authorize(self, authorization: str | None) -> ApiKey | None:
        """The caller's key (None when keys are off); raises UNAUTHENTICATED without one."""
        keys = self.settings.api_keys
        if keys is None:
            return None
        key = keys.authenticate(authorization)
        if key is None:
            raise OrchestratorError(
                ErrorCode.UNAUTHENTICATED,
                "Incorrect or missing API key: send `Authorization: Bearer <key>`.",
            )
        return key

    async def forward(
        self, path: str, headers: Mapping[str, str], raw: bytes, key: ApiKey | None = None
    ) -> UpstreamReply:
        """Route and dispatch an authorized completion request whose body is within the limit.

        `path` is `CHAT_PATH` or `COMPLETIONS_PATH`; `headers` must answer lower-case names.
        Raises `OrchestratorError` for a bad body, an unknown model or no replica, `Refused`
        (429) when `key`'s limits or the fleet's capacity refuse it.
        """
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError) as error:  # bad UTF-8 or JSON, deep nesting
            raise OrchestratorError(
                ErrorCode.INVALID_ARGUMENT, f"invalid JSON body: {error}"
            ) from None
        self._refresh_models()
        service = self._service
        ctx = request_context(
            body,
            headers,
            chat=path == CHAT_PATH,
            default_model=self._default_model,
            default_priority=service.settings.admission.default_priority,
        )
        return await service.dispatch(ctx, path, raw, deadline_s=service.deadline_s(), key=key)

    def stream_cut(self, frontend: str = FRONTEND) -> bytes:
        """Count a stream cut for a slow reader; the terminal event to send it."""
        self._service.admission_metrics.streams_cut.labels(frontend).inc()
        return error_event(
            OrchestratorError(
                ErrorCode.RESOURCE_EXHAUSTED,
                f"the stream was cut: the client fell more than "
                f"{self.settings.stream_buffer_bytes} bytes behind it",
            )
        )

    def count(self, code: str) -> None:
        """Count one answered request by its response code (`CLIENT_CLOSED` if the client left)."""
        increment = self._counted.get(code)
        if increment is None:
            counter = self._service.metrics.requests.labels(FRONTEND, code)
            increment = self._counted[code] = counter.inc
        increment()

    # -- completions ---------------------------------------------------------------------------

    async def _complete(self, request: Request, path: str) -> Answer | StreamAnswer:
        key = request.identity
        assert key is None or isinstance(key, ApiKey)
        reply = await self.forward(path, request.headers, request.body, key)
        headers = (*reply.headers.items(), (REPLICA_HEADER, reply.replica.replica_id))
        if reply.chunks is None:
            return Answer(reply.status, reply.body or b"", None, headers)
        stream_headers = (*headers, *STREAM_HEADERS)
        return StreamAnswer(reply.status, reply.chunks, stream_headers, self.stream_cut)

    def _refresh_models(self) -> None:
        """Rebuild `/v1/models` and the default model when the routing table changed."""
        table = self._service.table.snapshot()
        if table.version == self._models_version:
            return
        models = sorted(table.models)
        data: list[dict[str, Any]] = [
            {"id": model, "object": "model", "created": 0, "owned_by": "orchestrator"}
            for model in models
        ]
        self._models_body = json.dumps({"object": "list", "data": data}).encode()
        self._default_model = models[0] if len(models) == 1 else None
        self._models_version = table.version


def build_routes(frontend: OpenAiFrontend) -> RouteTable:
    """Every route the router serves over HTTP, on one table (and so one request path)."""
    routes = RouteTable(frontend.check_head)
    routes.add(Route("POST", CHAT_PATH, frontend.chat_completions, keyed=True, reads_body=True,
                     counted=True))  # fmt: skip
    routes.add(Route("POST", COMPLETIONS_PATH, frontend.completions, keyed=True,
                     reads_body=True, counted=True))  # fmt: skip
    routes.add(Route("GET", "/v1/models", frontend.models, keyed=True))
    routes.add(Route("GET", "/health", frontend.health))
    routes.add(Route("GET", "/ready", frontend.ready))
    routes.add(Route("GET", "/metrics", frontend.metrics))
    return routes
