"""A deliberately trivial OpenAI-shaped backend for measuring what sits in front of it.

Answers completions instantly with a fixed body, or a stream of a fixed number of SSE events (one
HTTP chunk each), plus the health, model and metrics routes that routers probe at start. Written
on `asyncio.Protocol` with keep-alive so that it costs a router benchmark as little CPU as
possible.

    python -m orchestrator.bench.static_backend --port 9001 [--model NAME] [--stream-chunks 16]
    python -m orchestrator.bench.static_backend --count 512 --vllm-page

With `--count N` it serves N replicas from one process on N free ports, and prints them as one
JSON line (`{"ports": [...]}`); `--vllm-page` serves a vLLM-sized `/metrics` page (`vllm_page`)
instead of the few lines a router needs. `--delay-ms` holds each completion that long, and then
each replica's page reports the completions it holds as `vllm:num_requests_running`, so requests
pile up where a router sends them and the load it is told about is true.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
from collections.abc import Callable, Sequence
from typing import cast

from orchestrator.core.arg_types import non_negative_float, port, positive_int

_JSON = b"application/json"


def _response(status: bytes, content_type: bytes, body: bytes) -> bytes:
    return (
        b"HTTP/1.1 " + status + b"\r\nContent-Type: " + content_type
        + b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )  # fmt: skip


class StaticReplies:
    """Every reply, encoded once."""

    def __init__(self, model: str, stream_chunks: int, metrics_page: bytes | None = None) -> None:
        usage = {
            "prompt_tokens": 8,
            "completion_tokens": stream_chunks,
            "total_tokens": 8 + stream_chunks,
        }
        whole = {
            "id": "cmpl-static", "object": "text_completion", "created": 0, "model": model,
            "choices": [{"index": 0, "text": " ok" * stream_chunks, "logprobs": None,
                         "finish_reason": "length"}],
            "usage": usage,
        }  # fmt: skip
        self.completion = _response(b"200 OK", _JSON, json.dumps(whole).encode())
        event = {
            "id": "cmpl-static", "object": "text_completion", "created": 0, "model": model,
            "choices": [{"index": 0, "text": " ok", "logprobs": None, "finish_reason": None}],
        }  # fmt: skip
        line = b"data: " + json.dumps(event).encode() + b"\n\n"
        chunks = [line] * stream_chunks + [b"data: [DONE]\n\n"]
        body = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"
        self.stream = (
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n" + body
        )
        models = {"object": "list", "data": [{"id": model, "object": "model", "owned_by": "bench"}]}
        info = {"model_path": model, "tokenizer_path": model, "is_generation": True}
        server = {"model_path": model, "max_total_num_tokens": 1 << 20, "context_length": 131072}
        metrics = metrics_page or (
            b"vllm:num_requests_running 0\nvllm:num_requests_waiting 0\n"
            b"vllm:kv_cache_usage_perc 0\nvllm:generation_tokens_total 0\n"
        )
        self.get = {
            b"/health": _response(b"200 OK", b"text/plain", b""),
            b"/v1/models": _response(b"200 OK", _JSON, json.dumps(models).encode()),
            b"/get_model_info": _response(b"200 OK", _JSON, json.dumps(info).encode()),
            b"/model_info": _response(b"200 OK", _JSON, json.dumps(info).encode()),
            b"/get_server_info": _response(b"200 OK", _JSON, json.dumps(server).encode()),
            b"/server_info": _response(b"200 OK", _JSON, json.dumps(server).encode()),
            b"/metrics": _response(b"200 OK", b"text/plain", metrics),
        }
        self.not_found = _response(b"404 Not Found", _JSON, b'{"error": {"message": "no route"}}')


class HeldCompletions:
    """One replica's completions held for `delay_s`, and its page with their count as running."""

    def __init__(self, delay_s: float, page: bytes) -> None:
        self.delay_s = delay_s
        self.running = 0
        at = page.index(b"vllm:num_requests_running{")
        value_at = page.index(b" ", at) + 1
        self._head, self._tail = page[:value_at], page[page.index(b"\n", value_at) :]

    def metrics(self) -> bytes:
        return _response(
            b"200 OK", b"text/plain", self._head + str(self.running).encode() + self._tail
        )


class StaticProtocol(asyncio.Protocol):
    """HTTP/1.1 with keep-alive and Content-Length bodies; enough for benchmarks, no more."""

    def __init__(self, replies: StaticReplies, held: HeldCompletions | None = None) -> None:
        self.replies = replies
        self.held = held
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buffer[:end]
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value.strip())
            if len(self.buffer) < end + 4 + length:
                return
            body = self.buffer[end + 4 : end + 4 + length]
            self.buffer = self.buffer[end + 4 + length :]
            self._reply(head.split(b" ", 2), body)

    def _reply(self, request_line: list[bytes], body: bytes) -> None:
        assert self.transport is not None
        method, path = request_line[0], request_line[1] if len(request_line) > 1 else b"/"
        replies = self.replies
        if method == b"POST" and path.startswith(b"/v1/"):
            streaming = b'"stream": true' in body or b'"stream":true' in body
            reply = replies.stream if streaming else replies.completion
            if self.held is None:
                self.transport.write(reply)
            else:
                self.held.running += 1
                asyncio.get_running_loop().call_later(self.held.delay_s, self._release, reply)
        elif self.held is not None and path == b"/metrics":
            self.transport.write(self.held.metrics())
        else:
            self.transport.write(replies.get.get(path.split(b"?")[0], replies.not_found))

    def _release(self, reply: bytes) -> None:
        assert self.held is not None
        self.held.running -= 1
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(reply)


async def serve(host: str, port: int, replies: StaticReplies) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: StaticProtocol(replies), host, port, backlog=4096)
    async with server:
        await server.serve_forever()


def _factory(replies: StaticReplies, held: HeldCompletions | None) -> Callable[[], StaticProtocol]:
    return lambda: StaticProtocol(replies, held)


async def serve_many(
    host: str, count: int, replies: StaticReplies, delay_s: float = 0.0, page: bytes = b""
) -> None:
    """`count` replicas on free ports; their ports go to stdout as one JSON line. With `delay_s`,
    each replica holds its completions that long and counts them on its page (`page`)."""
    loop = asyncio.get_running_loop()
    servers = []
    for _ in range(count):
        held = HeldCompletions(delay_s, page) if delay_s > 0 else None
        servers.append(await loop.create_server(_factory(replies, held), host, 0, backlog=1024))
    ports = [server.sockets[0].getsockname()[1] for server in servers]
    print(json.dumps({"ports": ports}), flush=True)
    await asyncio.gather(*(server.serve_forever() for server in servers))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--port", type=port)
    where.add_argument("--count", type=positive_int, help="serve this many replicas on free ports")
    parser.add_argument("--vllm-page", action="store_true", help="serve a vLLM-sized /metrics")
    parser.add_argument(
        "--delay-ms",
        type=non_negative_float,
        default=0.0,
        help="with --count: hold each completion this long",
    )
    parser.add_argument("--model", default="openai/gpt-oss-120b")
    parser.add_argument("--stream-chunks", type=positive_int, default=16)
    args = parser.parse_args(argv)
    with contextlib.suppress(ImportError):
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    page = None
    if args.vllm_page or args.delay_ms > 0:
        from orchestrator.bench.vllm_page import vllm_metrics_page

        page = vllm_metrics_page()
    replies = StaticReplies(args.model, args.stream_chunks, page)
    with contextlib.suppress(KeyboardInterrupt):
        if args.count is not None:
            delay_s = args.delay_ms / 1000.0
            asyncio.run(serve_many(args.host, args.count, replies, delay_s, page or b""))
        else:
            asyncio.run(serve(args.host, args.port, replies))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
