"""The two SSE framings read from bytes: where a stream ends, its usage, its terminal error."""

from __future__ import annotations

import json

from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.forwarding.event_stream import (
    COMPLETIONS_FRAMING,
    RESPONSES_FRAMING,
    Framing,
    framing_for,
    response_id,
)

COMPLETED = (
    b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta",'
    b'"sequence_number":7,"delta":" a"}\n\n'
    b'event: response.completed\ndata: {"type":"response.completed","sequence_number":8,'
    b'"response":{"id":"resp_1","max_output_tokens":null,"output":[{"type":"message","content":'
    b'[{"text":"\\"output_tokens\\": 99"}]}],"usage":{"input_tokens":5,"output_tokens":12,'
    b'"output_tokens_details":{"reasoning_tokens":4}}}}\n\n'
)


def test_each_path_gets_its_framing() -> None:
    assert framing_for("/v1/responses") is RESPONSES_FRAMING
    assert framing_for("/v1/chat/completions") is COMPLETIONS_FRAMING


def ends(chunks: list[bytes], framing: Framing = RESPONSES_FRAMING) -> list[bool]:
    watch = framing.end_watch()
    return [watch.ends(chunk) for chunk in chunks]


def test_a_responses_stream_ends_at_its_terminal_event_and_not_before() -> None:
    assert ends([COMPLETED]) == [True]
    assert ends([COMPLETED[:-1]]) == [False]
    assert ends([COMPLETED.split(b"event: response.completed")[0]]) == [False]
    assert ends([b'event: response.incomplete\ndata: {"type":"x"}\n\n']) == [True]
    assert ends([b"data: [DONE]\n\n"]) == [False]
    assert ends([b"data: {}\n\ndata: [DONE]\n\n"], COMPLETIONS_FRAMING) == [True]


def test_a_terminal_event_split_over_many_chunks_ends_the_stream_at_its_last_chunk() -> None:
    pieces = [COMPLETED[i : i + 40] for i in range(0, len(COMPLETED), 40)]
    assert ends(pieces) == [False] * (len(pieces) - 1) + [True]
    for cut in range(1, len(COMPLETED)):  # wherever one read stops, the second one ends it
        assert ends([COMPLETED[:cut], COMPLETED[cut:]]) == [False, True], cut


def test_text_that_looks_like_an_event_does_not_end_the_stream() -> None:
    delta = (
        b'event: response.output_text.delta\ndata: {"delta":"event: response.completed\\n\\n"}\n\n'
    )
    assert ends([delta]) == [False]


def test_usage_is_read_from_the_terminal_event_not_from_text_or_limits() -> None:
    assert RESPONSES_FRAMING.output_tokens(COMPLETED) == 12
    assert RESPONSES_FRAMING.counted_events(COMPLETED) == 1
    assert COMPLETIONS_FRAMING.output_tokens(b'"usage": {"completion_tokens": 30}') == 30


def test_the_terminal_error_of_a_responses_stream_is_an_error_event_numbered_next() -> None:
    event = RESPONSES_FRAMING.error_event(
        OrchestratorError(ErrorCode.UNAVAILABLE, "the replica failed mid-stream"), COMPLETED
    )
    kind, data = event.removesuffix(b"\n\n").split(b"\n")
    payload = json.loads(data.removeprefix(b"data: "))
    assert kind == b"event: error" and b"[DONE]" not in event
    assert payload["type"] == "error" and payload["sequence_number"] == 9
    assert payload["message"] == "the replica failed mid-stream"
    assert ends([event]) == [True]
    chat = COMPLETIONS_FRAMING.error_event(OrchestratorError(ErrorCode.INTERNAL, "x"))
    assert chat.endswith(b"data: [DONE]\n\n") and b'"error"' in chat


def test_the_response_id_is_found_in_a_body_or_a_stream_head() -> None:
    assert response_id(b'{"id": "resp_abc", "object": "response"}') == "resp_abc"
    assert response_id(COMPLETED) == "resp_1"
    assert response_id(b'event: response.created\ndata: {"type":"response.created"') is None


def test_a_terminal_error_after_bytes_that_end_mid_event_starts_on_an_event_boundary() -> None:
    error = OrchestratorError(ErrorCode.UNAVAILABLE, "the replica failed mid-stream")
    whole = COMPLETED.split(b"event: response.completed")[0]  # ends with event 7's blank line
    for cut in (len(whole) - 1, len(whole) - 2, len(whole) - 8):
        sent = whole[:cut]
        events = (sent + RESPONSES_FRAMING.error_event(error, sent)).split(b"\n\n")
        assert events[-1] == b"", cut
        kind, data = events[-2].split(b"\n")
        assert kind == b"event: error", cut  # its own event, not the tail of the cut one
        assert json.loads(data.removeprefix(b"data: "))["sequence_number"] == 8
    assert RESPONSES_FRAMING.error_event(error, whole).startswith(b"event: error\n")
    chat = COMPLETIONS_FRAMING.error_event(error, b'data: {"choices": [{"te')
    assert chat.startswith(b"\n\ndata: {") and chat.endswith(b"data: [DONE]\n\n")
