"""orchestrator: one GPT-OSS endpoint over AMD Instinct pools of several generations and sites."""

from pathlib import Path

from orchestrator import _compiled

__version__ = "0.1.0"

# "compiled", "pure", or why the mypyc-compiled modules run from source (orchestrator/_compiled.py)
BUILD = _compiled.use_sources_if_stale(Path(__file__).resolve().parent.parent)
