"""The router's OpenAI-compatible HTTP API on aiohttp.

Routes: `POST /v1/chat/completions`, `POST /v1/completions` and `POST /v1/responses` (routed,
forwarded unchanged, streamed back as the replica's SSE bytes in their framing: `event:` lines
and no [DONE] for Responses), `GET /v1/responses/{id}` and `POST /v1/responses/{id}/cancel` (to
the replica that holds the response, `forwarding/stored_responses.py`), `POST /tokenize` and
`POST /detokenize` (to any routable replica of the model), `GET /v1/models` (the routing table's
models with the context length their replicas report), `GET /health`
(the process is up), `GET /ready` (200 only while some replica is routable, else 503),
`GET /metrics`. Every error is an OpenAI-style JSON body with the status of its canonical code
(`core/openai_errors.py`); no traceback ever reaches a client; a 429 (a key's limit or the
fleet's capacity, `admission/`) carries `Retry-After`. A client that goes away cancels its
upstream request at once, and one that reads a stream too slowly (more than
`stream_buffer_bytes` unread) has it cut with an error event, which cancels the upstream request.

Hot path: one `json.loads` of the body, a handful of field checks, no validation models, no
per-request sessions; the response body or stream bytes are passed through untouched. Served by
`serve_until_stopped`, most completions never reach aiohttp: the fast lane (`fast_lane.py`) takes
them off the socket and calls `OpenAiFrontend.forward` itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.exposition import generate_latest

from orchestrator.admission.errors import Refused
from orchestrator.admission.keys import ApiKey
from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.core.openai_errors import openai_error
from orchestrator.forwarding.dispatcher import StreamRelay, UpstreamReply
from orchestrator.forwarding.event_stream import COMPLETIONS_FRAMING, RESPONSES_PATH
from orchestrator.forwarding.passthrough import WholeReply
from orchestrator.forwarding.stored_responses import check_response_id
from orchestrator.frontends.http.auth import ApiKeys
from orchestrator.frontends.http.context import request_context, responses_context
from orchestrator.router_service import RouterService

log = logging.getLogger(__name__)

FRONTEND: Final = "http"
CHAT_PATH: Final = "/v1/chat/completions"
COMPLETIONS_PATH: Final = "/v1/completions"
TOKENIZE_PATHS: Final = ("/tokenize", "/detokenize")
MODELS_LOOKUP_S: Final = 2.0  # how long `/v1/models` waits for a replica's context length
MODELS_LOOKUP_EVERY_S: Final = 30.0  # how often it asks again while some length is unknown
DEFAULT_MAX_BODY_BYTES: Final = 8 * 1024 * 1024
DEFAULT_STREAM_BUFFER_BYTES: Final = 1024 * 1024
RETRY_AFTER: Final = "Retry-After"
CUT_EVENT_WAIT_S: Final = 1.0  # how long a cut stream's error event may wait to be buffered
OVER_CAP_WAIT_S: Final = 1.0  # on aiohttp, how long a write may wait for a client past the cap
REPLICA_HEADER: Final = "x-orchestrator-replica"
CLIENT_CLOSED: Final = "499"  # the `code` label of a request whose client went away (nginx's)
STREAM_HEADERS: Final = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
_HTTP_CODES: Final = {
    401: ErrorCode.UNAUTHENTICATED,
    404: ErrorCode.NOT_FOUND,
    405: ErrorCode.METHOD_NOT_ALLOWED,
    413: ErrorCode.PAYLOAD_TOO_LARGE,
}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


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


def error_response(error: OrchestratorError) -> web.Response:
    status, body = openai_error(error)
    headers = {RETRY_AFTER: error.retry_after_header} if isinstance(error, Refused) else None
    return web.json_response(body, status=status, headers=headers)


class StreamCut(Exception):
    """The client fell more than the buffer cap behind a stream; it has been cut."""


@web.middleware
async def json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Unknown routes, wrong methods and bugs still answer OpenAI-style JSON, never a traceback."""
    try:
        return await handler(request)
    except OrchestratorError as error:
        return error_response(error)
    except web.HTTPException as http_error:
        if http_error.status < 400:
            raise
        code = _HTTP_CODES.get(http_error.status, ErrorCode.INVALID_ARGUMENT)
        return error_response(OrchestratorError(code, http_error.reason))
    except Exception:
        log.exception("unhandled error serving %s %s", request.method, request.path)
        return error_response(OrchestratorError(ErrorCode.INTERNAL, "internal server error"))


class OpenAiFrontend:
    """Request handlers over one `RouterService`.

    `forward` and `count` are the transport-free core of a completion request; the aiohttp
    handlers below and the fast lane (`fast_lane.py`) both serve completions through them.
    """

    def __init__(self, service: RouterService, settings: HttpSettings) -> None:
        self._service = service
        self.settings = settings
        self._counted: dict[str, Callable[[], None]] = {}
        self._models_version = -1
        self._models_body = b""
        self._default_model: str | None = None
        self._context_lengths: dict[str, int] = {}
        self._lengths_asked_s = float("-inf")

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._complete(request, CHAT_PATH)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._complete(request, COMPLETIONS_PATH)

    async def responses(self, request: web.Request) -> web.StreamResponse:
        return await self._complete(request, RESPONSES_PATH)

    async def retrieve_response(self, request: web.Request) -> web.Response:
        return await self._stored(request, cancel=False)

    async def cancel_response(self, request: web.Request) -> web.Response:
        return await self._stored(request, cancel=True)

    async def tokenizer(self, request: web.Request) -> web.Response:
        """`/tokenize` and `/detokenize`: any routable replica of the body's model answers."""
        try:
            self.authorize(request.headers.get("Authorization"))
            raw = await self._read_body(request)
            try:
                body = json.loads(raw)
            except (ValueError, RecursionError) as error:
                raise OrchestratorError(
                    ErrorCode.INVALID_ARGUMENT, f"invalid JSON body: {error}"
                ) from None
            if not isinstance(body, dict):
                raise OrchestratorError(
                    ErrorCode.INVALID_ARGUMENT, "the request body must be a JSON object"
                )
            model = self._known_model(body.get("model"))
            reply = await self._service.to_any_replica(model, "POST", request.path, raw)
            response = self._whole(reply)
        except OrchestratorError as error:
            response = error_response(error)
        self.count(str(response.status))
        return response

    async def models(self, request: web.Request) -> web.Response:
        self.authorize(request.headers.get("Authorization"))
        self._refresh_models()
        now_s = self._service.clock.now()
        missing = any(m not in self._context_lengths for m in self._service.models())
        if missing and now_s - self._lengths_asked_s >= MODELS_LOOKUP_EVERY_S:
            self._lengths_asked_s = now_s
            await self._learn_context_lengths()
        return web.Response(body=self._models_body, content_type="application/json")

    async def health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def ready(self, request: web.Request) -> web.Response:
        routable = self._service.routable_replicas()
        return web.json_response(
            {"ready": routable > 0, "routable_replicas": routable}, status=200 if routable else 503
        )

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(self._service.registry),
            headers={"Content-Type": CONTENT_TYPE_LATEST},
        )

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

        `path` is `CHAT_PATH`, `COMPLETIONS_PATH` or `RESPONSES_PATH`; `headers` must answer
        lower-case names.
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
        if path == RESPONSES_PATH:
            ctx = responses_context(
                body,
                headers,
                default_model=self._default_model,
                default_priority=service.settings.admission.default_priority,
            )
        else:
            ctx = request_context(
                body,
                headers,
                chat=path == CHAT_PATH,
                default_model=self._default_model,
                default_priority=service.settings.admission.default_priority,
            )
        return await service.dispatch(ctx, path, raw, deadline_s=service.deadline_s(), key=key)

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
        increment = self._counted.get(code)
        if increment is None:
            counter = self._service.metrics.requests.labels(FRONTEND, code)
            increment = self._counted[code] = counter.inc
        increment()

    # -- completions on aiohttp ----------------------------------------------------------------

    async def _complete(self, request: web.Request, path: str) -> web.StreamResponse:
        try:
            key = self.authorize(request.headers.get("Authorization"))
            raw = await self._read_body(request)
            reply = await self.forward(path, request.headers, raw, key)
            if reply.chunks is None:
                response: web.StreamResponse = web.Response(
                    body=reply.body,
                    status=reply.status,
                    headers={**reply.headers, REPLICA_HEADER: reply.replica.replica_id},
                )
            else:
                response = await self._relay(request, reply, reply.chunks)
        except OrchestratorError as error:
            response = error_response(error)
        except asyncio.CancelledError:
            self.count(CLIENT_CLOSED)
            raise
        except Exception:
            log.exception("unhandled error serving %s", path)
            response = error_response(OrchestratorError(ErrorCode.INTERNAL, "internal error"))
        self.count(str(response.status))
        return response

    async def _relay(
        self, request: web.Request, reply: UpstreamReply, chunks: StreamRelay
    ) -> web.StreamResponse:
        """Pass the replica's SSE bytes through as they arrive; stop upstream if the client left
        or fell more than the buffer cap behind (then the stream ends with an error event)."""
        response = web.StreamResponse(
            status=reply.status,
            headers={
                **reply.headers,
                **STREAM_HEADERS,
                REPLICA_HEADER: reply.replica.replica_id,
            },
        )
        cap = self.settings.stream_buffer_bytes
        try:
            await response.prepare(request)
            transport = request.transport
            if transport is not None:  # pause (and so wait in write) only past the cap
                transport.set_write_buffer_limits(high=cap)
            async for chunk in chunks:
                if transport is not None and transport.get_write_buffer_size() > cap:
                    chunks.unsent()
                    raise StreamCut
                try:  # a write waits only while the client is more than the cap behind
                    async with asyncio.timeout(OVER_CAP_WAIT_S):
                        await response.write(chunk)
                except TimeoutError:
                    raise StreamCut from None
            await response.write_eof()
        except StreamCut:
            await chunks.aclose()  # the replica stops now, whatever the client does
            log.info("cut a stream from %s: the client reads too slowly", reply.replica.replica_id)
            with contextlib.suppress(ConnectionResetError, TimeoutError):
                async with asyncio.timeout(CUT_EVENT_WAIT_S):
                    await response.write(self.stream_cut(relay=chunks))
            if request.transport is not None:
                request.transport.abort()
        except ConnectionResetError:  # the client went away mid-stream
            log.debug("client left a stream from %s", reply.replica.replica_id)
        finally:
            await chunks.aclose()
        return response

    async def _stored(self, request: web.Request, *, cancel: bool) -> web.Response:
        try:
            key = self.authorize(request.headers.get("Authorization"))
            if not cancel and request.query.get("stream", "false").lower() not in ("false", "0"):
                raise OrchestratorError(
                    ErrorCode.INVALID_ARGUMENT,
                    "streaming a stored response is not supported by the router; retrieve it whole",
                    param="stream",
                )
            response_id = check_response_id(request.match_info["response_id"])
            raw = await self._read_body(request) if cancel else b""
            response = self._whole(
                await self._service.stored_response(response_id, cancel=cancel, body=raw, key=key)
            )
        except OrchestratorError as error:
            response = error_response(error)
        self.count(str(response.status))
        return response

    @staticmethod
    def _whole(reply: WholeReply) -> web.Response:
        return web.Response(
            body=reply.body,
            status=reply.status,
            headers={**reply.headers, REPLICA_HEADER: reply.replica.replica_id},
        )

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
                length = next(m["max_model_len"] for m in listed if m.get("id") == model)
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

    async def _read_body(self, request: web.Request) -> bytes:
        limit = self.settings.max_body_bytes
        if request.content_length is not None and request.content_length > limit:
            raise too_large(limit)
        try:
            return await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise too_large(limit) from None

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


def too_large(limit: int) -> OrchestratorError:
    return OrchestratorError(
        ErrorCode.PAYLOAD_TOO_LARGE, f"the request body is larger than {limit} bytes"
    )


OPENAI_FRONTEND: Final = web.AppKey("openai_frontend", OpenAiFrontend)
"""The app's `OpenAiFrontend`, for servers that serve completions beside aiohttp (the fast lane)."""


def build_app(service: RouterService, settings: HttpSettings | None = None) -> web.Application:
    """The router's web application; it starts and stops `service` with itself."""
    settings = settings or HttpSettings()
    frontend = OpenAiFrontend(service, settings)
    service.use_api_keys(settings.api_keys)  # the gRPC front end checks the same keys
    # The body limit is enforced in the handlers with an OpenAI error; aiohttp's own cap is a
    # backstop just above it.
    app = web.Application(middlewares=[json_errors], client_max_size=settings.max_body_bytes + 1)
    app[OPENAI_FRONTEND] = frontend
    app.router.add_post(CHAT_PATH, frontend.chat_completions)
    app.router.add_post(COMPLETIONS_PATH, frontend.completions)
    app.router.add_post(RESPONSES_PATH, frontend.responses)
    app.router.add_get(RESPONSES_PATH + "/{response_id}", frontend.retrieve_response)
    app.router.add_post(RESPONSES_PATH + "/{response_id}/cancel", frontend.cancel_response)
    for path in TOKENIZE_PATHS:
        app.router.add_post(path, frontend.tokenizer)
    app.router.add_get("/v1/models", frontend.models)
    app.router.add_get("/health", frontend.health)
    app.router.add_get("/ready", frontend.ready)
    app.router.add_get("/metrics", frontend.metrics)

    async def start(_: web.Application) -> None:
        await service.start()

    async def stop(_: web.Application) -> None:
        await service.stop()

    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    return app
