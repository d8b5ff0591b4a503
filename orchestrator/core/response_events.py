"""The Responses API's stream events and the response object they build, shaped as vLLM sends
them for gpt-oss: one builder for whoever writes such a stream (the simulated replica, and the
router when it continues a stream on another replica).

A `ResponseEvents` turns the output's growth (reasoning text, answer text, function-call
arguments) into output items and the typed events that announce them
(`response.output_item.added`, `response.content_part.added`, `response.reasoning_text.delta`,
`response.output_text.delta`, `response.function_call_arguments.delta`, the `.done` events that
close an item, then `response.completed` or `response.incomplete`), each with the next
`sequence_number`. It can also take up a stream another writer began (`resume`): the same
response, its items, the next number. A stream has `event:` lines and no `data: [DONE]`.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

Event = dict[str, Any]


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def sse_event(event: Event) -> bytes:
    """One event in the Responses stream framing: its type on an `event:` line, then the data."""
    data = json.dumps(event, separators=(",", ":"))
    kind: str = event["type"]
    return b"event: " + kind.encode() + b"\ndata: " + data.encode() + b"\n\n"


def _copy(value: Any) -> Any:
    return json.loads(json.dumps(value))


class ResponseEvents:
    """One response object (`body`, whose `output` holds the items) and its numbered events."""

    def __init__(self, body: dict[str, Any], *, sequence: int = 0) -> None:
        self.body = body
        self._items: list[dict[str, Any]] = body["output"]
        self._sequence = sequence
        self._open: dict[str, Any] | None = None
        self.call_name = ""  # the function a function_call item calls
        self.call_id = new_id("call")

    @property
    def id(self) -> str:
        response_id: str = self.body["id"]
        return response_id

    def resume(self, open_item: bool) -> None:
        """Take up a stream begun elsewhere: the last item of `output` is still open, or not."""
        self._open = self._items[-1] if open_item and self._items else None

    def snapshot(self) -> dict[str, Any]:
        """A copy of the response as it stands (what a stored or streamed object shows)."""
        copied: dict[str, Any] = _copy(self.body)
        return copied

    def event(self, kind: str, **fields: Any) -> Event:
        event = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return event

    def start(self) -> list[Event]:
        snapshot = self.snapshot()
        return [
            self.event("response.created", response=snapshot),
            self.event("response.in_progress", response=snapshot),
        ]

    def add(self, reasoning: str = "", content: str = "", arguments: str = "") -> list[Event]:
        """Events for the output's growth; items open and close as the output moves on."""
        events: list[Event] = []
        if reasoning:
            events += self.into("reasoning")
            events.append(self._delta("response.reasoning_text.delta", reasoning))
        if content:
            events += self.into("message")
            events.append(self._delta("response.output_text.delta", content, logprobs=[]))
        if arguments:
            events += self.into("function_call")
            item = self._item()
            item["arguments"] += arguments
            events.append(
                self.event(
                    "response.function_call_arguments.delta",
                    item_id=item["id"],
                    output_index=len(self._items) - 1,
                    delta=arguments,
                )
            )
        return events

    def end(
        self,
        status: str,
        usage: dict[str, Any] | None,
        incomplete_details: dict[str, Any] | None = None,
    ) -> list[Event]:
        """Close the open item and the response; the last event is the terminal one."""
        events = self.close()
        self.body["status"] = status
        self.body["incomplete_details"] = incomplete_details
        self.body["usage"] = usage
        terminal = "response.incomplete" if status == "incomplete" else "response.completed"
        events.append(self.event(terminal, response=self.snapshot()))
        return events

    # -- items ---------------------------------------------------------------------------------

    def _item(self) -> dict[str, Any]:
        assert self._open is not None
        return self._open

    def into(self, kind: str) -> list[Event]:
        """Open an item of `kind` unless it is the open one (closing the one before)."""
        if self._open is not None and self._open["type"] == kind:
            return []
        events = self.close()
        if kind == "reasoning":
            item: dict[str, Any] = {
                "id": new_id("rs"),
                "type": "reasoning",
                "summary": [],
                "content": [],
                "encrypted_content": None,
                "status": None,
            }
            part: dict[str, Any] | None = {"type": "reasoning_text", "text": ""}
        elif kind == "message":
            item = {
                "id": new_id("msg"),
                "type": "message",
                "role": "assistant",
                "content": [],
                "status": "in_progress",
            }
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        else:
            item = {
                "id": new_id("fc"),
                "type": "function_call",
                "call_id": self.call_id,
                "name": self.call_name,
                "arguments": "",
                "status": "in_progress",
            }
            part = None
        self._open = item
        self._items.append(item)
        index = len(self._items) - 1
        events.append(
            self.event("response.output_item.added", output_index=index, item=_copy(item))
        )
        if part is not None:
            item["content"].append(part)
            events.append(
                self.event(
                    "response.content_part.added",
                    item_id=item["id"],
                    output_index=index,
                    content_index=0,
                    part=dict(part),
                )
            )
        return events

    def _delta(self, kind: str, text: str, **extra: Any) -> Event:
        item = self._item()
        item["content"][0]["text"] += text
        return self.event(
            kind,
            item_id=item["id"],
            output_index=len(self._items) - 1,
            content_index=0,
            delta=text,
            **extra,
        )

    def close(self) -> list[Event]:
        """Close the open item (no events when none is open)."""
        item, self._open = self._open, None
        if item is None:
            return []
        index = len(self._items) - 1
        events = []
        if item["type"] == "function_call":
            item["status"] = "completed"
            events.append(
                self.event(
                    "response.function_call_arguments.done",
                    item_id=item["id"],
                    output_index=index,
                    name=item["name"],
                    arguments=item["arguments"],
                )
            )
        else:
            part = item["content"][0]
            done = "response.reasoning_text.done" if item["type"] == "reasoning" else None
            extra: dict[str, Any] = {} if done else {"logprobs": []}
            events.append(
                self.event(
                    done or "response.output_text.done",
                    item_id=item["id"],
                    output_index=index,
                    content_index=0,
                    text=part["text"],
                    **extra,
                )
            )
            events.append(
                self.event(
                    "response.content_part.done",
                    item_id=item["id"],
                    output_index=index,
                    content_index=0,
                    part=dict(part),
                )
            )
            if item["type"] == "message":
                item["status"] = "completed"
        events.append(self.event("response.output_item.done", output_index=index, item=_copy(item)))
        return events
