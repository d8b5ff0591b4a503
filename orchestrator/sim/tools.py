"""Which function, if any, a simulated answer calls, and arguments that fit its JSON schema.

A request calls for a tool when it offers function tools and `tool_choice` is `required` or names
one, or is `auto` (the default) while the conversation's last turn is the user's: the model calls
the first tool, and once a tool's result is back it answers in text. That makes a client's tool
round trip (call, result, answer) play out the same way every time. Arguments are drawn per
request from the tool's `parameters` schema, so they always parse and carry every required field.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.sim.text import VOCABULARY

MAX_SCHEMA_DEPTH: Final = 8  # deeper schemas get empty objects and arrays


@dataclass(frozen=True, slots=True)
class FunctionTool:
    name: str
    parameters: Mapping[str, Any]


def function_tools(tools: Sequence[Mapping[str, Any]] | None, *, chat: bool) -> list[FunctionTool]:
    """The function tools of a request: chat nests them under `function`, Responses does not.
    Other tool types (web search, MCP, ...) are left out: the simulated model never calls them."""
    found = []
    for index, tool in enumerate(tools or ()):
        if tool.get("type", "function") != "function":
            continue
        spec = tool.get("function") if chat else tool
        name = spec.get("name") if isinstance(spec, Mapping) else None
        if not isinstance(name, str) or not name:
            where = f"tools.{index}.function.name" if chat else f"tools.{index}.name"
            raise OrchestratorError(
                ErrorCode.INVALID_ARGUMENT, f"{where}: a function tool needs a name", param="tools"
            )
        parameters = spec.get("parameters") if isinstance(spec, Mapping) else None
        found.append(FunctionTool(name, parameters if isinstance(parameters, Mapping) else {}))
    return found


def chosen_tool(
    tools: Sequence[FunctionTool], tool_choice: object, *, user_turn_last: bool
) -> FunctionTool | None:
    """The tool the answer calls, or None for a text answer. Raises INVALID_ARGUMENT for a
    `tool_choice` that names no offered function or asks for a tool when none is offered."""
    if isinstance(tool_choice, Mapping):
        function = tool_choice.get("function")
        name = function.get("name") if isinstance(function, Mapping) else tool_choice.get("name")
        for tool in tools:
            if tool.name == name:
                return tool
        raise OrchestratorError(
            ErrorCode.INVALID_ARGUMENT,
            f"tool_choice names the function {name!r}, which is not among the tools",
            param="tool_choice",
        )
    choice = "auto" if tool_choice is None else tool_choice
    if choice not in ("auto", "none", "required"):
        raise OrchestratorError(
            ErrorCode.INVALID_ARGUMENT,
            f"tool_choice must be `auto`, `none`, `required` or a function, got {choice!r}",
            param="tool_choice",
        )
    if choice == "required" and not tools:
        raise OrchestratorError(
            ErrorCode.INVALID_ARGUMENT,
            "tool_choice is `required` but no function tools were given",
            param="tool_choice",
        )
    if not tools or choice == "none" or (choice == "auto" and not user_turn_last):
        return None
    return tools[0]


def arguments_for(schema: Mapping[str, Any], rng: random.Random, depth: int = 0) -> Any:
    """A value that fits the JSON schema `schema` (types, enums, required properties)."""
    if "enum" in schema and isinstance(schema["enum"], list) and schema["enum"]:
        return rng.choice(schema["enum"])
    if "const" in schema:
        return schema["const"]
    kind = schema.get("type", "object" if "properties" in schema else "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        properties = schema.get("properties")
        if not isinstance(properties, Mapping) or depth >= MAX_SCHEMA_DEPTH:
            return {}
        return {
            name: arguments_for(sub if isinstance(sub, Mapping) else {}, rng, depth + 1)
            for name, sub in properties.items()
        }
    if kind == "array":
        items = schema.get("items")
        if not isinstance(items, Mapping) or depth >= MAX_SCHEMA_DEPTH:
            return []
        return [arguments_for(items, rng, depth + 1)]
    if kind == "integer":
        low, high = schema.get("minimum"), schema.get("maximum")
        low = int(low) if isinstance(low, int | float) else 0
        high = int(high) if isinstance(high, int | float) else low + 100
        return rng.randint(low, max(low, high))
    if kind == "number":
        return round(rng.uniform(0.0, 100.0), 2)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "null":
        return None
    return rng.choice(VOCABULARY).strip()
