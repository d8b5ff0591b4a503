"""What routing needs to know about a request, and nothing more."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Priority(StrEnum):
    INTERACTIVE = "interactive"
    BATCH = "batch"


@dataclass(frozen=True, slots=True)
class RequestContext:
    """One request as routing sees it.

    `prompt_tokens` is an estimate (the router has no tokenizer); `max_tokens` is None when the
    client set no limit. `prefix_hash` hashes the start of the prompt (same start, same hash), or
    is None when the prompt is too short to be worth keeping together. `client_site` is a hint
    from the client (header), None when unknown. `stored_response_id` is the stored response the
    request continues (Responses' `previous_response_id`); `replica_id` names the one replica
    that can answer (the holder of that response); None lets routing choose. `background` is a
    Responses request answered at once, before its tokens exist.
    """

    model: str
    prompt_tokens: int
    max_tokens: int | None = None
    stream: bool = False
    prefix_hash: int | None = None
    priority: Priority = Priority.INTERACTIVE
    client_site: str | None = None
    stored_response_id: str | None = None
    replica_id: str | None = None
    background: bool = False
