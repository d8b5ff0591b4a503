"""Reading requests off one connection: llhttp's (`httptools`) callbacks, the head limits and the
route's head check, each request handed on whole (or as an answer decided from its head alone).

A refusal raised here (`Refuse`) ends the connection's requests; see `connection.py` for the
limits' statuses. The API key of a keyed route is checked once the head is whole: a refused
request is answered at once, before any byte of its body is read, and the connection closes
(what the client still sends is dropped, as after a 413).
"""

from __future__ import annotations

from typing import Final, Protocol

import httptools

from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.frontends.http.limits import ConnectionSettings
from orchestrator.frontends.http.messages import Answer, Request, error_answer
from orchestrator.frontends.http.routes import Match, NoRoute, RouteTable

_VERSIONS: Final = frozenset({"1.0", "1.1"})


class Refuse(Exception):
    """Raised in a parser callback: answer this and close the connection (`unread`: dropping
    the body the client may still be sending, so it sees the answer, not a reset)."""

    def __init__(self, answer: Answer, *, unread: bool = False) -> None:
        super().__init__(answer.status)
        self.answer = answer
        self.unread = unread


def _refuse(status: int, code: ErrorCode, message: str) -> Refuse:
    return Refuse(refused(status, code, message))


class Pending:
    """A whole request waiting for its turn, or an answer decided from its head alone (a plain
    class: compiled, a dataclass runs the interpreted `__init__` dataclasses writes)."""

    __slots__ = ("answer", "http10", "keep_alive", "match", "request")

    def __init__(
        self,
        match: Match | None,
        request: Request | None,
        answer: Answer | None,
        keep_alive: bool,
        http10: bool,
    ) -> None:
        self.match = match
        self.request = request
        self.answer = answer
        self.keep_alive = keep_alive
        self.http10 = http10


class RequestSink(Protocol):
    """What the reader tells its connection."""

    def request_begun(self) -> None:
        """A request's first byte arrived: its head timeout runs."""

    def head_read(self, expects_continue: bool) -> None:
        """The head is whole and accepted: its body timeout runs (send `100 Continue`?)."""

    def request_read(self, pending: Pending) -> None:
        """A request was read whole."""


class RequestReader:
    """The parser's callback object for one connection; one request at a time."""

    def __init__(self, sink: RequestSink, routes: RouteTable, settings: ConnectionSettings) -> None:
        self._sink = sink
        self._routes = routes
        self._settings = settings
        self.parser = httptools.HttpRequestParser(self)
        self._url: list[bytes] = []
        self._url_bytes = 0
        self._method = ""  # these three once the head is whole
        self._target = b""
        self._path = ""
        self._headers: dict[str, str] = {}
        self._repeated: dict[str, list[str]] = {}
        self._fields = 0
        self._field_bytes = 0  # of the head's fields, as parsed
        self.in_head = False
        self.match: Match | None = None
        self._identity: object = None
        self._early: Answer | None = None  # answered from the head; its body is dropped
        self._keep_alive = True
        self.http10 = False
        self._keep_body = False
        self._body: list[bytes] = []
        self._body_bytes = 0

    # -- httptools callbacks -------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._url = []
        self._url_bytes = 0
        self._headers = {}
        self._repeated = {}
        self._fields = 0
        self._field_bytes = 0
        self.in_head = True
        self.match = None
        self._identity = None
        self._early = None
        self._keep_body = False
        self._body = []
        self._body_bytes = 0
        self._sink.request_begun()

    def on_url(self, url: bytes) -> None:
        self._url_bytes += len(url)
        if self._url_bytes > self._settings.max_field_bytes:
            raise _refuse(414, ErrorCode.INVALID_ARGUMENT, "the request target is too long")
        self._url.append(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        settings = self._settings
        self._fields += 1
        if self._fields > settings.max_fields:
            raise _refuse(
                431, ErrorCode.INVALID_ARGUMENT, f"more than {settings.max_fields} header fields"
            )
        if len(name) + len(value) > settings.max_field_bytes:
            raise _refuse(
                431,
                ErrorCode.INVALID_ARGUMENT,
                f"a header field is longer than {settings.max_field_bytes} bytes",
            )
        self._field_bytes += len(name) + len(value) + 4
        if self._field_bytes > settings.max_head_bytes:
            raise _refuse(
                431, ErrorCode.INVALID_ARGUMENT, f"the head is over {settings.max_head_bytes} bytes"
            )
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        previous = self._headers.get(key)
        if previous is None:
            self._headers[key] = text
        else:  # joined once the head is whole: linear in the number of repeats
            self._repeated.setdefault(key, [previous]).append(text)

    def on_headers_complete(self) -> None:
        self.in_head = False
        settings = self._settings
        parser = self.parser
        version = parser.get_http_version()
        if version not in _VERSIONS:
            raise _refuse(
                505, ErrorCode.INVALID_ARGUMENT, f"HTTP/{version} is not supported; use HTTP/1.1"
            )
        headers = self._headers
        for key, values in self._repeated.items():
            headers[key] = ", ".join(values)
        self.http10 = version == "1.0"
        self._keep_alive = _keeps_alive(version, headers.get("connection"))
        self._method = method = parser.get_method().decode("ascii")
        url = self._url
        self._target = target = url[0] if len(url) == 1 else b"".join(url)
        self._path = path = path_of(target)
        if self.http10 is False and "host" not in headers:
            raise _refuse(400, ErrorCode.INVALID_ARGUMENT, "an HTTP/1.1 request needs a Host")
        if "host" in self._repeated:
            raise _refuse(400, ErrorCode.INVALID_ARGUMENT, "more than one Host header field")
        try:
            match = self._routes.match(method, path)
        except NoRoute as missing:
            self._early = _no_route(method, path, missing.allowed)
            self._sink.head_read(False)
            return
        self.match = match
        length = headers.get("content-length")
        if length is not None and int(length) > settings.max_body_bytes:
            raise Refuse(
                refused(413, ErrorCode.PAYLOAD_TOO_LARGE, _too_large(settings.max_body_bytes)),
                unread=True,
            )
        expect = headers.get("expect")
        if expect is not None and expect.lower() != "100-continue":
            self._early = refused(417, ErrorCode.INVALID_ARGUMENT, "unsupported expectation")
            self._sink.head_read(False)
            return
        route = match.route
        identity: object = None
        if route.keyed:
            try:
                identity = self._routes.check_head(headers)
            except OrchestratorError as error:  # answered now: no byte of its body is waited for
                raise Refuse(error_answer(error), unread=True) from None
        self._identity = identity
        self._keep_body = route.reads_body
        self._sink.head_read(expect is not None)

    def on_body(self, body: bytes) -> None:
        self._body_bytes += len(body)
        limit = self._settings.max_body_bytes
        if self._body_bytes > limit:  # a chunked body that outgrew the limit
            raise Refuse(refused(413, ErrorCode.PAYLOAD_TOO_LARGE, _too_large(limit)), unread=True)
        if self._keep_body and self._early is None:
            self._body.append(body)

    def on_message_complete(self) -> None:
        match = self.match
        if self._early is not None or match is None:
            pending = Pending(None, None, self._early, self._keep_alive, self.http10)
        else:
            query = self._target.partition(b"?")[2].decode("latin-1")
            body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
            request = Request(
                self._method,
                self._path,
                query,
                self._headers,
                body,
                match.params,
                self._identity,
            )
            pending = Pending(match, request, None, self._keep_alive, self.http10)
        self._body = []
        self._sink.request_read(pending)


def path_of(target: bytes) -> str:
    """The path of a request target in origin form (`/v1/x?q`) or absolute form
    (`http://host/v1/x`), which RFC 9112 section 3.2.2 requires servers to accept."""
    if target.startswith(b"/"):
        return target.split(b"?", 1)[0].decode("latin-1")
    try:
        path = httptools.parse_url(target).path
    except httptools.HttpParserInvalidURLError:
        return ""
    return "/" if path is None else path.decode("latin-1")


def _keeps_alive(version: str, connection: str | None) -> bool:
    """RFC 9112 section 9.3: HTTP/1.1 persists unless `close` is a token of `Connection`;
    HTTP/1.0 only with a `keep-alive` token."""
    if connection is None:
        return version == "1.1"
    tokens = {t.strip().lower() for t in connection.split(",")}
    if "close" in tokens:
        return False
    return version == "1.1" or "keep-alive" in tokens


def refused(status: int, code: ErrorCode, message: str) -> Answer:
    return error_answer(OrchestratorError(code, message), status)


def bad_request(message: str) -> Answer:
    return error_answer(OrchestratorError(ErrorCode.INVALID_ARGUMENT, message))


def too_large_head(limit: int) -> Answer:
    return refused(431, ErrorCode.INVALID_ARGUMENT, f"the request head is over {limit} bytes")


def _too_large(limit: int) -> str:
    return f"the request body is larger than {limit} bytes"


def _no_route(method: str, path: str, allowed: tuple[str, ...]) -> Answer:
    if not allowed:
        return error_answer(OrchestratorError(ErrorCode.NOT_FOUND, f"no route for {path[:200]}"))
    answer = refused(405, ErrorCode.METHOD_NOT_ALLOWED, f"{method} is not allowed on {path[:200]}")
    answer.headers = (("Allow", ", ".join(allowed)),)
    return answer
