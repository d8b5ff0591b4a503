"""What routing needs to know about a request, and nothing more."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from orchestrator.core.slo import SloTargets


class Priority(StrEnum):
    """The admission lane of a request: interactive requests are served before batch ones."""

    INTERACTIVE = "interactive"
    BATCH = "batch"


BUILTIN_LANES: Final[Mapping[str, Priority]] = {p.value: p for p in Priority}


def class_lanes(targets: SloTargets) -> dict[str, Priority]:
    """Every class a request may name, with its admission lane: a class the operator named is
    admitted as interactive when its fleet-wide TTFT target is no looser than interactive's,
    else as batch (it waits behind interactive requests and is refused first)."""
    interactive_ttft_s = targets.target("", Priority.INTERACTIVE.value).ttft_s
    lanes = dict(BUILTIN_LANES)
    for name in targets.class_names():
        if name not in lanes:
            tight = targets.target("", name).ttft_s <= interactive_ttft_s
            lanes[name] = Priority.INTERACTIVE if tight else Priority.BATCH
    return lanes


@dataclass(frozen=True, slots=True, init=False)
class RequestContext:
    """One request as routing sees it.

    `prompt_tokens` is an estimate (the router has no tokenizer); `max_tokens` is None when the
    client set no limit. `prefix_hash` hashes the start of the prompt (same start, same hash), or
    is None when the prompt is too short to be worth keeping together. `client_site` is a hint
    from the client (header), None when unknown. `stored_response_id` is the stored response the
    request continues (Responses' `previous_response_id`); `replica_id` names the one replica
    that can answer (the holder of that response); None lets routing choose. `background` is a
    Responses request answered at once, before its tokens exist. `slo_class` is the class the
    request named when it is not a built-in one (its targets; `priority` is then its lane).
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
    slo_class: str | None = None

    def __init__(
        self,
        model: str,
        prompt_tokens: int,
        max_tokens: int | None = None,
        stream: bool = False,
        prefix_hash: int | None = None,
        priority: Priority = Priority.INTERACTIVE,
        client_site: str | None = None,
        stored_response_id: str | None = None,
        replica_id: str | None = None,
        background: bool = False,
        slo_class: str | None = None,
    ) -> None:
        # Written out, the fields above in their order: compiled, this is C calling
        # `object.__setattr__` (as a frozen dataclass's own `__init__` does), where the
        # `__init__` dataclasses writes stays interpreted; one of these is made per request.
        setter = object.__setattr__
        setter(self, "model", model)
        setter(self, "prompt_tokens", prompt_tokens)
        setter(self, "max_tokens", max_tokens)
        setter(self, "stream", stream)
        setter(self, "prefix_hash", prefix_hash)
        setter(self, "priority", priority)
        setter(self, "client_site", client_site)
        setter(self, "stored_response_id", stored_response_id)
        setter(self, "replica_id", replica_id)
        setter(self, "background", background)
        setter(self, "slo_class", slo_class)

    @property
    def target_class(self) -> str:
        """The class whose latency targets this request is routed and judged against."""
        return self.priority.value if self.slo_class is None else self.slo_class
