"""Read what routing needs from an OpenAI request body, and nothing more.

The body has been parsed once (`json.loads`); this module looks at a few fields, checks their
types, and builds a `RequestContext`. Everything else (sampling fields, `tools`,
`reasoning_effort`, ...) is the replica's to validate; the body is forwarded unchanged.

Estimates, since the router has no tokenizer: text counts one token per four UTF-8 bytes, a chat
adds four tokens per message and three for the reply (as the simulated engine counts), token-id
prompts count exactly. The prefix hash covers the first `PREFIX_CHARS` characters of the prompt,
or of the chat's messages in order (role included), so requests that share a system prompt and
document share a hash; prompts shorter than that get None. It is BLAKE2b, stable across
processes and hosts, so every router worker agrees on it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, Final

from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.forwarding.stored_responses import check_response_id
from orchestrator.routing.context import BUILTIN_LANES, Priority, RequestContext

BYTES_PER_TOKEN: Final = 4
CHAT_TOKENS_PER_MESSAGE: Final = 4
CHAT_TOKENS_PER_REPLY: Final = 3
PREFIX_CHARS: Final = 256
PREFIX_TOKEN_IDS: Final = PREFIX_CHARS // BYTES_PER_TOKEN
PRIORITY_HEADER: Final = "x-priority"
CLIENT_SITE_HEADER: Final = "x-client-site"


def _invalid(param: str, message: str) -> OrchestratorError:
    return OrchestratorError(ErrorCode.INVALID_ARGUMENT, message, param=param)


def text_tokens(text: str) -> int:
    """Estimated tokens of `text`: ceil(UTF-8 bytes / 4)."""
    size = len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
    return -(-size // BYTES_PER_TOKEN)


def prefix_hash(text: str) -> int | None:
    """A stable 64-bit hash of the first `PREFIX_CHARS` characters, None when `text` is shorter."""
    if len(text) < PREFIX_CHARS:
        return None
    return _digest(text[:PREFIX_CHARS].encode("utf-8", "surrogatepass"))


def token_ids_hash(ids: list[Any]) -> int | None:
    """A stable 64-bit hash of the first `PREFIX_TOKEN_IDS` token ids, None when fewer."""
    if len(ids) < PREFIX_TOKEN_IDS:
        return None
    return _digest(",".join(map(str, ids[:PREFIX_TOKEN_IDS])).encode())


def _digest(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


def _content_text(content: object) -> str:
    """The text of a chat message's `content`: a string, or the `text` of its parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part["text"]
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""


def chat_prompt(messages: object) -> tuple[int, int | None]:
    """(estimated prompt tokens, prefix hash) of a chat's `messages`."""
    if not isinstance(messages, list) or not messages:
        raise _invalid("messages", "`messages` must be a non-empty array of messages")
    tokens = CHAT_TOKENS_PER_REPLY
    prefix: list[str] = []
    prefix_len = 0
    for message in messages:
        tokens += CHAT_TOKENS_PER_MESSAGE
        if not isinstance(message, dict):
            continue
        text = _content_text(message.get("content"))
        tokens += text_tokens(text)
        if prefix_len < PREFIX_CHARS:
            role = message.get("role")
            piece = f"<{role if isinstance(role, str) else ''}>{text}"
            prefix.append(piece)
            prefix_len += len(piece)
    return tokens, prefix_hash("".join(prefix))


def completion_prompt(prompt: object) -> tuple[int, int | None]:
    """(estimated prompt tokens, prefix hash) of a completion's `prompt`.

    A prompt is a string, a list of strings (a batch), a list of token ids, or a list of token-id
    lists; a batch is counted whole and hashed by its first element.
    """
    if isinstance(prompt, str):
        return max(1, text_tokens(prompt)), prefix_hash(prompt)
    if not isinstance(prompt, list) or not prompt:
        raise _invalid(
            "prompt", "`prompt` must be a string, or a non-empty array of strings or token ids"
        )
    first = prompt[0]
    if isinstance(first, int) and not isinstance(first, bool):
        return len(prompt), token_ids_hash(prompt)
    tokens = 0
    for item in prompt:
        if isinstance(item, str):
            tokens += max(1, text_tokens(item))
        elif isinstance(item, list):
            tokens += len(item)
    if isinstance(first, str):
        return tokens, prefix_hash(first)
    return tokens, token_ids_hash(first) if isinstance(first, list) else None


def _optional_int(body: Mapping[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise _invalid(name, f"`{name}` must be an integer")
    return value if value > 0 else None


def _priority(
    body: Mapping[str, Any],
    headers: Mapping[str, str],
    default: Priority,
    classes: Mapping[str, Priority],
) -> tuple[Priority, str | None]:
    """(admission lane, named class or None for a built-in one) from the `x-priority` header,
    else the body's `priority` when it names a class, else `default`. `classes` maps every
    class a request may name (built-in and the operator's) to its lane.

    An integer body `priority` is vLLM's scheduling priority: the replica's, not routing's.
    """
    raw: object = headers.get(PRIORITY_HEADER)  # `object`: the body's value may be anything
    param = PRIORITY_HEADER
    if raw is None:
        raw = body.get("priority")
        param = "priority"
        if raw is None or (isinstance(raw, int) and not isinstance(raw, bool)):
            return default, None
    if not isinstance(raw, str):
        known = _known(classes)
        raise _invalid(param, f"`priority` must be a class name ({known}) or an integer")
    name = raw.strip().lower()
    lane = classes.get(name)
    if lane is None:
        raise _invalid(param, f"`{param}` must name a class: {_known(classes)}; got {raw[:40]!r}")
    return lane, None if name in BUILTIN_LANES else name


def _known(classes: Mapping[str, Priority]) -> str:
    return ", ".join(f"`{name}`" for name in classes)


def responses_prompt(input_: object, instructions: object) -> tuple[int, int | None]:
    """(estimated prompt tokens, prefix hash) of a Responses request's `input` and
    `instructions`: counted as a chat whose messages are the instructions and the input items."""
    if isinstance(input_, str):
        items: list[Any] = [{"role": "user", "content": input_}]
    elif isinstance(input_, list) and input_:
        items = input_
    else:
        raise _invalid("input", "`input` must be a string or a non-empty array of input items")
    if instructions is not None and not isinstance(instructions, str):
        raise _invalid("instructions", "`instructions` must be a string")
    messages = [{"role": "system", "content": instructions}] if instructions else []
    for item in items:
        if isinstance(item, dict) and "content" not in item:
            text = "".join(
                value
                for key in ("output", "arguments", "name")
                if isinstance(value := item.get(key), str)
            )
            item = {"role": item.get("type"), "content": text}
        messages.append(item)
    return chat_prompt(messages)


def _model(body: Mapping[str, Any], default_model: str | None) -> str:
    model = body.get("model")
    if model is None:
        if default_model is None:
            raise _invalid("model", "`model` is required: this router serves several models")
        return default_model
    if not isinstance(model, str):
        raise _invalid("model", "`model` must be a string")
    return model


def _stream(body: Mapping[str, Any], name: str = "stream") -> bool:
    stream = body.get(name)
    if stream is not None and not isinstance(stream, bool):
        raise _invalid(name, f"`{name}` must be a boolean")
    return bool(stream)


def _client_site(headers: Mapping[str, str]) -> str | None:
    site = headers.get(CLIENT_SITE_HEADER)
    return site.strip() or None if site is not None else None


def responses_context(
    body: object,
    headers: Mapping[str, str],
    *,
    default_model: str | None,
    default_priority: Priority = Priority.INTERACTIVE,
    classes: Mapping[str, Priority] = BUILTIN_LANES,
) -> RequestContext:
    """The routing view of a parsed `POST /v1/responses` body; as `request_context`, plus the
    stored response it continues (`previous_response_id`), whose holder must answer it."""
    if not isinstance(body, dict):
        raise _invalid("body", "the request body must be a JSON object")
    prompt_tokens, prefix = responses_prompt(body.get("input"), body.get("instructions"))
    priority, slo_class = _priority(body, headers, default_priority, classes)
    previous = body.get("previous_response_id")
    if previous is not None:
        previous = check_response_id(previous, "previous_response_id")
    return RequestContext(
        model=_model(body, default_model),
        prompt_tokens=prompt_tokens,
        max_tokens=_optional_int(body, "max_output_tokens"),
        stream=_stream(body),
        prefix_hash=prefix,
        priority=priority,
        slo_class=slo_class,
        client_site=_client_site(headers),
        stored_response_id=previous,
        background=_stream(body, "background"),
    )


def request_context(
    body: object,
    headers: Mapping[str, str],
    *,
    chat: bool,
    default_model: str | None,
    default_priority: Priority = Priority.INTERACTIVE,
    classes: Mapping[str, Priority] = BUILTIN_LANES,
) -> RequestContext:
    """The routing view of a parsed chat or text completion body.

    `default_model` stands in when the body names none (the fleet serves one model); with no
    default, a missing model is an error. `default_priority` is the class of a request that
    names none; `classes` the classes a request may name, with their admission lanes.
    Raises INVALID_ARGUMENT naming the field.
    """
    if not isinstance(body, dict):
        raise _invalid("body", "the request body must be a JSON object")
    model = _model(body, default_model)
    stream = _stream(body)
    max_tokens = _optional_int(body, "max_tokens")
    if chat:
        prompt_tokens, prefix = chat_prompt(body.get("messages"))
        completion_limit = _optional_int(body, "max_completion_tokens")
        max_tokens = max_tokens if completion_limit is None else completion_limit
    else:
        prompt_tokens, prefix = completion_prompt(body.get("prompt"))
    priority, slo_class = _priority(body, headers, default_priority, classes)
    return RequestContext(
        model=model,
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens,
        stream=stream,
        prefix_hash=prefix,
        priority=priority,
        slo_class=slo_class,
        client_site=_client_site(headers),
    )
