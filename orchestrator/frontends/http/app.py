"""The router's OpenAI-compatible HTTP API: its handlers and route table, free of sockets.

Routes: `POST /v1/chat/completions`, `POST /v1/completions` and `POST /v1/responses` (routed,
forwarded unchanged, streamed back as the replica's SSE bytes in their framing: `event:` lines
and no [DONE] for Responses), `GET /v1/responses/{id}` and `POST /v1/responses/{id}/cancel` (to
the replica that holds the response, `forwarding/stored_responses.py`), `POST /tokenize` and
`POST /detokenize` (to any routable replica of the model), `GET /v1/models` (the routing table's
models with the context length their replicas report), `GET /health`
(the process is up), `GET /ready` (200 only while some replica is routable, else 503); `GET
/metrics` is served on a port of its own (`metrics_routes`). Every error is an OpenAI-style
JSON body with the status of its canonical code
(`messages.error_answer`); no traceback ever reaches a client; a 429 (a key's limit or the
fleet's capacity, `admission/`) carries `Retry-After`. The API key is checked from the head,
before the body is read. The connection (`connection.py`) frames answers, cancels the upstream
request of a client that goes away and cuts a stream whose client reads too slowly.

Hot path: one `json.loads` of the body, a handful of field checks, no validation models, no
per-request sessions; the response body or stream bytes are passed through untouched.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Coroutine, Mapping
from functools import partial
from typing import Any, Final
from urllib.parse import parse_qs

from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.exposition import generate_latest

from orchestrator.admission.keys import ApiKey
from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.forwarding.dispatcher import UpstreamReply
from orchestrator.forwarding.event_stream import COMPLETIONS_FRAMING, RESPONSES_PATH
from orchestrator.forwarding.loop_metrics import CounterCell
from orchestrator.forwarding.passthrough import WholeReply
from orchestrator.forwarding.stored_responses import check_response_id
from orchestrator.forwarding.stream_relay import StreamRelay
from orchestrator.frontends.http.context import request_context, responses_context
from orchestrator.frontends.http.messages import Answer, Request, StreamAnswer
from orchestrator.frontends.http.routes import Route, RouteTable
from orchestrator.frontends.http.settings import HttpSettings
from orchestrator.router_service import RouterService

log = logging.getLogger(__name__)

FRONTEND: Final = "http"
CHAT_PATH: Final = "/v1/chat/completions"
COMPLETIONS_PATH: Final = "/v1/completions"
TOKENIZE_PATHS: Final = ("/tokenize", "/detokenize")
MODELS_LOOKUP_S: Final = 2.0  # how long `/v1/models` waits for a replica's context length
MODELS_LOOKUP_EVERY_S: Final = 30.0  # how often it asks again while some length is unknown
REPLICA_HEADER: Final = "x-orchestrator-replica"
STREAM_HEADERS: Final = (("Cache-Control", "no-cache"), ("X-Accel-Buffering", "no"))


class OpenAiFrontend:
    """Request handlers over one `RouterService`.

    `forward` and `count` are the transport-free core of a completion request; the gRPC front
    end shares the service, these handlers share the rest.
    """

    def __init__(self, service: RouterService, settings: HttpSettings) -> None:
        self._service = service
        self.settings = settings
        self._counted: dict[str, CounterCell] = {}
        self._models_version = -1
        self._models_body = b""
        self._default_model: str | None = None
        self._context_lengths: dict[str, int] = {}
        self._lengths_asked_s = float("-inf")

    # The completion handlers hand back `_complete`'s coroutine rather than awaiting it: one
    # coroutine less to make and to pass through on every resume of the hot path.
    def chat_completions(self, request: Request) -> Coroutine[Any, Any, Answer | StreamAnswer]:
        return self._complete(request, CHAT_PATH)

    def completions(self, request: Request) -> Coroutine[Any, Any, Answer | StreamAnswer]:
        return self._complete(request, COMPLETIONS_PATH)

    def responses(self, request: Request) -> Coroutine[Any, Any, Answer | StreamAnswer]:
        return self._complete(request, RESPONSES_PATH)

    async def retrieve_response(self, request: Request) -> Answer:
        return await self._stored(request, cancel=False)

    async def cancel_response(self, request: Request) -> Answer:
        return await self._stored(request, cancel=True)

    async def tokenizer(self, request: Request) -> Answer:
        """`/tokenize` and `/detokenize`: any routable replica of the body's model answers."""
        try:
            body = json.loads(request.body)
        except (ValueError, RecursionError) as error:
            raise OrchestratorError(
                ErrorCode.INVALID_ARGUMENT, f"invalid JSON body: {error}"
            ) from None
        if not isinstance(body, dict):
            raise OrchestratorError(
                ErrorCode.INVALID_ARGUMENT, "the request body must be a JSON object"
            )
        model = self._known_model(body.get("model"))
        reply = await self._service.to_any_replica(model, "POST", request.path, request.body)
        return self._whole(reply)

    async def models(self, request: Request) -> Answer:
        self._refresh_models()
        now_s = self._service.clock.now()
        missing = any(m not in self._context_lengths for m in self._service.models())
        if missing and now_s - self._lengths_asked_s >= MODELS_LOOKUP_EVERY_S:
            self._lengths_asked_s = now_s
            await self._learn_context_lengths()
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
        self,
        path: str,
        headers: Mapping[str, str],
        raw: bytes,
        key: ApiKey | None = None,
        *,
        settle_later: bool = False,
    ) -> UpstreamReply:
        """Route and dispatch an authorized completion request whose body is within the limit.

        `path` is `CHAT_PATH`, `COMPLETIONS_PATH` or `RESPONSES_PATH`; `headers` must answer
        lower-case names. `settle_later`: see `RouterService.dispatch`.
        Raises `OrchestratorError` for a bad body, an unknown model or no replica, `Refused`
        (429) when `key`'s limits or the fleet's capacity refuse it.
        """
        try:
            body = _json_body(raw)
        except (ValueError, RecursionError) as error:  # bad UTF-8 or JSON, deep nesting
            raise OrchestratorError(
                ErrorCode.INVALID_ARGUMENT, f"invalid JSON body: {error}"
            ) from None
        self._refresh_models()
        service = self._service
        if path == RESPONSES_PATH:
            ctx = responses_context(
                body,
                headers,
                default_model=self._default_model,
                default_priority=service.settings.admission.default_priority,
                classes=service.class_lanes,
            )
        else:
            ctx = request_context(
                body,
                headers,
                chat=path == CHAT_PATH,
                default_model=self._default_model,
                default_priority=service.settings.admission.default_priority,
                classes=service.class_lanes,
            )
        return await service.dispatch(
            ctx, path, raw, deadline_s=service.deadline_s(), key=key, settle_later=settle_later
        )

    def stream_cut(self, frontend: str = FRONTEND, relay: StreamRelay | None = None) -> bytes:
        """Count a stream cut for a slow reader; the terminal event to send it, in the framing
        of `relay`'s stream (None: a completions stream)."""
        self._service.admission_metrics.streams_cut.labels(frontend).inc()
        error = OrchestratorError(
            ErrorCode.RESOURCE_EXHAUSTED,
            f"the stream was cut: the client fell more than "
            f"{self.settings.stream_buffer_bytes} bytes behind it",
        )
        return COMPLETIONS_FRAMING.error_event(error) if relay is None else relay.error_event(error)

    def count(self, code: str) -> None:
        """Count one answered request by its response code (`CLIENT_CLOSED` if the client left)."""
        counter = self._counted.get(code)
        if counter is None:
            counter = self._counted[code] = self._service.metrics.requests.labels(FRONTEND, code)
        counter.inc()

    # -- completions ---------------------------------------------------------------------------

    async def _complete(self, request: Request, path: str) -> Answer | StreamAnswer:
        key = request.identity
        assert key is None or isinstance(key, ApiKey)
        # A whole answer's books close once it is written (`Answer.on_written`).
        reply = await self.forward(path, request.headers, request.body, key, settle_later=True)
        headers = (*reply.headers.items(), (REPLICA_HEADER, reply.replica.replica_id))
        if reply.chunks is None:
            return Answer(reply.status, reply.body or b"", None, headers, reply.settle)
        stream_headers = (*headers, *STREAM_HEADERS)
        cut = partial(self.stream_cut, FRONTEND, reply.chunks)
        return StreamAnswer(reply.status, reply.chunks, stream_headers, cut)

    async def _stored(self, request: Request, *, cancel: bool) -> Answer:
        if not cancel:
            stream = parse_qs(request.query).get("stream", ["false"])[-1]
            if stream.lower() not in ("false", "0"):
                raise OrchestratorError(
                    ErrorCode.INVALID_ARGUMENT,
                    "streaming a stored response is not supported by the router; retrieve it whole",
                    param="stream",
                )
        key = request.identity
        assert key is None or isinstance(key, ApiKey)
        response_id = check_response_id(request.params["response_id"])
        body = request.body if cancel else b""
        return self._whole(
            await self._service.stored_response(response_id, cancel=cancel, body=body, key=key)
        )

    @staticmethod
    def _whole(reply: WholeReply) -> Answer:
        headers = (*reply.headers.items(), (REPLICA_HEADER, reply.replica.replica_id))
        return Answer(reply.status, reply.body, None, headers)

    def _known_model(self, model: object) -> str:
        """The body's model, or the one served when it names none; NOT_FOUND if not served."""
        self._refresh_models()
        if model is None:
            if self._default_model is None:
                raise OrchestratorError(
                    ErrorCode.INVALID_ARGUMENT,
                    "`model` is required: this router serves several models",
                    param="model",
                )
            return self._default_model
        if not isinstance(model, str):
            raise OrchestratorError(
                ErrorCode.INVALID_ARGUMENT, "`model` must be a string", param="model"
            )
        if model not in self._service.models():
            raise OrchestratorError(
                ErrorCode.NOT_FOUND, f"The model `{model[:80]}` does not exist.", param="model"
            )
        return model

    async def _learn_context_lengths(self) -> None:
        """Ask one replica of each model whose context length is unknown (bounded wait, at most
        every `MODELS_LOOKUP_EVERY_S`; a model whose replicas do not say is listed without it)."""
        for model in self._service.models():
            if model in self._context_lengths:
                continue
            try:
                async with asyncio.timeout(MODELS_LOOKUP_S):
                    reply = await self._service.to_any_replica(model, "GET", "/v1/models", b"")
                listed = json.loads(reply.body)["data"]
                length = next(
                    m["max_model_len"]
                    for m in listed
                    if isinstance(m, dict) and m.get("id") == model  # a replica's answer: any JSON
                )
            except (
                OrchestratorError,
                TimeoutError,
                ValueError,
                KeyError,
                TypeError,
                StopIteration,
            ):
                continue
            if isinstance(length, int) and not isinstance(length, bool):
                self._context_lengths[model] = length
        self._models_version = -1
        self._refresh_models()

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
        for entry in data:
            length = self._context_lengths.get(entry["id"])
            if length is not None:
                entry["max_model_len"] = length
        self._models_body = json.dumps({"object": "list", "data": data}).encode()
        self._default_model = models[0] if len(models) == 1 else None
        self._models_version = table.version


_DECODER: Final = json.JSONDecoder()


def _json_body(raw: bytes) -> Any:
    """`json.loads(raw)`, without its encoding sniffing when the body plainly starts as UTF-8
    JSON (`{` then a byte that is not NUL: what `json.detect_encoding` reads as UTF-8)."""
    if raw[:1] == b"{" and raw[1:2] not in (b"\x00", b""):
        return _DECODER.decode(raw.decode("utf-8", "surrogatepass"))
    return json.loads(raw)


def build_routes(frontend: OpenAiFrontend) -> RouteTable:
    """Every route the router serves over HTTP, on one table (and so one request path)."""
    routes = RouteTable(frontend.check_head)
    routes.add(Route("POST", CHAT_PATH, frontend.chat_completions, keyed=True, reads_body=True,
                     counted=True))  # fmt: skip
    routes.add(Route("POST", COMPLETIONS_PATH, frontend.completions, keyed=True,
                     reads_body=True, counted=True))  # fmt: skip
    routes.add(Route("POST", RESPONSES_PATH, frontend.responses, keyed=True, reads_body=True,
                     counted=True))  # fmt: skip
    routes.add(Route("GET", RESPONSES_PATH + "/{response_id}", frontend.retrieve_response,
                     keyed=True, counted=True))  # fmt: skip
    routes.add(Route("POST", RESPONSES_PATH + "/{response_id}/cancel", frontend.cancel_response,
                     keyed=True, reads_body=True, counted=True))  # fmt: skip
    for path in TOKENIZE_PATHS:
        routes.add(Route("POST", path, frontend.tokenizer, keyed=True, reads_body=True,
                         counted=True))  # fmt: skip
    routes.add(Route("GET", "/v1/models", frontend.models, keyed=True))
    routes.add(Route("GET", "/health", frontend.health))
    routes.add(Route("GET", "/ready", frontend.ready))
    return routes


def metrics_routes(frontend: OpenAiFrontend) -> RouteTable:
    """The metrics port's routes: `/metrics` for Prometheus, `/health` for its probes. Kept off
    the API port, where anyone who may send requests could read key ids, per-key usage and
    replica ids."""
    routes = RouteTable()
    routes.add(Route("GET", "/metrics", frontend.metrics))
    routes.add(Route("GET", "/health", frontend.health))
    return routes
