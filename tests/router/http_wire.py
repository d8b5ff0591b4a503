"""Raw HTTP/1.1 over a socket, for tests that must send bytes no client library would: one
connection to write anything to and read answers from, in order."""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from typing import BinaryIO

from router_harness import MODEL


@dataclass
class WireAnswer:
    status: int
    headers: dict[str, str]
    body: bytes
    interim: list[int]


def read_answer(stream: BinaryIO) -> WireAnswer:
    """One answer from `stream`, interim 1xx answers noted and skipped, the body de-chunked."""
    interim: list[int] = []
    while True:
        line = stream.readline()
        if not line:
            raise ConnectionError("the router closed the connection without an answer")
        status = int(line.split()[1])
        headers: dict[str, str] = {}
        while (line := stream.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        if status >= 200:
            break
        interim.append(status)
    if headers.get("transfer-encoding") == "chunked":
        body = b""
        while size := int(stream.readline().split(b";")[0], 16):
            body += stream.read(size)
            assert stream.read(2) == b"\r\n"
        assert stream.readline() == b"\r\n"
    elif "content-length" in headers:
        body = stream.read(int(headers["content-length"]))
    else:
        body = stream.read()
    return WireAnswer(status, headers, body, interim)


class RawClient:
    """One TCP connection to `url`: write any bytes, read answers in order."""

    def __init__(self, url: str, timeout_s: float = 10.0) -> None:
        host, port = url.removeprefix("http://").split(":")
        self.socket = socket.create_connection((host, int(port)), timeout=timeout_s)
        self.stream = self.socket.makefile("rb")

    def send(self, data: bytes) -> None:
        self.socket.sendall(data)

    def answer(self) -> WireAnswer:
        return read_answer(self.stream)

    def closed_by_peer(self) -> bool:
        try:
            return self.stream.read(1) == b""
        except ConnectionResetError:
            return True

    def close(self) -> None:
        self.stream.close()
        self.socket.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def completion(prompt: str, **fields: object) -> bytes:
    return json.dumps({"model": MODEL, "prompt": prompt, "max_tokens": 2, **fields}).encode()


def post(body: bytes, path: str = "/v1/completions", *extra: str, version: str = "1.1") -> bytes:
    fields = "".join(f"{field}\r\n" for field in extra)
    return (
        f"POST {path} HTTP/{version}\r\nHost: router\r\nContent-Type: application/json\r\n"
        f"{fields}Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
