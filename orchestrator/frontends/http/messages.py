"""What the router's HTTP handlers take and give, free of sockets: a parsed request, a whole
answer, a streamed answer, and the bytes of an answer's head.

A handler is `async (Request) -> Answer | StreamAnswer`; the connection (`connection.py`) frames
either on the wire, so handlers never see a transport and port to any server.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from email.utils import formatdate
from http import HTTPStatus
from typing import Any, Final, Protocol, runtime_checkable

from orchestrator.admission.errors import Refused
from orchestrator.core.errors import OrchestratorError
from orchestrator.core.openai_errors import openai_error

JSON: Final = "application/json"
RETRY_AFTER: Final = "Retry-After"

Fields = Sequence[tuple[str, str]]


@dataclass(slots=True)
class Request:
    """One request whose head and body were read whole.

    `headers` has lower-case names; a field sent more than once holds its values joined by ", ".
    `params` holds the path's `{name}` segments of the route that matched; `identity` is what the
    route's head check returned (the caller's API key, or None when keys are off).
    """

    method: str
    path: str
    query: str
    headers: Mapping[str, str]
    body: bytes = b""
    params: Mapping[str, str] = field(default_factory=dict)
    identity: object = None


@dataclass(slots=True)
class Answer:
    """A whole answer; `headers` must not carry framing fields (the connection adds them).
    `on_written`: called once the answer is written (or could not be, the client gone), in
    the same event-loop step: what the request still has to count and give back, kept off
    the time between the replica's answer and the client's."""

    status: int
    body: bytes = b""
    content_type: str | None = JSON
    headers: Fields = ()
    on_written: Callable[[], object] | None = None

    @classmethod
    def json(cls, payload: Any, status: int = 200, headers: Fields = ()) -> Answer:
        return cls(status, json.dumps(payload).encode(), JSON, headers)


@runtime_checkable
class ByteStream(Protocol):
    """A streamed body: byte chunks as they come; `finished` once the last one was yielded (so
    the connection can end the body in the same write); `aclose()` stops the source early and
    may be called more than once."""

    @property
    def finished(self) -> bool: ...

    def __aiter__(self) -> AsyncIterator[bytes]: ...

    async def aclose(self) -> None: ...


@dataclass(slots=True)
class StreamAnswer:
    """An answer whose body is `chunks`, relayed as each arrives. The stream ends where `chunks`
    ends (an SSE stream may or may not close with `data: [DONE]`). `on_cut` is the last event to
    send a client that fell too far behind (see `connection.py`)."""

    status: int
    chunks: ByteStream
    headers: Fields = ()
    on_cut: Callable[[], bytes] | None = None


def error_answer(error: OrchestratorError, status: int | None = None) -> Answer:
    """The one translation of an error to HTTP: its OpenAI body and status (`core`), and
    `Retry-After` when the error says when to come back. `status` overrides the code's status
    for framing errors that have a more precise one (408, 414, 431, 505...)."""
    code_status, body = openai_error(error)
    if status is None:
        status = code_status
    else:
        body["error"]["code"] = status
    headers: Fields = ()
    if isinstance(error, Refused):
        headers = ((RETRY_AFTER, error.retry_after_header),)
    return Answer(status, json.dumps(body).encode(), JSON, headers)


_STATUS_LINES: dict[int, bytes] = {}


def status_line(status: int) -> bytes:
    line = _STATUS_LINES.get(status)
    if line is None:
        try:
            reason = HTTPStatus(status).phrase
        except ValueError:
            reason = "Unknown"
        line = _STATUS_LINES[status] = b"HTTP/1.1 %d %s\r\n" % (status, reason.encode())
    return line


MAX_CACHED_FIELDS: Final = 4096  # header lines kept ready-made (then the cache starts over)
_FIELDS: dict[tuple[str, str], bytes] = {}


def header_field(name: str, value: str) -> bytes:
    """One header line; a value that would break the head (CR, LF, NUL) is refused. Lines
    repeat (content types, replica ids), so up to `MAX_CACHED_FIELDS` are kept made."""
    line = _FIELDS.get((name, value))
    if line is None:
        if "\r" in value or "\n" in value or "\x00" in value:
            raise ValueError(f"control character in the value of header {name}")
        if len(_FIELDS) >= MAX_CACHED_FIELDS:
            _FIELDS.clear()
        line = _FIELDS[name, value] = f"{name}: {value}\r\n".encode("latin-1")
    return line


class DateField:
    """The `Date` header line, made at most once a second."""

    __slots__ = ("_line", "_second")

    def __init__(self) -> None:
        self._second = -1
        self._line = b""

    def line(self) -> bytes:
        now_s = int(time.time())
        if now_s != self._second:
            self._second = now_s
            self._line = b"Date: " + formatdate(now_s, usegmt=True).encode() + b"\r\n"
        return self._line
