"""What the simulated model reads and writes: prompt-length estimates and deterministic text.

There is no tokenizer: a prompt given as text counts one token per four UTF-8 bytes (the usual
rule of thumb for English BPE vocabularies), a prompt given as token ids counts exactly, and a chat
adds a few tokens per message for the template. Output tokens are words from a small vocabulary,
drawn from a generator seeded per request, so the same seed always writes the same text.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Final

BYTES_PER_TOKEN: Final = 4
CHAT_TOKENS_PER_MESSAGE: Final = 4
CHAT_TOKENS_PER_REPLY: Final = 3

_WORDS: Final = """
the capacity of each replica grows with its memory bandwidth and the batch it keeps full while the
router spreads requests across sites so that every generation works near its limit without queues
that break the latency target for tokens in flight fabric links stay healthy when pause frames are
rare and congestion notices fall back to their baseline after a burst
"""
VOCABULARY: Final = tuple(" " + word for word in _WORDS.split())


def text_tokens(text: str) -> int:
    """Estimated tokens in `text` (at least one for non-empty text)."""
    size = len(text.encode("utf-8", errors="replace"))
    return -(-size // BYTES_PER_TOKEN)


def chat_prompt_tokens(contents: Sequence[str]) -> int:
    """Estimated prompt tokens of a chat whose messages hold `contents`."""
    return sum(text_tokens(c) + CHAT_TOKENS_PER_MESSAGE for c in contents) + CHAT_TOKENS_PER_REPLY


class TextWriter:
    """Token texts for one request, produced lazily and reproducible from `seed`."""

    def __init__(self, seed: int) -> None:
        self._random = random.Random(seed)
        self._tokens: list[str] = []

    def tokens(self, start: int, end: int) -> list[str]:
        """Texts of tokens [start, end)."""
        missing = end - len(self._tokens)
        if missing > 0:
            self._tokens.extend(self._random.choices(VOCABULARY, k=missing))
        return self._tokens[start:end]

    def first_stop(self, stops: Sequence[str], limit: int) -> tuple[int, int] | None:
        """Where the earliest stop string ends within the first `limit` tokens.

        Returns (tokens to emit, characters of text to keep) — the token that completes the stop
        string is produced, but the text is cut before the stop string, as vLLM does.
        """
        if not stops:
            return None
        text = ""
        for index, token in enumerate(self.tokens(0, limit)):
            before = len(text)
            text += token
            window_start = max(0, before - max(len(s) for s in stops) + 1)
            hits = [text.find(s, window_start) for s in stops if s]
            found = [h for h in hits if h >= 0]
            if found:
                return index + 1, min(found)
        return None
