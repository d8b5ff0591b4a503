"""The simulated replica's Responses API: `POST /v1/responses` (whole, streamed, or in the
background), `GET /v1/responses/{id}` and `POST /v1/responses/{id}/cancel`, as vLLM serves them.

Responses are stored unless `store` is false, in a bounded store that forgets the oldest first
(vLLM keeps them in memory too, and loses them with the process). A request with
`previous_response_id` continues that stored conversation: its prompt is the previous prompt,
the previous output and the new input. gpt-oss always reasons on this API; `reasoning.effort`
(by default the effort the workload was measured at, `low`) sets how much.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from aiohttp import web

from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.core.response_events import sse_event
from orchestrator.fleet.workload import WorkloadSampler
from orchestrator.sim.body import check_model, json_body
from orchestrator.sim.live import LiveEngine
from orchestrator.sim.planning import Limits, OutputStream, Plan, plan_request
from orchestrator.sim.protocol import ResponsesRequest, parse_body
from orchestrator.sim.response_events import ResponseBuilder
from orchestrator.sim.sequences import SimRequest
from orchestrator.sim.text import CHAT_TOKENS_PER_MESSAGE, CHAT_TOKENS_PER_REPLY, text_tokens
from orchestrator.sim.tools import chosen_tool, function_tools

DEFAULT_STORE_SIZE: Final = 1024  # each holds its whole output text
USER_ITEM_ROLES: Final = frozenset({"user", "system", "developer"})
SSE_HEADERS: Final = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}


@dataclass(slots=True)
class StoredResponse:
    """A response kept for retrieval: its builder and the conversation's token count so far;
    `task` runs a background response until it ends."""

    builder: ResponseBuilder
    context_tokens: int
    task: asyncio.Task[None] | None = None
    sim: SimRequest | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)


class ResponseStore:
    """At most `capacity` responses, the oldest forgotten first."""

    def __init__(self, capacity: int = DEFAULT_STORE_SIZE) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[str, StoredResponse] = OrderedDict()

    def put(self, entry: StoredResponse) -> None:
        self._entries[entry.builder.id] = entry
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)

    def get(self, response_id: str, param: str | None = None) -> StoredResponse:
        entry = self._entries.get(response_id)
        if entry is None:
            raise OrchestratorError(
                ErrorCode.NOT_FOUND, f"Response with id '{response_id}' not found.", param=param
            )
        return entry


def _item_text(item: Mapping[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    texts = [p.get("text") for p in content or () if isinstance(p, Mapping)]
    texts += [item.get(k) for k in ("output", "arguments", "name")]
    return "".join(t for t in texts if isinstance(t, str))


def input_tokens(body: ResponsesRequest) -> tuple[int, bool]:
    """(estimated tokens of the instructions and input, whether the user spoke last)."""
    items: list[dict[str, Any]] = (
        [{"role": "user", "content": body.input}] if isinstance(body.input, str) else body.input
    )
    texts = [_item_text(item) for item in items]
    if body.instructions:
        texts.append(body.instructions)
    tokens = sum(text_tokens(t) + CHAT_TOKENS_PER_MESSAGE for t in texts) + CHAT_TOKENS_PER_REPLY
    last = items[-1]
    user_last = last.get("type", "message") == "message" and last.get("role") in USER_ITEM_ROLES
    return tokens, user_last


def effort_of(body: ResponsesRequest, default: str) -> str:
    """The request's reasoning effort, else `default`: gpt-oss always reasons on this API."""
    return body.reasoning.effort if body.reasoning and body.reasoning.effort else default


class ResponsesApi:
    """The three routes over one engine; every dependency is passed in."""

    def __init__(
        self,
        engine: LiveEngine,
        *,
        model_name: str,
        max_model_len: int,
        sampler: WorkloadSampler,
        seeds: random.Random,
        store: ResponseStore | None = None,
    ) -> None:
        self._engine = engine
        self._model = model_name
        self._max_model_len = max_model_len
        self._sampler = sampler
        self._seeds = seeds
        self.store = store or ResponseStore()
        self._background: set[asyncio.Task[None]] = set()

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/responses", self.create)
        app.router.add_get("/v1/responses/{response_id}", self.retrieve)
        app.router.add_post("/v1/responses/{response_id}/cancel", self.cancel)
        app.on_cleanup.append(self._stop_background)

    def plan(self, body: ResponsesRequest) -> tuple[Plan, int]:
        """The request's plan and its conversation's tokens (prompt and output) after it."""
        tokens, user_last = input_tokens(body)
        if body.previous_response_id is not None:
            previous = self.store.get(body.previous_response_id, "previous_response_id")
            tokens += previous.context_tokens
        limits = Limits(
            body.max_output_tokens,
            body.seed,
            body.ignore_eos,
            body.min_tokens,
            reasoning_effort=effort_of(body, self._sampler.stats.reasoning.effort),
        )
        tool = chosen_tool(
            function_tools(body.tools, chat=False), body.tool_choice, user_turn_last=user_last
        )
        plan = plan_request(
            prompt_tokens=tokens,
            limits=limits,
            max_model_len=self._max_model_len,
            sampler=self._sampler,
            seeds=self._seeds,
            param="input",
            tool=tool,
        )
        return plan, tokens + plan.output_tokens

    async def create(self, request: web.Request) -> web.StreamResponse:
        raw = await json_body(request)
        body = parse_body(ResponsesRequest, raw)
        check_model(self._model, body.model)
        if body.background and not body.store:
            raise OrchestratorError(
                ErrorCode.INVALID_ARGUMENT,
                "background can only be used when `store` is true",
                param="background",
            )
        if body.background and body.stream:
            raise OrchestratorError(
                ErrorCode.INVALID_ARGUMENT,
                "streaming a background response is not supported; poll it with GET instead",
                param="stream",
            )
        plan, context = self.plan(body)
        builder = ResponseBuilder(
            plan, self._model, raw, effort_of(body, self._sampler.stats.reasoning.effort)
        )
        entry = StoredResponse(builder, context)
        if body.store:
            self.store.put(entry)
        if body.background:
            builder.body["status"] = "queued"
            entry.task = asyncio.create_task(self._run_background(entry))
            self._background.add(entry.task)
            entry.task.add_done_callback(self._background.discard)
            return web.json_response(builder.snapshot())
        sim = self._engine.submit(plan.prompt_tokens, plan.output_tokens, plan.finish_reason)
        try:
            if not body.stream:
                await self._engine.wait_finished(sim)
                return web.json_response(builder.whole(OutputStream(plan).whole()))
            response = web.StreamResponse(headers=SSE_HEADERS)
            await response.prepare(request)
            with contextlib.suppress(ConnectionResetError):  # the client left; abort below
                await self._write_events(response, sim, builder)
            return response
        finally:
            self._engine.abort(sim)

    async def _write_events(
        self, response: web.StreamResponse, sim: SimRequest, builder: ResponseBuilder
    ) -> None:
        output = OutputStream(builder.plan)
        for event in builder.start():
            await response.write(sse_event(event))
        async for count in self._engine.token_counts(sim):
            for event in builder.grow(output.advance(count)):
                await response.write(sse_event(event))
            if count >= builder.plan.output_tokens:
                break
        for event in builder.finish():
            await response.write(sse_event(event))
        await response.write_eof()

    async def _run_background(self, entry: StoredResponse) -> None:
        plan, builder = entry.builder.plan, entry.builder
        sim = self._engine.submit(plan.prompt_tokens, plan.output_tokens, plan.finish_reason)
        entry.sim = sim
        builder.body["status"] = "in_progress"
        output = OutputStream(plan)
        try:
            async for count in self._engine.token_counts(sim):
                builder.grow(output.advance(count))
                if count >= plan.output_tokens:
                    break
            if builder.body["status"] != "cancelled":
                builder.finish()
        finally:
            self._engine.abort(sim)
            entry.done.set()

    async def retrieve(self, request: web.Request) -> web.Response:
        entry = self.store.get(request.match_info["response_id"])
        return web.json_response(entry.builder.snapshot())

    async def cancel(self, request: web.Request) -> web.Response:
        entry = self.store.get(request.match_info["response_id"])
        builder = entry.builder
        if entry.task is None:
            raise OrchestratorError(
                ErrorCode.INVALID_ARGUMENT, "Cannot cancel a synchronous response."
            )
        if not entry.done.is_set():
            entry.task.cancel()
            builder.finish(cancelled=True)
            if entry.sim is not None:
                self._engine.abort(entry.sim)
            entry.done.set()
        return web.json_response(builder.snapshot())

    async def _stop_background(self, _: web.Application) -> None:
        for task in list(self._background):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
