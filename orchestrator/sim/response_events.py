"""The simulated replica's responses: a plan's output as a Responses API object and stream.

`ResponseBuilder` fills the response object from the request and its plan, and feeds the
plan's growth to the shared event builder (`core/response_events.py`, which the router uses too
when it continues a stream elsewhere): the stream's events, the call's whole arguments once its
last token is out, and the status and usage at the end.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from orchestrator.core.response_events import Event, ResponseEvents, new_id
from orchestrator.sim.planning import Pieces, Plan


def usage_of(plan: Plan) -> dict[str, Any]:
    return {
        "input_tokens": plan.prompt_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": plan.output_tokens,
        "output_tokens_details": {"reasoning_tokens": plan.reasoning_tokens},
        "total_tokens": plan.prompt_tokens + plan.output_tokens,
    }


class ResponseBuilder(ResponseEvents):
    """Builds one response object and its stream events as its plan's output grows."""

    def __init__(
        self, plan: Plan, model: str, request: Mapping[str, Any], effort: str | None
    ) -> None:
        self.plan = plan
        super().__init__(
            {
                "id": new_id("resp"),
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
                "output": [],
                "parallel_tool_calls": bool(request.get("parallel_tool_calls", True)),
                "previous_response_id": request.get("previous_response_id"),
                "reasoning": {"effort": effort, "summary": None},
                "service_tier": "auto",
                "store": request.get("store", True) is not False,
                "temperature": request.get("temperature", 1.0),
                "text": {"format": {"type": "text"}},
                "tool_choice": request.get("tool_choice") or "auto",
                "tools": request.get("tools") or [],
                "top_p": request.get("top_p", 1.0),
                "truncation": "disabled",
                "usage": None,
                "user": request.get("user"),
            }
        )
        if plan.tool_call is not None:
            self.call_name = plan.tool_call.name

    def grow(self, pieces: Pieces) -> list[Event]:
        """Events for the output's growth; items open and close as the output moves on."""
        return self.add(pieces.reasoning, pieces.content, pieces.arguments)

    def finish(self, cancelled: bool = False) -> list[Event]:
        """Close the open item and the response; the last event is the terminal one."""
        opened: list[Event] = []
        if self.plan.tool_call is not None and not cancelled:
            # A call is whole once its last token is out, even if its text came out earlier.
            opened = self.into("function_call")
            self.body["output"][-1]["arguments"] = self.plan.tool_call.arguments
        if cancelled:
            return opened + self.end("cancelled", None)
        if self.plan.finish_reason == "length":
            return opened + self.end(
                "incomplete", usage_of(self.plan), {"reason": "max_output_tokens"}
            )
        return opened + self.end("completed", usage_of(self.plan))

    def whole(self, pieces: Pieces) -> dict[str, Any]:
        """The finished response of a request that is not streamed."""
        self.grow(pieces)
        self.finish()
        return self.snapshot()
