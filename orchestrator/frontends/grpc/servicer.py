"""`orchestrator.router.v1.RouterService` over a `RouterService`: validate, dispatch, relay.

CreateResponse is Generate's twin for the Responses API (`responses.py` translates), and
GetResponse retrieves or cancels a stored response on the replica that holds it.

A Generate call is one dispatcher call: the request becomes an OpenAI streaming request
(`translate.py`), the dispatcher routes and forwards it, and the replica's SSE bytes come back as
`GenerateResponse` messages. The deadline is the earlier of the router's and the client's. A client
that cancels, or whose deadline passes, cancels this coroutine, which closes the upstream stream,
so the replica aborts the request. Errors become status codes in `errors.py`, nowhere else; a
request refused by admission (RESOURCE_EXHAUSTED) carries a `retry-after` trailing metadata entry
in whole seconds, as the HTTP `Retry-After` header does. A request with no priority gets the
router's default class. When the router requires API keys, every call must carry one (`auth.py`);
Generate counts against that key's limits, the same state HTTP requests with it count against.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncGenerator, Callable
from typing import Any, Final, TypeAlias, TypeVar

import grpc

from orchestrator._proto.orchestrator.router.v1 import router_pb2 as pb
from orchestrator._proto.orchestrator.router.v1 import router_pb2_grpc as pb_grpc
from orchestrator.admission.errors import Refused
from orchestrator.config.grpc import DEFAULT_WRITE_STALL_S
from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.core.openai_errors import log_unhandled
from orchestrator.core.records import Replica
from orchestrator.forwarding.dispatcher import UpstreamReply
from orchestrator.forwarding.stored_responses import check_response_id
from orchestrator.frontends.grpc.auth import CALLER
from orchestrator.frontends.grpc.errors import error_from_reply, grpc_status
from orchestrator.frontends.grpc.responses import ResponseEventStream, responses_upstream
from orchestrator.frontends.grpc.translate import ResponseStream, to_upstream
from orchestrator.router_service import RouterService

log = logging.getLogger(__name__)

FRONTEND: Final = "grpc"
SERVICE_NAME: Final = pb.DESCRIPTOR.services_by_name["RouterService"].full_name
OWNED_BY: Final = "orchestrator"
RETRY_AFTER_KEY: Final = "retry-after"
WRITE_STALL_S: Final = DEFAULT_WRITE_STALL_S  # a stream whose client takes no message this long

GenerateContext: TypeAlias = grpc.aio.ServicerContext[pb.GenerateRequest, pb.GenerateResponse]
ListModelsContext: TypeAlias = grpc.aio.ServicerContext[pb.ListModelsRequest, pb.ListModelsResponse]
CreateResponseContext: TypeAlias = grpc.aio.ServicerContext[
    pb.CreateResponseRequest, pb.ResponseEvent
]
GetResponseContext: TypeAlias = grpc.aio.ServicerContext[pb.GetResponseRequest, pb.StoredResponse]
StreamContext: TypeAlias = grpc.aio.ServicerContext[Any, Any]
MessageT = TypeVar("MessageT")


class RouterServicer(pb_grpc.RouterServiceServicer):
    """The RPC handlers; holds no state of its own beyond per-code request counters."""

    def __init__(self, service: RouterService, write_stall_s: float = WRITE_STALL_S) -> None:
        self._service = service
        self._write_stall_s = write_stall_s
        self._counters: dict[str, Callable[[], None]] = {}

    async def Generate(self, request: pb.GenerateRequest, context: GenerateContext) -> None:
        await self._streamed("Generate", self._generate(request, context), context)

    async def CreateResponse(
        self, request: pb.CreateResponseRequest, context: CreateResponseContext
    ) -> None:
        await self._streamed("CreateResponse", self._create_response(request, context), context)

    async def GetResponse(
        self, request: pb.GetResponseRequest, context: GetResponseContext
    ) -> pb.StoredResponse:
        try:
            key = CALLER.get()
            if not request.id:
                raise OrchestratorError(
                    ErrorCode.INVALID_ARGUMENT, "id: required (a response id)", param="id"
                )
            response_id = check_response_id(request.id, "id")
            reply = await self._service.stored_response(response_id, cancel=request.cancel, key=key)
            if reply.status >= 300:
                raise error_from_reply(reply.status, reply.body)
        except OrchestratorError as error:
            code, details = grpc_status(error)
            if isinstance(error, Refused):
                context.set_trailing_metadata(((RETRY_AFTER_KEY, error.retry_after_header),))
            self.count(code)
            await context.abort(code, details)
        except Exception as error:
            log_unhandled(log, error, "GetResponse")
            self.count(grpc.StatusCode.INTERNAL)
            await context.abort(grpc.StatusCode.INTERNAL, "internal error")
        self.count(grpc.StatusCode.OK)
        return pb.StoredResponse(
            response_json=reply.body.decode(errors="replace"), replica=_info(reply.replica)
        )

    async def _streamed(
        self, name: str, messages: AsyncGenerator[MessageT, None], context: StreamContext
    ) -> None:
        """Write `messages`, turning errors into status codes, and count the call once. A client
        that takes none of a message for `write_stall_s` is cut: its upstream request is
        closed (the replica aborts it, its admission slot is freed) and it gets
        RESOURCE_EXHAUSTED, as an HTTP stream whose client falls behind is cut."""
        code = grpc.StatusCode.OK
        try:
            async with contextlib.aclosing(messages):
                async for message in messages:
                    try:
                        async with asyncio.timeout(self._write_stall_s):
                            await context.write(message)
                    except TimeoutError:
                        raise self._cut() from None
        except OrchestratorError as error:
            code, details = grpc_status(error)
            if isinstance(error, Refused):
                context.set_trailing_metadata(((RETRY_AFTER_KEY, error.retry_after_header),))
            await context.abort(code, details)
        except asyncio.CancelledError:  # the client cancelled, or its deadline passed
            remaining_s = context.time_remaining()
            expired = remaining_s is not None and remaining_s <= 0
            code = grpc.StatusCode.DEADLINE_EXCEEDED if expired else grpc.StatusCode.CANCELLED
            raise
        except Exception as error:
            log_unhandled(log, error, name)
            code = grpc.StatusCode.INTERNAL
            await context.abort(code, "internal error")
        finally:
            self.count(code)

    def _cut(self) -> OrchestratorError:
        self._service.admission_metrics.streams_cut.labels(FRONTEND).inc()
        log.info("cut a gRPC stream: the client reads too slowly")
        return OrchestratorError(
            ErrorCode.RESOURCE_EXHAUSTED,
            f"the stream was cut: the client read nothing for {self._write_stall_s:g} s",
        )

    async def ListModels(
        self, request: pb.ListModelsRequest, context: ListModelsContext
    ) -> pb.ListModelsResponse:
        try:
            CALLER.get()
        except LookupError:  # the key interceptor did not run: refuse, never serve
            self.count(grpc.StatusCode.INTERNAL)
            await context.abort(grpc.StatusCode.INTERNAL, "internal error")
        self.count(grpc.StatusCode.OK)
        return pb.ListModelsResponse(
            models=[pb.Model(id=model, owned_by=OWNED_BY) for model in self._service.models()]
        )

    async def _generate(
        self, request: pb.GenerateRequest, context: GenerateContext
    ) -> AsyncGenerator[pb.GenerateResponse, None]:
        service = self._service
        key = CALLER.get()
        upstream = to_upstream(request)
        ctx = upstream.context
        default_priority = service.settings.admission.default_priority
        if request.priority == pb.PRIORITY_UNSPECIFIED and ctx.priority is not default_priority:
            ctx = dataclasses.replace(ctx, priority=default_priority)
        reply = await service.dispatch(
            ctx, upstream.path, upstream.body, deadline_s=self._deadline_s(context), key=key
        )
        try:
            stream = ResponseStream(_info(reply.replica))
            if reply.chunks is None:
                _raise_for_whole(reply)
                for message in stream.feed(b"data: " + (reply.body or b"") + b"\n\n"):
                    yield message
            else:
                async for chunk in reply.chunks:
                    for message in stream.feed(chunk):
                        yield message
            for message in stream.finish():
                yield message
        finally:
            await reply.aclose()

    async def _create_response(
        self, request: pb.CreateResponseRequest, context: CreateResponseContext
    ) -> AsyncGenerator[pb.ResponseEvent, None]:
        service = self._service
        key = CALLER.get()
        models = service.models()
        upstream = responses_upstream(
            request,
            default_model=models[0] if len(models) == 1 else None,
            default_priority=service.settings.admission.default_priority,
            classes=service.class_lanes,
        )
        reply = await service.dispatch(
            upstream.context,
            upstream.path,
            upstream.body,
            deadline_s=self._deadline_s(context),
            key=key,
        )
        try:
            events = ResponseEventStream(_info(reply.replica))
            if reply.chunks is None:
                _raise_for_whole(reply)
                raise OrchestratorError(
                    ErrorCode.UNAVAILABLE, "the replica answered a streamed request whole"
                )
            async for chunk in reply.chunks:
                for event in events.feed(chunk):
                    yield event
            for event in events.finish():
                yield event
        finally:
            await reply.aclose()

    def _deadline_s(self, context: StreamContext) -> float:
        """The router's deadline, or the client's when that comes first (dispatcher clock)."""
        deadline_s = self._service.deadline_s()
        remaining_s = context.time_remaining()
        if remaining_s is not None:
            deadline_s = min(deadline_s, self._service.clock.now() + remaining_s)
        return deadline_s

    def count(self, code: grpc.StatusCode) -> None:
        counter = self._counters.get(code.name)
        if counter is None:
            child = self._service.metrics.requests.labels(FRONTEND, code.name)
            counter = self._counters[code.name] = child.inc
        counter()


# The generated registration function is untyped; this is its contract.
add_router_servicer: Callable[[RouterServicer, grpc.aio.Server], None] = (
    pb_grpc.add_RouterServiceServicer_to_server
)


def _info(replica: Replica) -> pb.ReplicaInfo:
    return pb.ReplicaInfo(
        id=replica.replica_id, pool=replica.pool, generation=replica.generation.value
    )


def _raise_for_whole(reply: UpstreamReply) -> None:
    """A whole (not streamed) answer is relayed only when it is a success; else its error."""
    if reply.status >= 300:
        raise error_from_reply(reply.status, reply.body or b"")
    if reply.body is None:
        raise OrchestratorError(ErrorCode.UNAVAILABLE, "the replica sent an empty answer")
