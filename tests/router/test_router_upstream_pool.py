"""The router's upstream client against scripted replicas on loopback: it reuses a kept
connection, never reuses one that cannot carry another request, passes stream bytes on as they
arrive, tells a broken connection from a refused one, and closes the connection of a request
whose deadline passed, so that the replica stops working on it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager

import pytest

from orchestrator.forwarding.upstream import (
    UpstreamConnectError,
    UpstreamDisconnected,
    UpstreamPool,
    UpstreamSettings,
)

Script = Callable[["Peer"], Awaitable[None]]
BODY = b'{"model": "m", "prompt": "caf\\u00e9"}'


class Peer:
    """One accepted connection, as the scripted replica sees it."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    async def request(self) -> tuple[bytes, bytes] | None:
        """The next request's head and body, or None once the client closed the connection."""
        try:
            head = await self.reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return None
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.lower() == b"content-length":
                length = int(value)
        return head, await self.reader.readexactly(length)

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def closed_by_client(self, within_s: float = 2.0) -> bool:
        try:
            return await asyncio.wait_for(self.reader.read(), within_s) == b""
        except (TimeoutError, ConnectionResetError):
            return False


class ScriptedReplica:
    """A TCP server on 127.0.0.1:0 that runs `script` on every connection it accepts."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.peers: list[Peer] = []
        self.heads: list[bytes] = []
        self.bodies: list[bytes] = []
        self.url = ""
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for peer in self.peers:
            peer.writer.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = Peer(reader, writer)
        self.peers.append(peer)
        await self.script(peer)

    async def answer_each(self, peer: Peer, answer: bytes) -> None:
        """Answer every request on the connection with `answer`, recording what came."""
        while (request := await peer.request()) is not None:
            self.heads.append(request[0])
            self.bodies.append(request[1])
            await peer.send(answer)


@asynccontextmanager
async def replica(script: Script) -> AsyncIterator[ScriptedReplica]:
    server = ScriptedReplica(script)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@asynccontextmanager
async def pool(settings: UpstreamSettings | None = None) -> AsyncIterator[UpstreamPool]:
    upstream = UpstreamPool(settings)
    await upstream.start()
    try:
        yield upstream
    finally:
        await upstream.close()


def whole(body: bytes, *fields: bytes) -> bytes:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + b"".join(
        field + b"\r\n" for field in fields
    )
    return head + b"Content-Length: %d\r\n\r\n" % len(body) + body


def stream_head() -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    )


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


async def post(upstream: UpstreamPool, url: str, timeout_s: float = 5.0) -> bytes:
    response = await upstream.post_json(
        url, "/v1/completions", BODY, timeout_s=timeout_s, connect_timeout_s=1.0
    )
    try:
        assert response.status == 200
        return await response.read()
    finally:
        response.release()


@contextmanager
def takes_about(seconds: float) -> Iterator[None]:
    started = time.monotonic()
    yield
    took_s = time.monotonic() - started
    assert seconds - 0.05 <= took_s < seconds + 0.5, took_s


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(test(), 20))


# -- connection reuse -----------------------------------------------------------------------------


def test_requests_one_after_another_share_one_connection_and_arrive_unchanged() -> None:
    async def test() -> None:
        async def script(peer: Peer) -> None:
            await server.answer_each(peer, whole(b'{"ok": 1}'))

        server = ScriptedReplica(script)
        await server.start()
        async with pool() as upstream:
            answers = [await post(upstream, server.url) for _ in range(3)]
        await server.stop()

        assert answers == [b'{"ok": 1}'] * 3
        assert len(server.peers) == 1
        assert server.bodies == [BODY] * 3
        assert all(head.startswith(b"POST /v1/completions HTTP/1.1\r\n") for head in server.heads)
        assert all(b"\r\nContent-Type: application/json\r\n" in head for head in server.heads)
        host = server.url.removeprefix("http://").encode()
        assert all(b"\r\nHost: " + host + b"\r\n" in head for head in server.heads)

    run(test)


def test_a_connection_the_replica_will_close_is_not_reused() -> None:
    async def test() -> None:
        async def script(peer: Peer) -> None:
            await peer.request()
            await peer.send(whole(b"{}", b"Connection: close"))
            peer.writer.close()

        async with replica(script) as server, pool() as upstream:
            assert [await post(upstream, server.url) for _ in range(2)] == [b"{}", b"{}"]
            assert len(server.peers) == 2

    run(test)


def test_an_idle_connection_the_replica_closed_is_dropped_and_the_next_request_succeeds() -> None:
    async def test() -> None:
        async def script(peer: Peer) -> None:
            await peer.request()
            await peer.send(whole(b"{}"))
            peer.writer.close()  # as a replica's keep-alive timeout would

        async with replica(script) as server, pool() as upstream:
            assert await post(upstream, server.url) == b"{}"
            await asyncio.sleep(0.1)
            assert await post(upstream, server.url) == b"{}"
            assert len(server.peers) == 2

    run(test)


def test_a_connection_idle_past_keepalive_is_closed_not_reused() -> None:
    async def test() -> None:
        async def script(peer: Peer) -> None:
            await server.answer_each(peer, whole(b"{}"))

        server = ScriptedReplica(script)
        await server.start()
        async with pool(UpstreamSettings(keepalive_s=0.05)) as upstream:
            await post(upstream, server.url)
            await asyncio.sleep(0.15)
            await post(upstream, server.url)
            assert len(server.peers) == 2
            assert await server.peers[0].closed_by_client()
        await server.stop()

    run(test)


# -- streams --------------------------------------------------------------------------------------


def test_stream_bytes_are_passed_on_as_they_arrive_and_the_connection_is_kept() -> None:
    async def test() -> None:
        first_read = asyncio.Event()
        rest = chunk(b"data: 2\n\n") + chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"

        async def script(peer: Peer) -> None:
            while await peer.request() is not None:
                await peer.send(stream_head() + chunk(b"data: 1\n\n"))
                await first_read.wait()
                for byte in range(len(rest)):  # the worst TCP could do
                    await peer.send(rest[byte : byte + 1])
                    await asyncio.sleep(0)

        async with replica(script) as server, pool() as upstream:
            response = await upstream.post_json(
                server.url, "/v1/completions", BODY, timeout_s=5, connect_timeout_s=1
            )
            assert response.headers["content-type"] == "text/event-stream"
            assert await response.read_some() == b"data: 1\n\n"  # before the rest was sent
            first_read.set()
            received = b""
            while piece := await response.read_some():
                received += piece
            response.release()
            first_read.clear()

            assert received == b"data: 2\n\ndata: [DONE]\n\n"
            second = await upstream.post_json(
                server.url, "/v1/completions", BODY, timeout_s=5, connect_timeout_s=1
            )
            first_read.set()
            assert await second.read() == b"data: 1\n\ndata: 2\n\ndata: [DONE]\n\n"
            second.release()
            assert len(server.peers) == 1

    run(test)


def test_closing_a_response_mid_stream_closes_its_connection() -> None:
    async def test() -> None:
        async def script(peer: Peer) -> None:
            await peer.request()
            await peer.send(stream_head() + chunk(b"data: 1\n\n"))
            replica_saw_close.set_result(await peer.closed_by_client())

        replica_saw_close: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        async with replica(script) as server, pool() as upstream:
            response = await upstream.post_json(
                server.url, "/v1/completions", BODY, timeout_s=5, connect_timeout_s=1
            )
            assert await response.read_some() == b"data: 1\n\n"
            response.close()

            assert await replica_saw_close

    run(test)


def test_answers_far_larger_than_the_read_buffer_arrive_whole() -> None:
    big = bytes(range(256)) * 8 * 1024  # 2 MiB, well past the point where reading pauses

    async def test() -> None:
        async def script(peer: Peer) -> None:
            while (request := await peer.request()) is not None:
                if b"chunked" in request[1]:
                    pieces = [big[i : i + 100_000] for i in range(0, len(big), 100_000)]
                    await peer.send(stream_head() + b"".join(map(chunk, pieces)) + b"0\r\n\r\n")
                else:
                    await peer.send(whole(big))

        async with replica(script) as server, pool() as upstream:
            assert await post(upstream, server.url) == big  # read whole, Content-Length
            response = await upstream.post_json(
                server.url, "/v1/completions", b'"chunked"', timeout_s=5, connect_timeout_s=1
            )
            assert await response.read() == big  # read whole, chunked
            response.release()
            response = await upstream.post_json(
                server.url, "/v1/completions", b'"chunked"', timeout_s=5, connect_timeout_s=1
            )
            received = b""
            while piece := await response.read_some():  # a slow reader of a fast stream
                received += piece
                await asyncio.sleep(0.001)
            response.release()
            assert received == big
            assert len(server.peers) == 1

    run(test)


def test_a_response_released_early_keeps_its_connection_if_the_body_ends_within_the_drain() -> None:
    async def test() -> None:
        go_on: asyncio.Queue[bool] = asyncio.Queue()

        async def script(peer: Peer) -> None:
            while await peer.request() is not None:
                await peer.send(stream_head() + chunk(b"data: [DONE]\n\n"))
                if await go_on.get():
                    await peer.send(b"0\r\n\r\n")  # the body ends after the release
                else:
                    replica_saw_close.set_result(await peer.closed_by_client())

        replica_saw_close: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        async with replica(script) as server, pool() as upstream:
            for ends in (True, True, False):
                response = await upstream.post_json(
                    server.url, "/v1/completions", BODY, timeout_s=5, connect_timeout_s=1
                )
                assert await response.read_some() == b"data: [DONE]\n\n"
                response.release(drain_s=0.3)
                go_on.put_nowait(ends)
                await asyncio.sleep(0.05)

            assert len(server.peers) == 1  # kept twice: each body ended within the drain
            with takes_about(0.3 - 0.05):
                assert await replica_saw_close  # never ended: closed once the drain ran out

    run(test)


# -- failures -------------------------------------------------------------------------------------


def test_an_answer_cut_mid_body_raises_disconnected() -> None:
    async def test() -> None:
        async def cut_whole(peer: Peer) -> None:
            await peer.request()
            await peer.send(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b"x" * 10)
            peer.writer.close()

        async def cut_stream(peer: Peer) -> None:
            await peer.request()
            await peer.send(stream_head() + chunk(b"data: 1\n\n") + b"20\r\ndata: 2")
            peer.writer.close()

        async with replica(cut_whole) as server, pool() as upstream:
            response = await upstream.post_json(
                server.url, "/v1/completions", BODY, timeout_s=5, connect_timeout_s=1
            )
            with pytest.raises(UpstreamDisconnected):
                await response.read()
            response.release()

        async with replica(cut_stream) as server, pool() as upstream:
            response = await upstream.post_json(
                server.url, "/v1/completions", BODY, timeout_s=5, connect_timeout_s=1
            )
            received = b""
            with pytest.raises(UpstreamDisconnected):
                while piece := await response.read_some():
                    received += piece
            response.release()
            assert received == b"data: 1\n\ndata: 2"

    run(test)


def test_a_connection_closed_before_any_answer_raises_disconnected() -> None:
    async def test() -> None:
        async def script(peer: Peer) -> None:
            await peer.request()
            peer.writer.close()

        async with replica(script) as server, pool() as upstream:
            with pytest.raises(UpstreamDisconnected):
                await post(upstream, server.url)

    run(test)


def test_an_answer_that_is_not_http_raises_disconnected() -> None:
    async def test() -> None:
        async def script(peer: Peer) -> None:
            await peer.request()
            await peer.send(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")
            await peer.closed_by_client()

        async with replica(script) as server, pool() as upstream:
            with pytest.raises(UpstreamDisconnected):
                await post(upstream, server.url)

    run(test)


def test_a_refused_connection_raises_connect_error() -> None:
    async def test() -> None:
        async with replica(lambda peer: asyncio.sleep(0)) as server:
            url = server.url
        async with pool() as upstream:
            with pytest.raises(UpstreamConnectError):
                await post(upstream, url)

    run(test)


def test_no_answer_by_the_deadline_raises_timeout_and_closes_the_connection() -> None:
    async def test() -> None:
        async def script(peer: Peer) -> None:
            await peer.request()
            replica_saw_close.set_result(await peer.closed_by_client(within_s=5))

        replica_saw_close: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        async with replica(script) as server, pool() as upstream:
            with takes_about(0.3), pytest.raises(TimeoutError):
                await post(upstream, server.url, timeout_s=0.3)
            assert await replica_saw_close

    run(test)


async def _second_exchange_unanswered(first_timeout_s: float, second_timeout_s: float) -> None:
    """Two exchanges on one kept connection: the first answered, the second never; the second
    must time out at its own deadline, whatever the first one's was."""

    async def script(peer: Peer) -> None:
        await peer.request()
        await peer.send(whole(b"{}"))
        await peer.request()
        replica_saw_close.set_result(await peer.closed_by_client(within_s=5))

    replica_saw_close: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
    async with replica(script) as server, pool() as upstream:
        assert await post(upstream, server.url, timeout_s=first_timeout_s) == b"{}"
        await asyncio.sleep(0.2)
        with takes_about(second_timeout_s), pytest.raises(TimeoutError):
            await post(upstream, server.url, timeout_s=second_timeout_s)
        assert await replica_saw_close
        assert len(server.peers) == 1  # both went over the one connection


def test_an_exchange_on_a_kept_connection_times_out_at_its_own_later_deadline() -> None:
    run(lambda: _second_exchange_unanswered(0.4, 0.4))


def test_an_exchange_on_a_kept_connection_times_out_at_its_own_sooner_deadline() -> None:
    run(lambda: _second_exchange_unanswered(5.0, 0.3))


def test_a_stream_stalled_past_its_deadline_raises_timeout_on_the_next_read() -> None:
    async def test() -> None:
        async def script(peer: Peer) -> None:
            await peer.request()
            await peer.send(stream_head() + chunk(b"data: 1\n\n"))
            replica_saw_close.set_result(await peer.closed_by_client(within_s=5))

        replica_saw_close: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        async with replica(script) as server, pool() as upstream:
            response = await upstream.post_json(
                server.url, "/v1/completions", BODY, timeout_s=0.3, connect_timeout_s=1
            )
            assert await response.read_some() == b"data: 1\n\n"
            with takes_about(0.3), pytest.raises(TimeoutError):
                await response.read_some()
            response.close()
            assert await replica_saw_close

    run(test)


# -- limits ---------------------------------------------------------------------------------------


def test_requests_over_the_per_replica_limit_wait_for_a_free_connection() -> None:
    async def test() -> None:
        busy = 0
        most_busy = 0

        async def script(peer: Peer) -> None:
            nonlocal busy, most_busy
            while await peer.request() is not None:
                busy += 1
                most_busy = max(most_busy, busy)
                await asyncio.sleep(0.05)
                busy -= 1
                await peer.send(whole(b"{}"))

        async with replica(script) as server, pool(UpstreamSettings(limit_per_host=1)) as upstream:
            answers = await asyncio.gather(*(post(upstream, server.url) for _ in range(4)))

        assert answers == [b"{}"] * 4
        assert most_busy == 1
        assert len(server.peers) == 1

    run(test)


def test_waiting_for_a_free_connection_ends_at_the_deadline() -> None:
    async def test() -> None:
        async def script(peer: Peer) -> None:
            await peer.request()
            await asyncio.sleep(5)

        async with replica(script) as server, pool(UpstreamSettings(limit=1)) as upstream:
            holder = asyncio.create_task(post(upstream, server.url))
            await asyncio.sleep(0.05)
            with takes_about(0.2), pytest.raises(TimeoutError):
                await post(upstream, server.url, timeout_s=0.2)
            holder.cancel()

    run(test)


def test_get_reads_a_page_and_a_cancelled_request_frees_its_slot() -> None:
    async def test() -> None:
        async def script(peer: Peer) -> None:
            while (request := await peer.request()) is not None:
                if request[0].startswith(b"GET /metrics "):
                    page = b"vllm:num_requests_running 0\n"
                    await peer.send(
                        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                        + chunk(page[:5])
                        + chunk(page[5:])
                        + b"0\r\n\r\n"
                    )
                # any other request: no answer

        async with replica(script) as server, pool(UpstreamSettings(limit_per_host=1)) as upstream:
            stuck = asyncio.create_task(post(upstream, server.url))
            await asyncio.sleep(0.05)
            stuck.cancel()
            await asyncio.gather(stuck, return_exceptions=True)
            response = await upstream.get(server.url, "/metrics", timeout_s=2, connect_timeout_s=1)
            assert await response.read() == b"vllm:num_requests_running 0\n"
            response.release()

    run(test)
