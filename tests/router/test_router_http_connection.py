"""The server connection with routes of a test's own: path parameters reach the handler, a
handler's bug is a 500 OpenAI error on a connection that stays usable, a stream ends where its
source ends (SSE with or without `data: [DONE]`), a stream that fails once begun closes the
connection, and a keyed route refuses a bad head before reading its body."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import contextmanager

from http_wire import RawClient

from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.frontends.http.connections import Connections
from orchestrator.frontends.http.limits import ConnectionSettings
from orchestrator.frontends.http.messages import Answer, Request, StreamAnswer
from orchestrator.frontends.http.routes import Route, RouteTable

EVENTS = [b"event: response.created\ndata: {}\n\n", b"event: response.completed\ndata: {}\n\n"]


class Events:
    """A byte stream of `EVENTS`, optionally failing after the first."""

    def __init__(self, fail: bool = False) -> None:
        self._pieces = list(EVENTS)
        self._fail = fail
        self.closed = False

    @property
    def finished(self) -> bool:
        return not self._pieces

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[bytes]:
        while self._pieces:
            yield self._pieces.pop(0)
            await asyncio.sleep(0)
            if self._fail:
                raise RuntimeError("the source broke")

    async def aclose(self) -> None:
        self.closed = True


async def echo_params(request: Request) -> Answer:
    return Answer.json({"params": dict(request.params), "query": request.query})


async def broken(request: Request) -> Answer:
    raise RuntimeError("a bug")


async def stream(request: Request) -> StreamAnswer:
    return StreamAnswer(200, Events(fail=request.query == "fail"), (("Content-Type", "text/x"),))


async def keyed(request: Request) -> Answer:
    return Answer.json({"who": request.identity, "body": len(request.body)})


def check_head(headers: Mapping[str, str]) -> object:
    if headers.get("authorization") != "Bearer k":
        raise OrchestratorError(ErrorCode.UNAUTHENTICATED, "no key")
    return "k-id"


@contextmanager
def serving(routes: Callable[[], RouteTable]) -> Iterator[str]:
    loop = asyncio.new_event_loop()

    async def start() -> asyncio.Server:
        connections = Connections(routes(), ConnectionSettings())
        connections.start()
        return await loop.create_server(connections, "127.0.0.1", 0)

    server = loop.run_until_complete(start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        loop.call_soon_threadsafe(server.close)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)


def table() -> RouteTable:
    routes = RouteTable(check_head)
    routes.add(Route("GET", "/v1/responses/{id}", echo_params))
    routes.add(Route("POST", "/v1/responses/{id}/cancel", echo_params))
    routes.add(Route("GET", "/broken", broken))
    routes.add(Route("GET", "/stream", stream))
    routes.add(Route("POST", "/keyed", keyed, keyed=True, reads_body=True))
    return routes


def get(path: str, *fields: str, method: str = "GET", body: bytes = b"") -> bytes:
    extra = "".join(f"{f}\r\n" for f in fields)
    head = f"{method} {path} HTTP/1.1\r\nHost: t\r\n{extra}Content-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


def test_path_parameters_and_the_query_reach_the_handler() -> None:
    with serving(table) as url, RawClient(url) as client:
        client.send(get("/v1/responses/resp_1?include=x"))
        first = json.loads(client.answer().body)
        client.send(get("/v1/responses/resp_2/cancel", method="POST"))
        second = json.loads(client.answer().body)
        client.send(get("/v1/responses/resp_2/cancel"))
        wrong = client.answer()
    assert first == {"params": {"id": "resp_1"}, "query": "include=x"}
    assert second["params"] == {"id": "resp_2"}
    assert wrong.status == 405 and wrong.headers["allow"] == "POST"


def test_a_handlers_bug_is_a_500_error_body_and_the_connection_goes_on() -> None:
    with serving(table) as url, RawClient(url) as client:
        client.send(get("/broken") + get("/v1/responses/a"))
        bug, after = client.answer(), client.answer()
    assert bug.status == 500 and json.loads(bug.body)["error"]["code"] == 500
    assert after.status == 200


def test_a_stream_ends_where_its_source_ends_without_done() -> None:
    with serving(table) as url, RawClient(url) as client:
        client.send(get("/stream"))
        answer = client.answer()
        client.send(get("/v1/responses/a"))
        assert client.answer().status == 200  # the stream ended cleanly: the connection is kept
    assert answer.headers["transfer-encoding"] == "chunked"
    assert answer.body == b"".join(EVENTS)


def test_a_stream_that_fails_once_begun_closes_the_connection() -> None:
    with serving(table) as url, RawClient(url) as client:
        client.send(get("/stream?fail"))
        assert client.stream.readline().startswith(b"HTTP/1.1 200")
        rest = client.stream.read()  # until the server closes
    assert EVENTS[0] in rest and not rest.endswith(b"0\r\n\r\n")


def test_a_keyed_route_refuses_a_bad_head_and_passes_the_identity() -> None:
    with serving(table) as url:
        with RawClient(url) as client:  # refused from the head: the body is never waited for
            client.send(get("/keyed", "Authorization: Bearer nope", method="POST", body=b"{}")[:-1])
            refused = client.answer()
            assert client.closed_by_peer()
        with RawClient(url) as client:
            client.send(get("/keyed", "Authorization: Bearer k", method="POST", body=b"{}"))
            served = client.answer()
    assert refused.status == 401
    assert json.loads(served.body) == {"who": "k-id", "body": 2}
