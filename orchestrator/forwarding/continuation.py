"""Mid-stream migration, as data: what a chat or text completions stream has told its client so
far (`Transcript`), the request that continues it on another replica (`continuation_body`), and
the rewrite that splices the continuation's events into the client's stream (`Splicer`).

A continuation is what vLLM offers for it: a chat gets the text already sent as a final assistant
message with `continue_final_message: true` and `add_generation_prompt: false`; a text completion
gets it appended to its prompt. Both ask for the tokens still allowed. The client sees one stream:
the first attempt's id, `created` and model on every event, no second role delta, and one usage
whose completion tokens add the ones sent before the move (counted as output events, one token
each) to the continuation's, and whose prompt tokens are the continuation's less those.
Transport-free and pure: bytes and JSON in, bytes out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

EVENT_END: Final = b"\n\n"
_DATA: Final = b"data: "
_DONE: Final = b"[DONE]"
_ENVELOPE: Final = ("id", "created", "model")
_REASONING_KEYS: Final = ("reasoning", "reasoning_content")
# Request fields that constrain the output to a grammar (OpenAI's and vLLM's spellings).
_CONSTRAINTS: Final = (
    "response_format",
    "structured_outputs",
    "guided_json",
    "guided_regex",
    "guided_choice",
    "guided_grammar",
)


class NotContinuable(Exception):
    """This stream cannot be continued elsewhere (the reason is the message)."""


class EventSplicer(Protocol):
    """Turns a continuation's bytes into the rest of the client's stream."""

    def feed(self, data: bytes) -> bytes:
        """Whole rewritten events of what arrived (b"" when none is whole yet)."""

    def rest(self) -> bytes:
        """What is left once the continuation's body ended."""


class StreamTranscript(Protocol):
    """What a stream has told its client, in one API's terms (chat and text completions here,
    the Responses API in `responses_continuation.py`)."""

    output_events: int

    def feed(self, data: bytes) -> None:
        """Take whole events the client was sent."""

    def continuation(self, request: bytes) -> bytes:
        """The body that continues the stream (raises `NotContinuable`)."""

    def splicer(self, request: bytes) -> EventSplicer:
        """The splicer of a continuation of this stream into the client's."""


@dataclass(slots=True)
class Transcript:
    """What the client has been sent: envelope fields, text, reasoning, output events.

    Fed whole events only (a relay holds back a partial one). `blocker` says why the stream
    cannot be continued (a tool call, more than one choice, an ended stream); None: it can.
    """

    chat: bool
    envelope: dict[str, Any] = field(default_factory=dict)
    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    output_events: int = 0
    role_sent: bool = False
    blocker: str | None = None

    def feed(self, data: bytes) -> None:
        for event in data.split(EVENT_END):
            payload = sse_payload(event)
            if payload is None:
                continue
            if payload == _DONE:
                self.blocker = "the stream already ended"
                continue
            try:
                chunk = json.loads(payload)
            except ValueError:
                self.blocker = "the replica sent an event that is not JSON"
                continue
            if isinstance(chunk, dict):
                self._take(chunk)

    def continuation(self, request: bytes) -> bytes:
        return continuation_body(request, self)

    def splicer(self, request: bytes) -> Splicer:
        return Splicer(self, request)

    def _take(self, chunk: dict[str, Any]) -> None:
        if not self.envelope:
            self.envelope = {k: chunk[k] for k in _ENVELOPE if k in chunk}
        if "error" in chunk:
            self.blocker = "the replica reported an error"
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict):
                continue
            if choice.get("index", 0) != 0:
                self.blocker = "more than one choice"
            if choice.get("finish_reason") is not None:
                self.blocker = "the stream already finished"
            grew = False
            if self.chat:
                delta = choice.get("delta") or {}
                self.role_sent = self.role_sent or "role" in delta
                if delta.get("tool_calls"):
                    self.blocker = "a tool call was being streamed"
                for key in _REASONING_KEYS:
                    if delta.get(key):
                        self.reasoning.append(delta[key])
                        grew = True
                if delta.get("content"):
                    self.text.append(delta["content"])
                    grew = True
            elif choice.get("text"):
                self.text.append(choice["text"])
                grew = True
            self.output_events += grew


def continuation_body(request: bytes, transcript: Transcript) -> bytes:
    """The request that continues `transcript` (the answer to `request`, the client's body).

    Raises `NotContinuable` when it cannot be: the stream is blocked, the body is not what a
    continuation can extend (token-id prompts, `echo`, `n` > 1) or no tokens are left to ask for.
    """
    if transcript.blocker is not None:
        raise NotContinuable(transcript.blocker)
    try:
        body = json.loads(request)
    except ValueError:
        raise NotContinuable("the request body is not JSON") from None
    if not isinstance(body, dict) or body.get("n", 1) != 1 or body.get("best_of", 1) != 1:
        raise NotContinuable("more than one choice")
    if body.get("echo"):  # vLLM would stream the final message again before continuing it
        raise NotContinuable("echo repeats what a continuation extends")
    constrained = [name for name in _CONSTRAINTS if _constrains(body.get(name))]
    if constrained:  # the grammar would start again after the partial answer
        raise NotContinuable(f"constrained output ({constrained[0]}) cannot be resumed")
    sent = transcript.output_events
    text = "".join(transcript.text)
    if transcript.chat:
        messages = body.get("messages")
        if not isinstance(messages, list):
            raise NotContinuable("no messages")
        final: dict[str, Any] = {"role": "assistant", "content": text}
        reasoning = "".join(transcript.reasoning)
        if reasoning:
            final["reasoning"] = reasoning
        body["messages"] = [*messages, final]
        body["add_generation_prompt"] = False
        body["continue_final_message"] = True
        limits: tuple[str, ...] = ("max_tokens", "max_completion_tokens")
    else:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1:
            prompt = prompt[0]
        if not isinstance(prompt, str):
            raise NotContinuable("only a text prompt can be extended")
        body["prompt"] = prompt + text
        limits = ("max_tokens",)
    for name in limits:
        limit = body.get(name)
        if isinstance(limit, int):
            if limit - sent < 1:
                raise NotContinuable("no tokens are left to ask for")
            body[name] = limit - sent
    if isinstance(body.get("min_tokens"), int):
        body["min_tokens"] = max(0, body["min_tokens"] - sent)
    options = body.get("stream_options")
    options = dict(options) if isinstance(options, dict) else {}
    options["include_usage"] = True  # the splice needs the continuation's count
    body["stream_options"] = options
    return json.dumps(body, separators=(",", ":")).encode()


def _constrains(value: Any) -> bool:
    """Whether a request field's value constrains the output (`{"type": "text"}` does not)."""
    if isinstance(value, dict) and value.get("type") == "text":
        return False
    return bool(value)


def wants_usage(request: bytes) -> tuple[bool, bool]:
    """Whether the client asked for a usage chunk, and for usage on every chunk."""
    try:
        options = json.loads(request).get("stream_options") or {}
    except (ValueError, AttributeError):
        return False, False
    if not isinstance(options, dict):
        return False, False
    return bool(options.get("include_usage")), bool(options.get("continuous_usage_stats"))


class Splicer:
    """Rewrites a continuation's SSE bytes into the client's stream (see the module doc).

    `feed` takes bytes as they arrive and returns whole rewritten events (b"" when none is whole
    yet); `rest` returns a trailing partial event once the body ended.
    """

    __slots__ = ("_carry", "_chat", "_continuous", "_envelope", "_role_sent", "_sent", "_usage")

    def __init__(self, transcript: Transcript, request: bytes) -> None:
        self._envelope = transcript.envelope
        self._chat = transcript.chat
        self._role_sent = transcript.role_sent
        self._sent = transcript.output_events
        self._usage, self._continuous = wants_usage(request)
        self._carry = b""

    def feed(self, data: bytes) -> bytes:
        data = self._carry + data
        cut = data.rfind(EVENT_END)
        if cut < 0:
            self._carry = data
            return b""
        self._carry = data[cut + 2 :]
        out = []
        for event in data[:cut].split(EVENT_END):
            rewritten = self._rewrite(event)
            if rewritten:
                out.append(rewritten)
        return b"".join(out)

    def rest(self) -> bytes:
        rest, self._carry = self._carry, b""
        return rest

    def _rewrite(self, event: bytes) -> bytes:
        payload = sse_payload(event)
        if payload is None:
            return b""
        if payload == _DONE:
            return event + EVENT_END
        try:
            chunk = json.loads(payload)
        except ValueError:
            return event + EVENT_END
        if not isinstance(chunk, dict) or "error" in chunk:
            return event + EVENT_END
        chunk.update(self._envelope)
        choices = [c for c in chunk.get("choices") or () if self._keep(c)]
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            if self._usage or self._continuous:
                chunk["usage"] = self._moved_usage(usage)
            else:
                del chunk["usage"]
        if "choices" in chunk:
            if not choices and not chunk.get("usage"):
                return b""
            if choices and not self._continuous:
                chunk.pop("usage", None)
            chunk["choices"] = choices
        return _DATA + json.dumps(chunk, separators=(",", ":")).encode() + EVENT_END

    def _keep(self, choice: Any) -> bool:
        """Drop the continuation's role delta (the client had one); keep everything else."""
        if not isinstance(choice, dict) or not self._chat:
            return True
        delta = choice.get("delta")
        if isinstance(delta, dict) and "role" in delta and self._role_sent:
            del delta["role"]
            if delta.get("content") == "":
                del delta["content"]
            if not delta and choice.get("finish_reason") is None and not choice.get("logprobs"):
                return False
        return True

    def _moved_usage(self, usage: dict[str, Any]) -> dict[str, Any]:
        prompt = max(0, int(usage.get("prompt_tokens", 0)) - self._sent)
        completion = int(usage.get("completion_tokens", 0)) + self._sent
        return {
            **usage,
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }


def sse_payload(event: bytes) -> bytes | None:
    """The data of one SSE event (its `data:` line), None for comments and empty events."""
    for line in event.split(b"\n"):
        if line.startswith(b"data:"):
            return line[5:].strip()
    return None
