"""The two SSE framings a replica answers in, read without parsing every event.

Chat and text completions send `data:` events and end with `data: [DONE]`; usage (when asked
for) is the last chunk's `completion_tokens`. The Responses API sends `event: <type>` before each
`data:`, ends with a terminal event (`response.completed`, `response.incomplete`,
`response.failed` or `error`) and no [DONE]; usage is in that terminal event's response, as
`output_tokens` (reasoning included). Whole answers carry the same usage fields.

A `Framing` answers, from bytes alone: where a stream ends (`EndWatch`), the output tokens at
the end of an answer (None when it has no usage), a fallback count of output events, and the
terminal error event to send when a stream cannot go on. Transport-free: any HTTP server or
client can use it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Final

from orchestrator.core.errors import OrchestratorError
from orchestrator.core.openai_errors import openai_error

DONE_EVENT: Final = b"data: [DONE]\n\n"
RESPONSES_PATH: Final = "/v1/responses"
_TERMINAL_EVENTS: Final = (
    b"event: response.completed\n",
    b"event: response.incomplete\n",
    b"event: response.failed\n",
    b"event: error\n",
)
_EVENT_START: Final = b"\n\nevent: "
_CARRY_BYTES: Final = 64  # longer than `\n\nevent: ` and the longest terminal type
_SEQUENCE: Final = b'"sequence_number":'
_RESPONSE_ID: Final = re.compile(rb'"id"\s*:\s*"([A-Za-z0-9_-]{1,256})"')
MAX_ID_SEARCH_BYTES: Final = 64 * 1024  # a response's id comes in its first event, this early


def _int_after(data: bytes, key: bytes) -> int | None:
    """The integer after the last `key` in `data`, None if there is none."""
    at = data.rfind(key)
    if at < 0:
        return None
    digits = data[at + len(key) : at + len(key) + 24].lstrip()
    end = 0
    while end < len(digits) and 48 <= digits[end] <= 57:
        end += 1
    return int(digits[:end]) if end else None


@dataclass(frozen=True, slots=True)
class Framing:
    """One framing: how its usage is spelled and which events carry output."""

    name: str
    usage_key: bytes
    output_events: tuple[bytes, ...]
    done_marker: bool

    def output_tokens(self, tail: bytes) -> int | None:
        """Output tokens from the usage at the end of an answer (`tail`: its last bytes)."""
        return _int_after(tail, self.usage_key)

    def counted_events(self, chunk: bytes) -> int:
        """Output-carrying events in `chunk`: the token count when the replica gave no usage."""
        return sum(chunk.count(marker) for marker in self.output_events)

    def end_watch(self) -> EndWatch:
        """A fresh watch for the end of one stream in this framing."""
        return EndWatch(self.done_marker)

    def error_event(self, error: OrchestratorError, tail: bytes = b"") -> bytes:
        """The terminal event for a stream that cannot go on (`tail`: the bytes last relayed).
        It starts on an event boundary: when `tail` ends mid-event, a blank line ends that one
        first, so the error is never read as part of it."""
        _, body = openai_error(error)
        if self.done_marker:
            data = json.dumps(body, separators=(",", ":")).encode()
            return _boundary_after(tail) + b"data: " + data + b"\n\n" + DONE_EVENT
        last = _int_after(tail, _SEQUENCE)
        details = body["error"]
        event = {
            "type": "error",
            "code": error.code.value,  # the canonical code, which the gRPC frontend reads back
            "message": details["message"],
            "param": details["param"],
            "sequence_number": 0 if last is None else last + 1,
        }
        data = json.dumps(event, separators=(",", ":")).encode()
        return _boundary_after(tail) + b"event: error\ndata: " + data + b"\n\n"


def _boundary_after(tail: bytes) -> bytes:
    """What ends the event that `tail` (relayed bytes) ends in: nothing at a boundary."""
    if not tail or tail.endswith(b"\n\n"):
        return b""
    return b"\n" if tail.endswith(b"\n") else b"\n\n"


class EndWatch:
    """Says, chunk by chunk, whether a stream's last event has been completed: `data: [DONE]`,
    or a terminal Responses event whose data ended (it may span many chunks: a completed response
    carries its whole output)."""

    __slots__ = ("_carry", "_done_marker", "_in_terminal")

    def __init__(self, done_marker: bool) -> None:
        self._done_marker = done_marker
        self._in_terminal = False  # the event being received is a terminal one
        self._carry = b"\n\n"  # the previous chunk's end: an event's start may straddle chunks

    def ends(self, chunk: bytes) -> bool:
        if self._done_marker:
            return chunk.endswith(DONE_EVENT)
        # Raw newlines only separate lines (JSON data has none), so `\n\nevent: ` starts an event.
        data = self._carry + chunk
        start = data.rfind(_EVENT_START)
        if start >= 0 and data.find(b"\n", start + len(_EVENT_START)) >= 0:
            self._in_terminal = data.startswith(_TERMINAL_EVENTS, start + 2)
        self._carry = data[-_CARRY_BYTES:]
        return self._in_terminal and data.endswith(b"\n\n")


COMPLETIONS_FRAMING: Final = Framing(
    name="completions",
    usage_key=b'"completion_tokens":',
    output_events=(b"data:",),
    done_marker=True,
)
RESPONSES_FRAMING: Final = Framing(
    name="responses",
    usage_key=b'"output_tokens":',
    output_events=(
        b"event: response.output_text.delta\n",
        b"event: response.reasoning_text.delta\n",
        b"event: response.function_call_arguments.delta\n",
    ),
    done_marker=False,
)


def framing_for(path: str) -> Framing:
    """The framing a replica answers `path` in."""
    return RESPONSES_FRAMING if path.startswith(RESPONSES_PATH) else COMPLETIONS_FRAMING


def response_id(head: bytes) -> str | None:
    """The id of the response whose answer starts with `head` (a whole Responses body, or a
    stream's first bytes, whose first event carries the response); None until it is there."""
    found = _RESPONSE_ID.search(head, 0, MAX_ID_SEARCH_BYTES)
    return found.group(1).decode("ascii") if found else None
