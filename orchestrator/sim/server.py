"""The simulated replica's HTTP server: vLLM's OpenAI API, health and metrics, on aiohttp.

Routes: `/v1/chat/completions`, `/v1/completions` (SSE streaming or not), `/v1/models`, `/health`,
`/version`, `/get_model_info` and `/get_server_info` (what SGLang workers answer, so the SGLang
router accepts this replica), `/metrics`. Every error is an OpenAI-style JSON body; no traceback
ever reaches a client, and a client that goes away cancels its request in the engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest

from orchestrator import __version__
from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.core.openai_errors import openai_error
from orchestrator.fleet.workload import WorkloadSampler
from orchestrator.sim.batcher import SimRequest
from orchestrator.sim.live import LiveEngine
from orchestrator.sim.protocol import ChatCompletionRequest, CompletionRequest, parse_body
from orchestrator.sim.text import TextWriter, chat_prompt_tokens, text_tokens

log = logging.getLogger(__name__)

MAX_BODY_BYTES: Final = 32 * 1024 * 1024
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


@dataclass(frozen=True, slots=True)
class Plan:
    """How a validated request will play out: lengths, its end, and where its text is cut."""

    prompt_tokens: int
    output_tokens: int
    finish_reason: str
    text_seed: int
    keep_chars: int | None


ENGINE: Final = web.AppKey("engine", LiveEngine)
INFO: Final = web.AppKey("info", ServerInfo)
SAMPLER: Final = web.AppKey("sampler", WorkloadSampler)
REGISTRY: Final = web.AppKey("registry", CollectorRegistry)
SEEDS: Final = web.AppKey("seeds", random.Random)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def error_response(error: OrchestratorError) -> web.Response:
    status, body = openai_error(error)
    return web.json_response(body, status=status)


_HTTP_CODES: Final = {
    400: ErrorCode.INVALID_ARGUMENT,
    404: ErrorCode.NOT_FOUND,
    405: ErrorCode.METHOD_NOT_ALLOWED,
    413: ErrorCode.PAYLOAD_TOO_LARGE,
}


@web.middleware
async def json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Turn every failure into an OpenAI-style JSON error; the server keeps running."""
    try:
        return await handler(request)
    except OrchestratorError as error:
        return error_response(error)
    except web.HTTPException as http_error:
        if http_error.status < 400:
            raise
        code = _HTTP_CODES.get(http_error.status, ErrorCode.INVALID_ARGUMENT)
        return error_response(OrchestratorError(code, http_error.reason))
    except (asyncio.CancelledError, ConnectionResetError):
        raise
    except Exception:
        log.exception("unhandled error serving %s %s", request.method, request.path)
        return error_response(OrchestratorError(ErrorCode.INTERNAL, "internal server error"))


async def _json_body(request: web.Request) -> Any:
    raw = await request.read()
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as error:  # bad UTF-8 or JSON, overlong ints, deep nesting
        raise OrchestratorError(ErrorCode.INVALID_ARGUMENT, f"invalid JSON body: {error}") from None


def _check_model(info: ServerInfo, model: str | None) -> str:
    if model is not None and model != info.model_name:
        raise OrchestratorError(
            ErrorCode.NOT_FOUND, f"The model `{model}` does not exist.", param="model"
        )
    return info.model_name


def plan_request(
    app: web.Application,
    prompt_tokens: int,
    body: ChatCompletionRequest | CompletionRequest,
) -> Plan:
    """Apply vLLM's length rules, draw the natural length, and find the first stop string."""
    info = app[INFO]
    limit = info.max_model_len
    requested = body.token_limit
    if prompt_tokens + (requested or 0) > limit or prompt_tokens >= limit:
        raise OrchestratorError(
            ErrorCode.INVALID_ARGUMENT,
            f"This model's maximum context length is {limit} tokens. However, you requested "
            f"{prompt_tokens + (requested or 0)} tokens ({prompt_tokens} in the prompt, "
            f"{requested or 0} for the completion). Please reduce the length of the prompt or "
            "completion.",
            param="messages" if isinstance(body, ChatCompletionRequest) else "prompt",
        )
    max_tokens = requested or limit - prompt_tokens
    seed = body.seed if body.seed is not None else app[SEEDS].getrandbits(63)
    rng = random.Random(seed)
    if body.ignore_eos:
        natural = max_tokens
    else:
        natural = max(body.min_tokens, app[SAMPLER].output_length(rng), 1)
    output = min(max_tokens, natural)
    reason = "stop" if natural < max_tokens else "length"
    text_seed = rng.getrandbits(63)
    keep_chars = None
    stop = TextWriter(text_seed).first_stop(body.stops, output) if body.stops else None
    if stop is not None and stop[0] >= body.min_tokens:
        output, keep_chars = stop
        reason = "stop"
    return Plan(prompt_tokens, output, reason, text_seed, keep_chars)


class TextStream:
    """Hands out the text of a growing token count, cut before a stop string if there is one."""

    def __init__(self, plan: Plan) -> None:
        self._writer = TextWriter(plan.text_seed)
        self._keep = plan.keep_chars
        self._tokens = 0
        self._chars = 0

    def advance(self, count: int) -> str:
        text = "".join(self._writer.tokens(self._tokens, count))
        self._tokens = max(self._tokens, count)
        if self._keep is not None:
            text = text[: max(0, self._keep - self._chars)]
        self._chars += len(text)
        return text


def _sse(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def _usage(plan: Plan) -> dict[str, int]:
    return {
        "prompt_tokens": plan.prompt_tokens,
        "completion_tokens": plan.output_tokens,
        "total_tokens": plan.prompt_tokens + plan.output_tokens,
    }


class _Completion:
    """The shape differences between chat and text completions, in one place each."""

    def __init__(self, chat: bool, model: str) -> None:
        self.chat = chat
        self.model = model
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        self.created = int(time.time())

    def _envelope(self, obj: str, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": obj,
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }

    def whole(self, text: str, plan: Plan) -> dict[str, Any]:
        if self.chat:
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": text, "tool_calls": []},
                "logprobs": None,
                "finish_reason": plan.finish_reason,
            }
            body = self._envelope("chat.completion", [choice])
        else:
            choice = {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": plan.finish_reason,
            }
            body = self._envelope("text_completion", [choice])
        body["usage"] = _usage(plan)
        return body

    def chunk(
        self, text: str | None, finish_reason: str | None, first: bool = False
    ) -> dict[str, Any]:
        if self.chat:
            delta: dict[str, Any] = {"role": "assistant", "content": ""} if first else {}
            if text:
                delta["content"] = text
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            return self._envelope("chat.completion.chunk", [choice])
        choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish_reason}
        return self._envelope("text_completion", [choice])

    def usage_chunk(self, plan: Plan) -> dict[str, Any]:
        body = self._envelope("chat.completion.chunk" if self.chat else "text_completion", [])
        body["usage"] = _usage(plan)
        return body


async def _generate(
    request: web.Request,
    body: ChatCompletionRequest | CompletionRequest,
    prompt_tokens: int,
    chat: bool,
) -> web.StreamResponse:
    app = request.app
    model = _check_model(app[INFO], body.model)
    plan = plan_request(app, prompt_tokens, body)
    engine = app[ENGINE]
    sim = engine.submit(plan.prompt_tokens, plan.output_tokens, plan.finish_reason)
    shape = _Completion(chat, model)
    text = TextStream(plan)
    try:
        if not body.stream:
            await engine.wait_finished(sim)
            return web.json_response(shape.whole(text.advance(plan.output_tokens), plan))
        return await _stream(request, engine, sim, shape, text, plan, body)
    finally:
        engine.abort(sim)  # a no-op once finished; frees the KV of a vanished client


async def _stream(
    request: web.Request,
    engine: LiveEngine,
    sim: SimRequest,
    shape: _Completion,
    text: TextStream,
    plan: Plan,
    body: ChatCompletionRequest | CompletionRequest,
) -> web.StreamResponse:
    response = web.StreamResponse(headers=SSE_HEADERS)
    await response.prepare(request)
    with contextlib.suppress(ConnectionResetError):  # the client left; the caller aborts
        await _write_events(response, engine, sim, shape, text, plan, body)
    return response


async def _write_events(
    response: web.StreamResponse,
    engine: LiveEngine,
    sim: SimRequest,
    shape: _Completion,
    text: TextStream,
    plan: Plan,
    body: ChatCompletionRequest | CompletionRequest,
) -> None:
    include_usage = bool(body.stream_options and body.stream_options.include_usage)
    first = shape.chat
    async for count in engine.token_counts(sim):
        last = count >= plan.output_tokens
        piece = text.advance(count)
        if first or piece or last:
            await response.write(_sse(shape.chunk(piece, None, first=first)))
            first = False
        if last:
            break
    await response.write(_sse(shape.chunk(None, plan.finish_reason)))
    if include_usage:
        await response.write(_sse(shape.usage_chunk(plan)))
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()


async def chat_completions(request: web.Request) -> web.StreamResponse:
    body = parse_body(ChatCompletionRequest, await _json_body(request))
    prompt_tokens = chat_prompt_tokens([m.text() for m in body.messages])
    return await _generate(request, body, prompt_tokens, chat=True)


async def completions(request: web.Request) -> web.StreamResponse:
    body = parse_body(CompletionRequest, await _json_body(request))
    text = body.prompt_text()
    prompt_tokens = len(body.prompt) if text is None else max(1, text_tokens(text))
    return await _generate(request, body, prompt_tokens, chat=False)


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
