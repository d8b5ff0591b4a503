"""Reading a request body and its `model` the way every simulated route does."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from orchestrator.core.errors import ErrorCode, OrchestratorError


async def json_body(request: web.Request) -> Any:
    """The decoded JSON body; INVALID_ARGUMENT for bad UTF-8 or JSON, huge ints, deep nesting."""
    raw = await request.read()
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as error:
        raise OrchestratorError(ErrorCode.INVALID_ARGUMENT, f"invalid JSON body: {error}") from None


def check_model(served: str, model: str | None) -> str:
    """The served model's name; NOT_FOUND (as vLLM answers) when the body names another."""
    if model is not None and model != served:
        raise OrchestratorError(
            ErrorCode.NOT_FOUND, f"The model `{model}` does not exist.", param="model"
        )
    return served
