"""The HTTP front end's settings model, kept out of `app.py` so that module can be compiled
(mypyc cannot compile a pydantic model's annotations; docs/compiled.md)."""

from __future__ import annotations

from pydantic import InstanceOf

from orchestrator.config.http import HttpSpec, StreamBufferSpec
from orchestrator.config.settings_model import CheckedSettings
from orchestrator.frontends.http.auth import ApiKeys

__all__ = ["HttpSettings"]


class HttpSettings(HttpSpec, StreamBufferSpec, CheckedSettings):
    """`max_body_bytes` caps a request body; `stream_buffer_bytes` caps a stream's bytes the
    client has not read yet (then it is cut); both declared in `config/http.py`. `api_keys`
    None means no authentication. A bad value raises INVALID_ARGUMENT naming the field."""

    api_keys: InstanceOf[ApiKeys] | None = None
