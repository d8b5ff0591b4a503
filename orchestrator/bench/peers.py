"""What the peer routers (`sglang-router`, `vllm-router`) need to run side by side with ours on
this machine: the served model's tokenizer as a local folder, so neither tries to download one."""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.bench.wrk import PROMPT


def write_tokenizer(folder: Path) -> str:
    """A tiny word-level tokenizer; peer routers load the served model's tokenizer from it."""
    folder.mkdir(parents=True, exist_ok=True)
    words = PROMPT.lower().replace(",", "").replace(".", "").split()
    vocabulary = {"[UNK]": 0} | {w: i + 1 for i, w in enumerate(dict.fromkeys(words))}
    unknown = {"id": 0, "content": "[UNK]", "single_word": False, "lstrip": False,
               "rstrip": False, "normalized": False, "special": True}  # fmt: skip
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [unknown],
        "normalizer": None, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": None,
        "decoder": None, "model": {"type": "WordLevel", "vocab": vocabulary, "unk_token": "[UNK]"},
    }  # fmt: skip
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]"}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return str(folder)
