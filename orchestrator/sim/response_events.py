"""The Responses API's objects and stream events, shaped as vLLM sends them for gpt-oss.

One `ResponseBuilder` per response: it turns the output's growth (reasoning text, answer text,
function-call arguments) into output items and, for a stream, into the typed events that go
before them (`response.created`, `response.output_item.added`, `response.reasoning_text.delta`,
`response.output_text.delta`, `response.function_call_arguments.delta`,
`response.output_item.done`, ..., then `response.completed` or `response.incomplete`), each with
its `sequence_number`. A stream has `event:` lines and no `data: [DONE]`.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from typing import Any

from orchestrator.sim.planning import Pieces, Plan

Event = dict[str, Any]


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def sse_event(event: Event) -> bytes:
    """One event in the Responses stream framing: its type on an `event:` line, then the data."""
    data = json.dumps(event, separators=(",", ":"))
    kind: str = event["type"]
    return b"event: " + kind.encode() + b"\ndata: " + data.encode() + b"\n\n"


def usage_of(plan: Plan) -> dict[str, Any]:
    return {
        "input_tokens": plan.prompt_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": plan.output_tokens,
        "output_tokens_details": {"reasoning_tokens": plan.reasoning_tokens},
        "total_tokens": plan.prompt_tokens + plan.output_tokens,
    }


class ResponseBuilder:
    """Builds one response object and its stream events as its output grows."""

    def __init__(
        self, plan: Plan, model: str, request: Mapping[str, Any], effort: str | None
    ) -> None:
        self.plan = plan
        self.id = new_id("resp")
        self._sequence = 0
        self._items: list[dict[str, Any]] = []
        self._open: dict[str, Any] | None = None
        self._call_id = new_id("call")
        tools = request.get("tools") or []
        self.body: dict[str, Any] = {
            "id": self.id,
            "object": "response",
            "created_at": int(time.time()),
            "model": model,
            "status": "in_progress",
            "background": bool(request.get("background")),
            "error": None,
            "incomplete_details": None,
            "instructions": request.get("instructions"),
            "max_output_tokens": request.get("max_output_tokens"),
            "metadata": request.get("metadata") or {},
            "output": self._items,
            "parallel_tool_calls": bool(request.get("parallel_tool_calls", True)),
            "previous_response_id": request.get("previous_response_id"),
            "reasoning": {"effort": effort, "summary": None},
            "service_tier": "auto",
            "store": request.get("store", True) is not False,
            "temperature": request.get("temperature", 1.0),
            "text": {"format": {"type": "text"}},
            "tool_choice": request.get("tool_choice") or "auto",
            "tools": tools,
            "top_p": request.get("top_p", 1.0),
            "truncation": "disabled",
            "usage": None,
            "user": request.get("user"),
        }

    def snapshot(self) -> dict[str, Any]:
        """A copy of the response as it stands (what a stored or streamed object shows)."""
        copied: dict[str, Any] = json.loads(json.dumps(self.body))
        return copied

    def _event(self, kind: str, **fields: Any) -> Event:
        event = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return event

    # -- the stream ----------------------------------------------------------------------------

    def start(self) -> list[Event]:
        snapshot = self.snapshot()
        return [
            self._event("response.created", response=snapshot),
            self._event("response.in_progress", response=snapshot),
        ]

    def grow(self, pieces: Pieces) -> list[Event]:
        """Events for the output's growth; items open and close as the output moves on."""
        events: list[Event] = []
        if pieces.reasoning:
            events += self._into("reasoning")
            events.append(self._delta("response.reasoning_text.delta", pieces.reasoning))
        if pieces.content:
            events += self._into("message")
            events.append(self._delta("response.output_text.delta", pieces.content, logprobs=[]))
        if pieces.arguments:
            events += self._into("function_call")
            item = self._item()
            item["arguments"] += pieces.arguments
            events.append(
                self._event(
                    "response.function_call_arguments.delta",
                    item_id=item["id"],
                    output_index=len(self._items) - 1,
                    delta=pieces.arguments,
                )
            )
        return events

    def finish(self, cancelled: bool = False) -> list[Event]:
        """Close the open item and the response; the last event is the terminal one."""
        if self.plan.tool_call is not None and not cancelled:
            # A call is whole once its last token is out, even if its text came out earlier.
            opened = self._into("function_call")
            item = self._item()
            item["arguments"] = self.plan.tool_call.arguments
        else:
            opened = []
        events = opened + self._close()
        plan = self.plan
        if cancelled:
            self.body["status"] = "cancelled"
        elif plan.finish_reason == "length":
            self.body["status"] = "incomplete"
            self.body["incomplete_details"] = {"reason": "max_output_tokens"}
        else:
            self.body["status"] = "completed"
        self.body["usage"] = None if cancelled else usage_of(plan)
        terminal = "response.incomplete" if self.body["status"] == "incomplete" else None
        events.append(self._event(terminal or "response.completed", response=self.snapshot()))
        return events

    def whole(self, pieces: Pieces) -> dict[str, Any]:
        """The finished response of a request that is not streamed."""
        self.grow(pieces)
        self.finish()
        return self.snapshot()

    # -- items ---------------------------------------------------------------------------------

    def _item(self) -> dict[str, Any]:
        assert self._open is not None
        return self._open

    def _into(self, kind: str) -> list[Event]:
        """Open an item of `kind` unless it is the open one (closing the one before)."""
        if self._open is not None and self._open["type"] == kind:
            return []
        events = self._close()
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
            call = self.plan.tool_call
            item = {
                "id": new_id("fc"),
                "type": "function_call",
                "call_id": self._call_id,
                "name": call.name if call else "",
                "arguments": "",
                "status": "in_progress",
            }
            part = None
        self._open = item
        self._items.append(item)
        index = len(self._items) - 1
        events.append(
            self._event(
                "response.output_item.added", output_index=index, item=json.loads(json.dumps(item))
            )
        )
        if part is not None:
            item["content"].append(part)
            events.append(
                self._event(
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
        return self._event(
            kind,
            item_id=item["id"],
            output_index=len(self._items) - 1,
            content_index=0,
            delta=text,
            **extra,
        )

    def _close(self) -> list[Event]:
        item, self._open = self._open, None
        if item is None:
            return []
        index = len(self._items) - 1
        events = []
        if item["type"] == "function_call":
            item["status"] = "completed"
            events.append(
                self._event(
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
                self._event(
                    done or "response.output_text.done",
                    item_id=item["id"],
                    output_index=index,
                    content_index=0,
                    text=part["text"],
                    **extra,
                )
            )
            events.append(
                self._event(
                    "response.content_part.done",
                    item_id=item["id"],
                    output_index=index,
                    content_index=0,
                    part=dict(part),
                )
            )
            if item["type"] == "message":
                item["status"] = "completed"
        events.append(
            self._event(
                "response.output_item.done", output_index=index, item=json.loads(json.dumps(item))
            )
        )
        return events
