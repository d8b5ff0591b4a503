"""HTTP/1.1 response framing, free of sockets: read a response head, then decode its body as it
arrives in pieces of any size, framed by Content-Length, the chunked transfer coding, or the end
of the connection (RFC 9112, sections 4-7).

Anything this module cannot frame with certainty raises `HttpFramingError`: a relay that guessed
would hand the client bytes of the next response, or keep a connection whose framing is lost.
"""

from __future__ import annotations

import re
from typing import Final, NamedTuple, Protocol

MAX_HEAD_BYTES: Final = 64 * 1024
MAX_LINE_BYTES: Final = 8 * 1024  # one chunk-size or trailer line
_HEX_SIZE: Final = re.compile(rb"[0-9A-Fa-f]{1,15}")
_HEX_DIGITS: Final = b"0123456789abcdefABCDEF"
_DIGITS: Final = re.compile(r"[0-9]{1,18}")
_CONTROL: Final = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")  # CR and LF counted apart
_VERSIONS: Final = frozenset({"HTTP/1.1", "HTTP/1.0"})
_NO_BODY_STATUSES: Final = frozenset({204, 304})


class HttpFramingError(ValueError):
    """The peer sent something that is not a well-framed HTTP/1.1 response."""


class ResponseHead(NamedTuple):
    """A response's status line and header fields.

    `headers` has lower-case names; a field sent more than once holds its values joined by ", ".
    `keep_alive` says whether the connection may carry another request once this body ends.
    """

    status: int
    headers: dict[str, str]
    keep_alive: bool


class BodyDecoder(Protocol):
    """Turns the bytes after a head into body bytes, piece by piece.

    `feed` returns the body bytes found in `data` (possibly empty); once `done`, `extra` holds any
    bytes that followed the body. `eof` says whether the connection ending now ends the body
    cleanly (only a body framed by the connection's end does).
    """

    done: bool
    extra: bytes

    def feed(self, data: bytes) -> bytes: ...

    def eof(self) -> bool: ...


def parse_head(head: bytes) -> ResponseHead:
    """Parse a head without its final blank line (everything before the first CRLFCRLF)."""
    text = head.decode("latin-1")
    breaks = text.count("\r\n")
    if text.count("\r") != breaks or text.count("\n") != breaks or _CONTROL.search(text):
        # a bare CR or LF could smuggle a header into the answer relayed to the client
        raise HttpFramingError("control character in the response head")
    status_line, *lines = text.split("\r\n")
    version, _, rest = status_line.partition(" ")
    code = rest[:3]
    if version not in _VERSIONS or len(code) != 3 or not code.isdigit() or rest[3:4] not in " ":
        raise HttpFramingError(f"not an HTTP/1.x status line: {status_line[:80]!r}")
    headers: dict[str, str] = {}
    for line in lines:
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():  # obsolete line folding included
            raise HttpFramingError(f"malformed header line: {line[:80]!r}")
        key = name.lower()
        value = value.strip()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    connection = headers.get("connection")
    if connection is None:
        keep_alive = version == "HTTP/1.1"
    else:
        tokens = {token.strip().lower() for token in connection.split(",")}
        keep_alive = "keep-alive" in tokens if version == "HTTP/1.0" else "close" not in tokens
    return ResponseHead(int(code), headers, keep_alive)


def body_decoder(head: ResponseHead) -> tuple[BodyDecoder, bool]:
    """The decoder of the body that follows `head`, and whether the connection stays reusable.

    Follows RFC 9112 section 6.3: no body for 1xx, 204 and 304; chunked when it is the last
    transfer coding, else until the connection closes; then Content-Length; then until close.
    The router only sends GET and POST, so a HEAD request's bodiless answer never occurs.
    """
    if head.status < 200 or head.status in _NO_BODY_STATUSES:
        return LengthBody(0), head.keep_alive
    coding = head.headers.get("transfer-encoding")
    if coding is not None:
        if coding.rsplit(",", 1)[-1].strip().lower() == "chunked":
            return ChunkedBody(), head.keep_alive
        return UntilCloseBody(), False
    length = head.headers.get("content-length")
    if length is not None:
        if not _DIGITS.fullmatch(length):  # repeated fields were joined: "5, 5" is still 5
            values = {v.strip() for v in length.split(",")}
            value = values.pop() if len(values) == 1 else ""
            if not _DIGITS.fullmatch(value):
                raise HttpFramingError(f"bad Content-Length: {length[:40]!r}")
            length = value
        return LengthBody(int(length)), head.keep_alive
    return UntilCloseBody(), False


def _chunk_size(line: bytes) -> int:
    """The size on a chunk-size line; extensions (after `;`) are dropped."""
    if 0 < len(line) <= 15 and not line.strip(_HEX_DIGITS):  # plain hex digits: the usual case
        return int(line, 16)
    size = line.split(b";", 1)[0].strip(b" \t")
    if not _HEX_SIZE.fullmatch(size):
        raise HttpFramingError(f"bad chunk size line: {line[:40]!r}")
    return int(size, 16)


class LengthBody:
    """A body of exactly `length` bytes."""

    __slots__ = ("_remaining", "done", "extra")

    def __init__(self, length: int) -> None:
        self._remaining = length
        self.done = length == 0
        self.extra = b""

    def feed(self, data: bytes) -> bytes:
        if self.done:
            self.extra += data
            return b""
        remaining = self._remaining
        if len(data) < remaining:
            self._remaining = remaining - len(data)
            return data
        self._remaining = 0
        self.done = True
        if len(data) > remaining:
            self.extra = data[remaining:]
            return data[:remaining]
        return data

    def eof(self) -> bool:
        return self.done


class UntilCloseBody:
    """A body that ends when the connection does (no length, no chunking)."""

    __slots__ = ("done", "extra")

    def __init__(self) -> None:
        self.done = False
        self.extra = b""

    def feed(self, data: bytes) -> bytes:
        return data

    def eof(self) -> bool:
        self.done = True
        return True


_SIZE, _DATA, _DATA_END, _TRAILER = range(4)


class ChunkedBody:
    """The chunked transfer coding: chunk data is passed on as soon as any of it arrives; only a
    chunk-size line, the CRLF after chunk data, or a trailer line split across reads waits for
    its remaining bytes. Chunk extensions and trailer fields are read and dropped."""

    __slots__ = ("_pending", "_remaining", "_state", "done", "extra")

    def __init__(self) -> None:
        self._pending = b""  # an incomplete line or CRLF carried over to the next read
        self._remaining = 0  # bytes of the current chunk's data not yet seen
        self._state = _SIZE
        self.done = False
        self.extra = b""

    def feed(self, data: bytes) -> bytes:
        if self.done:
            self.extra += data
            return b""
        if self._pending:
            data = self._pending + data
            self._pending = b""
        out: list[bytes] = []
        pos, end = 0, len(data)
        state = self._state
        remaining = self._remaining
        while pos < end:
            if state == _SIZE:
                eol = data.find(b"\r\n", pos, pos + MAX_LINE_BYTES + 2)
                if eol < 0:
                    if end - pos > MAX_LINE_BYTES:
                        raise HttpFramingError("chunk-size line too long")
                    break
                remaining = _chunk_size(data[pos:eol])
                pos = eol + 2
                state = _DATA if remaining else _TRAILER
            elif state == _DATA:
                if end - pos >= remaining + 2:  # the whole chunk and its CRLF: the usual case
                    after = pos + remaining
                    out.append(data[pos:after])
                    if data[after : after + 2] != b"\r\n":
                        raise HttpFramingError("chunk data not followed by CRLF")
                    pos = after + 2
                    state = _SIZE
                else:
                    take = min(remaining, end - pos)
                    if take:
                        out.append(data[pos : pos + take])
                        pos += take
                        remaining -= take
                    if not remaining:
                        state = _DATA_END
            elif state == _DATA_END:
                if end - pos < 2:
                    break
                if data[pos : pos + 2] != b"\r\n":
                    raise HttpFramingError("chunk data not followed by CRLF")
                pos += 2
                state = _SIZE
            else:  # trailer fields, dropped, up to the blank line that ends the body
                eol = data.find(b"\r\n", pos, pos + MAX_LINE_BYTES + 2)
                if eol < 0:
                    if end - pos > MAX_LINE_BYTES:
                        raise HttpFramingError("trailer line too long")
                    break
                if eol == pos:
                    self.done = True
                    self.extra = data[pos + 2 :]
                    pos = end
                else:
                    pos = eol + 2
        self._state = state
        self._remaining = remaining
        if pos < end and not self.done:
            self._pending = data[pos:]
        return out[0] if len(out) == 1 else b"".join(out)

    def eof(self) -> bool:
        return self.done
