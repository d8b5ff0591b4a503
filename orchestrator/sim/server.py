"""The simulated replica's HTTP server: vLLM's OpenAI API, health and metrics, on aiohttp.

Routes: `/v1/chat/completions`, `/v1/completions` (SSE streaming or not), the Responses API
(`/v1/responses` and its stored responses, `responses.py`), `/tokenize`, `/detokenize`,
`/v1/models`, `/health`, `/version`, `/get_model_info` and `/get_server_info` (what SGLang
workers answer, so the SGLang router accepts this replica), `/metrics`. A chat that names a
`reasoning_effort` gets gpt-oss's reasoning (`reasoning` in the message and its deltas) before
its answer; with `tools`, a turn that calls for one answers with `tool_calls`. Every error is an
OpenAI-style JSON body; no traceback ever reaches a client, and a client that goes away cancels
its request in the engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest

from orchestrator import __version__
from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.core.openai_errors import code_of_status, openai_error, served_error
from orchestrator.fleet.workload import WorkloadSampler
from orchestrator.sim.body import check_model, json_body
from orchestrator.sim.completion_shapes import CompletionShape, sse
from orchestrator.sim.continuation import chat_continuation, chat_skip, prompt_skip
from orchestrator.sim.live import LiveEngine
from orchestrator.sim.planning import Limits, OutputStream, Pieces, Plan, plan_request
from orchestrator.sim.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    DetokenizeRequest,
    TokenizeRequest,
    parse_body,
)
from orchestrator.sim.responses import ResponsesApi
from orchestrator.sim.sequences import SimRequest
from orchestrator.sim.text import chat_prompt_tokens, text_tokens
from orchestrator.sim.tokens import decode, encode, encode_chat
from orchestrator.sim.tools import FunctionTool, chosen_tool, function_tools

MAX_BODY_BYTES: Final = 32 * 1024 * 1024
USER_ROLES: Final = frozenset({"user", "system", "developer"})  # a turn that asks, not answers
SSE_HEADERS: Final = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """What the replica says about itself on `/get_server_info` and `/v1/models`."""

    model_name: str
    generation: str
    max_model_len: int
    time_scale: float
    seed: int


ENGINE: Final = web.AppKey("engine", LiveEngine)
INFO: Final = web.AppKey("info", ServerInfo)
SAMPLER: Final = web.AppKey("sampler", WorkloadSampler)
REGISTRY: Final = web.AppKey("registry", CollectorRegistry)
SEEDS: Final = web.AppKey("seeds", random.Random)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def error_response(error: OrchestratorError) -> web.Response:
    status, body = openai_error(error)
    return web.json_response(body, status=status)


@web.middleware
async def json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Turn every failure into an OpenAI-style JSON error; the server keeps running."""
    try:
        return await handler(request)
    except web.HTTPException as http_error:
        if http_error.status < 400:
            raise
        code = code_of_status(http_error.status)
        return error_response(OrchestratorError(code, http_error.reason))
    except (asyncio.CancelledError, ConnectionResetError):
        raise
    except Exception as error:
        return error_response(served_error(error, method=request.method, path=request.path))


def request_plan(
    app: web.Application,
    prompt_tokens: int,
    limits: Limits,
    *,
    param: str,
    tool: FunctionTool | None = None,
) -> Plan:
    """`plan_request` with this replica's context length, length sampler and seeds."""
    return plan_request(
        prompt_tokens=prompt_tokens,
        limits=limits,
        max_model_len=app[INFO].max_model_len,
        sampler=app[SAMPLER],
        seeds=app[SEEDS],
        param=param,
        tool=tool,
    )


async def _generate(
    request: web.Request,
    body: ChatCompletionRequest | CompletionRequest,
    plan: Plan,
    chat: bool,
    skip: int = 0,
) -> web.StreamResponse:
    """Serve `plan`; a continuation skips the `skip` output tokens it was given (`continuation`)."""
    app = request.app
    engine = app[ENGINE]
    sim = engine.submit(plan.prompt_tokens + skip, plan.output_tokens - skip, plan.finish_reason)
    shape = CompletionShape(chat, app[INFO].model_name)
    output = OutputStream(plan)
    output.advance(skip)
    try:
        if not body.stream:
            await engine.wait_finished(sim)
            return web.json_response(shape.whole(output.whole(), plan, skip))
        response = web.StreamResponse(headers=SSE_HEADERS)
        await response.prepare(request)
        with contextlib.suppress(ConnectionResetError):  # the client left; `finally` aborts
            await _write_events(response, engine, sim, shape, output, plan, body, skip)
        return response
    finally:
        engine.abort(sim)  # a no-op once finished; frees the KV of a vanished client


async def _write_events(
    response: web.StreamResponse,
    engine: LiveEngine,
    sim: SimRequest,
    shape: CompletionShape,
    output: OutputStream,
    plan: Plan,
    body: ChatCompletionRequest | CompletionRequest,
    skip: int,
) -> None:
    include_usage = bool(body.stream_options and body.stream_options.include_usage)
    first = shape.chat
    call_pending = plan.tool_call
    async for made in engine.token_counts(sim):
        count = skip + made
        last = count >= plan.output_tokens
        pieces = output.advance(count)
        opens = call_pending if call_pending is not None and pieces.arguments else None
        if opens is not None:  # the call's name goes first, then its arguments as they grow
            await response.write(
                sse(shape.chunk(Pieces(reasoning=pieces.reasoning), None, first=first, call=opens))
            )
            pieces, first, call_pending = Pieces(arguments=pieces.arguments), False, None
        if first or pieces.reasoning or pieces.content or pieces.arguments or last:
            await response.write(sse(shape.chunk(pieces, None, first=first)))
            first = False
        if last:
            break
    await response.write(sse(shape.chunk(Pieces(), plan.finish_reason)))
    if include_usage:
        await response.write(sse(shape.usage_chunk(plan, skip)))
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()


def _chat_tool(body: ChatCompletionRequest, continued: bool) -> FunctionTool | None:
    """The tool the answer calls; a continuation's answer follows the message before its own."""
    tools = function_tools(body.tools, chat=True)
    asking = body.messages[-2] if continued and len(body.messages) > 1 else body.messages[-1]
    return chosen_tool(tools, body.tool_choice, user_turn_last=asking.role in USER_ROLES)


async def chat_completions(request: web.Request) -> web.StreamResponse:
    body = parse_body(ChatCompletionRequest, await json_body(request))
    check_model(request.app[INFO].model_name, body.model)
    continued = chat_continuation(body)
    if continued is None:
        prompt_tokens = chat_prompt_tokens([m.text() for m in body.messages])
    else:
        prompt_tokens = continued.prompt_tokens
    limits = Limits(
        body.token_limit,
        body.seed,
        body.ignore_eos,
        body.min_tokens,
        body.stops,
        body.reasoning_effort,
    )
    tool = _chat_tool(body, continued is not None)
    if continued is None:
        plan = request_plan(request.app, prompt_tokens, limits, param="messages", tool=tool)
        return await _generate(request, body, plan, chat=True)
    # The plan of the whole answer: its limits are the continuation's plus what it was given.
    limits = _seeded(request.app, limits)
    unbounded = dataclasses.replace(limits, max_tokens=None, stops=())  # seeds alone
    given = chat_skip(
        request_plan(request.app, prompt_tokens, unbounded, param="messages", tool=tool), continued
    )
    widened = _widened(limits, given)
    plan = request_plan(request.app, prompt_tokens, widened, param="messages", tool=tool)
    return await _generate(request, body, plan, chat=True, skip=chat_skip(plan, continued))


async def completions(request: web.Request) -> web.StreamResponse:
    body = parse_body(CompletionRequest, await json_body(request))
    check_model(request.app[INFO].model_name, body.model)
    text = body.prompt_text()
    prompt_tokens = len(body.prompt) if text is None else max(1, text_tokens(text))
    limits = Limits(body.token_limit, body.seed, body.ignore_eos, body.min_tokens, body.stops)
    plan = request_plan(request.app, prompt_tokens, limits, param="prompt")
    if text is None or body.seed is None or body.echo:
        return await _generate(request, body, plan, chat=False)
    unbounded = dataclasses.replace(limits, max_tokens=None, stops=())  # seeds alone
    given, chars = prompt_skip(
        request_plan(request.app, prompt_tokens, unbounded, param="prompt"), text
    )
    if not given:
        return await _generate(request, body, plan, chat=False)
    prompt_tokens = max(1, text_tokens(text[: len(text) - chars]))
    plan = request_plan(request.app, prompt_tokens, _widened(limits, given), param="prompt")
    return await _generate(request, body, plan, chat=False, skip=min(given, plan.output_tokens - 1))


def _seeded(app: web.Application, limits: Limits) -> Limits:
    """`limits` with a seed (drawn now if it has none), so that two plans of it agree."""
    if limits.seed is not None:
        return limits
    return dataclasses.replace(limits, seed=app[SEEDS].getrandbits(63))


def _widened(limits: Limits, given: int) -> Limits:
    """The limits of a whole answer whose first `given` tokens a continuation holds."""
    max_tokens = None if limits.max_tokens is None else limits.max_tokens + given
    min_tokens = limits.min_tokens + given if limits.min_tokens else 0
    return dataclasses.replace(limits, max_tokens=max_tokens, min_tokens=min_tokens)


def _tokenized(info: ServerInfo, ids: list[int], strs: bool) -> web.Response:
    return web.json_response(
        {
            "count": len(ids),
            "max_model_len": info.max_model_len,
            "tokens": ids,
            "token_strs": [decode([i]) for i in ids] if strs else None,
        }
    )


async def tokenize(request: web.Request) -> web.Response:
    """vLLM's `/tokenize`: a `prompt`, or `messages` through the chat template (`tokens.py`)."""
    info = request.app[INFO]
    body = parse_body(TokenizeRequest, await json_body(request))
    check_model(info.model_name, body.model)
    if (body.prompt is None) == (body.messages is None):
        raise OrchestratorError(
            ErrorCode.INVALID_ARGUMENT,
            "give exactly one of `prompt` and `messages`",
            param="prompt",
        )
    if body.messages is not None:
        ids = encode_chat([(m.role, m.text()) for m in body.messages])
    else:
        ids = encode(body.prompt or "")
    return _tokenized(info, ids, bool(body.return_token_strs))


async def detokenize(request: web.Request) -> web.Response:
    body = parse_body(DetokenizeRequest, await json_body(request))
    check_model(request.app[INFO].model_name, body.model)
    return web.json_response({"prompt": decode(body.tokens)})


async def models(request: web.Request) -> web.Response:
    info = request.app[INFO]
    return web.json_response(
        {
            "object": "list",
            "data": [
                {
                    "id": info.model_name,
                    "object": "model",
                    "created": 0,
                    "owned_by": "orchestrator-sim",
                    "root": info.model_name,
                    "parent": None,
                    "max_model_len": info.max_model_len,
                }
            ],
        }
    )


async def health(request: web.Request) -> web.Response:
    return web.Response(status=200)


async def version(request: web.Request) -> web.Response:
    return web.json_response({"version": __version__})


async def model_info(request: web.Request) -> web.Response:
    info = request.app[INFO]
    return web.json_response(
        {"model_path": info.model_name, "tokenizer_path": info.model_name, "is_generation": True}
    )


async def server_info(request: web.Request) -> web.Response:
    info = request.app[INFO]
    batcher = request.app[ENGINE].batcher
    return web.json_response(
        {
            "model_path": info.model_name,
            "served_model_name": info.model_name,
            "engine": "orchestrator-sim",
            "version": __version__,
            "generation": info.generation,
            "time_scale": info.time_scale,
            "context_length": info.max_model_len,
            "max_running_requests": batcher.max_num_seqs,
            "max_num_batched_tokens": batcher.max_num_batched_tokens,
            "max_total_num_tokens": batcher.kv_capacity_tokens,
            "tp_size": 1,
            "dp_size": 1,
        }
    )


async def metrics(request: web.Request) -> web.Response:
    payload = generate_latest(request.app[REGISTRY])
    return web.Response(body=payload, headers={"Content-Type": "text/plain; version=0.0.4"})


def create_app(engine: LiveEngine, info: ServerInfo) -> web.Application:
    """The replica's web application; the engine's step loop runs while the app does."""
    app = web.Application(middlewares=[json_errors], client_max_size=MAX_BODY_BYTES)
    app[ENGINE] = engine
    app[INFO] = info
    app[SAMPLER] = WorkloadSampler(engine.batcher.cost.figures.workload, seed=info.seed)
    app[SEEDS] = random.Random(info.seed)
    registry = CollectorRegistry(auto_describe=True)
    registry.register(engine.metrics)
    app[REGISTRY] = registry
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_post("/v1/completions", completions)
    app.router.add_get("/v1/models", models)
    app.router.add_post("/tokenize", tokenize)
    app.router.add_post("/detokenize", detokenize)
    ResponsesApi(
        engine,
        model_name=info.model_name,
        max_model_len=info.max_model_len,
        sampler=app[SAMPLER],
        seeds=app[SEEDS],
    ).add_routes(app)
    app.router.add_get("/health", health)
    app.router.add_get("/version", version)
    app.router.add_get("/get_model_info", model_info)
    app.router.add_get("/get_server_info", server_info)
    app.router.add_get("/metrics", metrics)

    async def start_engine(_: web.Application) -> None:
        await engine.start()

    async def stop_engine(_: web.Application) -> None:
        await engine.stop()

    app.on_startup.append(start_engine)
    app.on_cleanup.append(stop_engine)
    return app
