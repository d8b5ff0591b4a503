"""The upstream client frames a replica's answer exactly: a chunked body decodes to the same
bytes however TCP splits it, a body ends where its framing says, and anything it cannot frame
with certainty is refused rather than guessed."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.forwarding.http1_wire import (
    ChunkedBody,
    HttpFramingError,
    LengthBody,
    UntilCloseBody,
    body_decoder,
    parse_head,
)

SSE = [b'data: {"choices": [{"text": " a"}]}\n\n', b"data: [DONE]\n\n"]


def chunked(pieces: list[bytes], *, extension: bytes = b"", trailer: bytes = b"") -> bytes:
    framed = b"".join(b"%x%s\r\n%s\r\n" % (len(p), extension, p) for p in pieces)
    return framed + b"0\r\n" + trailer + b"\r\n"


def decode_in_pieces(decoder: ChunkedBody, wire: bytes, cuts: list[int]) -> bytes:
    out = b""
    start = 0
    for cut in [*sorted(cuts), len(wire)]:
        out += decoder.feed(wire[start:cut])
        start = cut
    return out


def test_a_chunked_body_split_at_every_single_point_decodes_to_the_same_bytes() -> None:
    wire = chunked(SSE, extension=b";name=value", trailer=b"X-Trailer: 1\r\n")
    for cut in range(len(wire) + 1):
        decoder = ChunkedBody()
        assert decode_in_pieces(decoder, wire, [cut]) == b"".join(SSE), cut
        assert decoder.done and decoder.extra == b""


def test_a_chunked_body_fed_one_byte_at_a_time_decodes_and_ends() -> None:
    wire = chunked([b"x" * 300, b"y", b"z" * 70_000])
    decoder = ChunkedBody()

    out = decode_in_pieces(decoder, wire, list(range(1, len(wire))))

    assert out == b"x" * 300 + b"y" + b"z" * 70_000
    assert decoder.done


@settings(max_examples=300, deadline=None)
@given(
    pieces=st.lists(st.binary(min_size=1, max_size=600), min_size=1, max_size=6),
    seed=st.integers(min_value=0, max_value=2**32),
    splits=st.integers(min_value=0, max_value=40),
)
def test_a_chunked_body_split_anywhere_decodes_to_the_same_bytes(
    pieces: list[bytes], seed: int, splits: int
) -> None:
    wire = chunked(pieces)
    cuts = random.Random(seed).choices(range(len(wire) + 1), k=splits)
    decoder = ChunkedBody()

    assert decode_in_pieces(decoder, wire, cuts) == b"".join(pieces)
    assert decoder.done


def test_chunk_data_is_passed_on_before_its_chunk_is_whole() -> None:
    decoder = ChunkedBody()

    assert decoder.feed(b"13\r\ndata: first") == b"data: first"
    assert decoder.feed(b" token\n\n\r\n") == b" token\n\n"
    assert not decoder.done


def test_bytes_after_the_last_chunk_are_kept_apart_as_extra() -> None:
    decoder = ChunkedBody()

    assert decoder.feed(chunked([b"ab"]) + b"HTTP/1.1 200 OK") == b"ab"
    assert decoder.done and decoder.extra == b"HTTP/1.1 200 OK"


@pytest.mark.parametrize(
    "wire",
    [b"zz\r\nab\r\n", b"-1\r\n", b"0x2\r\nab\r\n", b"2\r\nabXY", b"1" * 20 + b"\r\n", b"\r\n"],
    ids=["not-hex", "negative", "0x-prefix", "no-crlf-after-data", "huge", "empty-size"],
)
def test_a_malformed_chunked_body_is_refused(wire: bytes) -> None:
    with pytest.raises(HttpFramingError):
        ChunkedBody().feed(wire)


def test_an_endless_chunk_size_line_is_refused() -> None:
    decoder = ChunkedBody()
    with pytest.raises(HttpFramingError):
        for _ in range(20):
            decoder.feed(b"1" * 1024)


def test_a_length_body_ends_at_its_length_and_keeps_what_follows() -> None:
    decoder = LengthBody(5)

    assert decoder.feed(b"ab") == b"ab"
    assert not decoder.done and not decoder.eof()
    assert decoder.feed(b"cdeEXTRA") == b"cde"
    assert decoder.done and decoder.extra == b"EXTRA"


def test_a_body_without_length_ends_with_the_connection() -> None:
    decoder = UntilCloseBody()

    assert decoder.feed(b"abc") == b"abc"
    assert not decoder.done
    assert decoder.eof() and decoder.done


def test_a_head_gives_status_lower_case_fields_and_joins_repeats() -> None:
    head = parse_head(
        b"HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\n"
        b"Vary: a\r\nvary:  b \r\nContent-Length: 10"
    )

    assert head.status == 429
    assert head.headers == {
        "content-type": "application/json",
        "vary": "a, b",
        "content-length": "10",
    }
    assert head.keep_alive


@pytest.mark.parametrize(
    ("status_line", "connection", "keep_alive"),
    [
        ("HTTP/1.1 200 OK", "", True),
        ("HTTP/1.1 200 OK", "Connection: close", False),
        ("HTTP/1.1 200 OK", "Connection: Keep-Alive, Close", False),
        ("HTTP/1.0 200 OK", "", False),
        ("HTTP/1.0 200 OK", "Connection: keep-alive", True),
        ("HTTP/1.1 200", "", True),
    ],
)
def test_keep_alive_follows_the_version_and_the_connection_field(
    status_line: str, connection: str, keep_alive: bool
) -> None:
    raw = status_line + ("\r\n" + connection if connection else "")

    assert parse_head(raw.encode()).keep_alive is keep_alive


@pytest.mark.parametrize(
    "raw",
    [
        b"HTTP/2 200 OK",
        b"ICY 200 OK",
        b"HTTP/1.1 20 OK",
        b"HTTP/1.1 2000 OK",
        b"HTTP/1.1 200 OK\r\nno colon here",
        b"HTTP/1.1 200 OK\r\nX-A: 1\r\n folded: continuation",
        b"HTTP/1.1 200 OK\r\nX-A: 1\nX-Injected: 2",
    ],
    ids=["http2", "not-http", "short-code", "long-code", "no-colon", "folded", "bare-lf"],
)
def test_a_malformed_head_is_refused(raw: bytes) -> None:
    with pytest.raises(HttpFramingError):
        parse_head(raw)


def test_chunked_framing_wins_over_content_length_and_no_body_statuses_have_none() -> None:
    both = parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked")
    decoder, reusable = body_decoder(both)
    assert isinstance(decoder, ChunkedBody) and reusable

    for status in (204, 304):
        empty, reusable = body_decoder(parse_head(b"HTTP/1.1 %d X\r\nContent-Length: 9" % status))
        assert empty.done and reusable


def test_a_body_framed_by_nothing_or_by_an_unknown_coding_makes_the_connection_single_use() -> None:
    for raw in (b"HTTP/1.1 200 OK", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip"):
        decoder, reusable = body_decoder(parse_head(raw))
        assert isinstance(decoder, UntilCloseBody) and not reusable


@pytest.mark.parametrize("length", ["", "abc", "-1", "1, 2", "+5", "1e3"])
def test_a_bad_content_length_is_refused(length: str) -> None:
    head = parse_head(f"HTTP/1.1 200 OK\r\nContent-Length: {length}".encode())
    with pytest.raises(HttpFramingError):
        body_decoder(head)


def test_a_repeated_equal_content_length_is_accepted() -> None:
    decoder, _ = body_decoder(
        parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2")
    )

    assert decoder.feed(b"ab") == b"ab" and decoder.done
