"""The bytes of an answer on the wire (RFC 9112): a whole answer with its length, a streamed
one's head and chunks (raw bytes to an HTTP/1.0 client, whose body the connection's end ends)."""

from __future__ import annotations

from typing import Final

from orchestrator.frontends.http.messages import Answer, StreamAnswer, header_field, status_line

LAST_CHUNK: Final = b"0\r\n\r\n"


def answer_head(status: int, fields: bytes, date: bytes, keep_alive: bool) -> bytes:
    """Status line, `fields`, `Date`, and `Connection: close` unless the connection goes on."""
    if keep_alive:
        return status_line(status) + fields + date + b"\r\n"
    return status_line(status) + fields + date + b"Connection: close\r\n\r\n"


def whole_answer(
    answer: Answer, date: bytes, keep_alive: bool, http10: bool, closing: bool
) -> bytes:
    fields = b""
    for name, value in answer.headers:  # a loop, not a generator: a few calls fewer
        fields += header_field(name, value)
    if answer.content_type is not None:
        fields += b"Content-Type: " + answer.content_type.encode("latin-1") + b"\r\n"
    if http10 and keep_alive:
        fields += b"Connection: keep-alive\r\n"
    fields += b"Content-Length: %d\r\n" % len(answer.body)
    return answer_head(answer.status, fields, date, keep_alive and not closing) + answer.body


def stream_head(answer: StreamAnswer, date: bytes, keep_alive: bool, http10: bool) -> bytes:
    fields = b"".join(header_field(name, value) for name, value in answer.headers)
    if http10:
        return answer_head(answer.status, fields, date, False)
    return answer_head(answer.status, fields + b"Transfer-Encoding: chunked\r\n", date, keep_alive)


def chunk(data: bytes, http10: bool) -> bytes:
    return data if http10 else b"%x\r\n" % len(data) + data + b"\r\n"


def cut_end(event: bytes, http10: bool) -> bytes:
    """What ends a stream that is cut: its terminal event (whole, one chunk), the last chunk."""
    if http10:
        return event
    return (chunk(event, False) if event else b"") + LAST_CHUNK
