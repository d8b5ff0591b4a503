"""API keys on the gRPC frontend: `authorization: Bearer <key>` call metadata, as the HTTP header.

The router's one `KeyAuthority` (`RouterService.api_keys`) checks the key, so a key is hashed,
compared in constant time, reloaded and limited exactly as over HTTP. Only RouterService calls
are checked, by a server interceptor from the call's metadata before its message is read; the
health and reflection services stay open (load balancers and tooling probe them without a key).
A call that carries no key, more than one, or one that is not accepted is refused with
UNAUTHENTICATED; the key never reaches a log, a metric or the status details.
"""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Final, TypeAlias

import grpc

from orchestrator.admission.keys import ApiKey, KeyAuthority
from orchestrator.core.errors import ErrorCode, OrchestratorError

AUTHORIZATION_KEY: Final = "authorization"  # gRPC metadata keys are lower case


def authorization_of(metadata: Iterable[tuple[str, str | bytes]] | None) -> str | None:
    """The call's one `authorization` value; None when it has none, several, or a binary one."""
    values = [value for key, value in metadata or () if key == AUTHORIZATION_KEY]
    if len(values) != 1 or not isinstance(values[0], str):
        return None
    return values[0]


def caller_key(
    keys: KeyAuthority | None, metadata: Iterable[tuple[str, str | bytes]] | None
) -> ApiKey | None:
    """The caller's accepted key (None when the router requires none); raises UNAUTHENTICATED."""
    if keys is None:
        return None
    key = keys.authenticate(authorization_of(metadata))
    if key is None:
        raise OrchestratorError(
            ErrorCode.UNAUTHENTICATED,
            "Incorrect or missing API key: send call metadata `authorization: Bearer <key>`.",
        )
    return key


Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"
CALLER: Final[contextvars.ContextVar[ApiKey | None]] = contextvars.ContextVar("grpc_caller")


class KeyInterceptor(grpc.aio.ServerInterceptor):
    """Checks the key of every RouterService call from its metadata alone, before its request
    message is read or decoded: a refused call costs its headers, never its (up to
    `max_receive_message_length`) message. The accepted key reaches the handler as `CALLER`
    (grpc.aio runs interceptors and the handler in one context); `refused` counts a refusal."""

    def __init__(
        self,
        keys: Callable[[], KeyAuthority | None],
        service_prefix: str,
        refused: Callable[[], None],
    ) -> None:
        self._keys = keys
        self._prefix = service_prefix
        self._refused = refused

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
        details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        if details.method.startswith(self._prefix):
            try:
                CALLER.set(caller_key(self._keys(), details.invocation_metadata))
            except OrchestratorError as error:
                self._refused()
                return _refusal(error.message)
        return await continuation(details)


def _refusal(message: str) -> Handler:
    """A handler that ends the call at once. Request-streaming, so grpc.aio reads no message
    before calling it, whatever the method's own kind."""

    async def refuse(_requests: object, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

    return grpc.stream_stream_rpc_method_handler(refuse)
