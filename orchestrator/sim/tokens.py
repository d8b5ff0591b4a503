"""The simulated model's tokenizer: four UTF-8 bytes per token, as `text.py` counts them.

There is no vocabulary file; a token id is its bytes read as a number above the harmony special
tokens, so any text tokenizes and detokenizes back to itself, and a prompt's id count is the
count every other route of the simulated engine uses. A chat renders as gpt-oss's harmony
template does: `<|start|>role<|message|>content<|end|>` per message, and `<|start|>assistant` for
the reply, which gives the four template tokens per message and three per reply of
`chat_prompt_tokens`.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import MappingProxyType
from typing import Final

from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.sim.text import BYTES_PER_TOKEN

SPECIAL_TOKENS: Final = MappingProxyType(
    {200006: "<|start|>", 200007: "<|end|>", 200008: "<|message|>"}
)  # harmony's ids
START, END, MESSAGE = 200006, 200007, 200008
ROLE_TOKENS: Final = MappingProxyType(
    {"system": 200100, "developer": 200101, "user": 200102, "assistant": 200103, "tool": 200104}
)
BYTES_BASE: Final = 1 << 18  # above every special and role id
_NAMES: Final = MappingProxyType(
    {**SPECIAL_TOKENS, **{token: role for role, token in ROLE_TOKENS.items()}}
)


def encode(text: str) -> list[int]:
    """Token ids of `text`: one per four bytes; the last may be shorter (its length is kept)."""
    data = text.encode("utf-8", errors="replace")
    ids = []
    for start in range(0, len(data), BYTES_PER_TOKEN):
        chunk = data[start : start + BYTES_PER_TOKEN]
        # A length byte on top keeps short chunks (and leading zero bytes) exact.
        ids.append(BYTES_BASE + (len(chunk) << (8 * BYTES_PER_TOKEN)) + int.from_bytes(chunk))
    return ids


def encode_chat(messages: Sequence[tuple[str, str]]) -> list[int]:
    """Token ids of a chat of (role, content), rendered with the harmony template."""
    ids = []
    for role, content in messages:
        ids += [START, ROLE_TOKENS[role], MESSAGE, *encode(content), END]
    return [*ids, START, ROLE_TOKENS["assistant"], MESSAGE]


def decode(ids: Sequence[int]) -> str:
    """The text of token ids; raises INVALID_ARGUMENT naming the first id no token has."""
    pieces: list[bytes] = []
    for index, token in enumerate(ids):
        name = _NAMES.get(token)
        if name is not None:
            pieces.append(name.encode())
            continue
        size, value = divmod(token - BYTES_BASE, 1 << (8 * BYTES_PER_TOKEN))
        if token < BYTES_BASE or not 1 <= size <= BYTES_PER_TOKEN or value >= 1 << (8 * size):
            raise OrchestratorError(
                ErrorCode.INVALID_ARGUMENT,
                f"tokens.{index}: {token} is not a token id of this model",
                param="tokens",
            )
        pieces.append(value.to_bytes(size))
    return b"".join(pieces).decode("utf-8", errors="replace")
