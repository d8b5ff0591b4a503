"""The router's HTTP limits: the `router.http:` section, and the slow-reader cap that the
`router.admission:` section carries (`config/admission.py`).

    router:
      http:
        maxBodyBytes: 8388608    # a larger request body is refused with 413

Declared once: these fields are the config keys, the `orchestrator router` flags
(`config/flags.py`), the settings the HTTP front end runs with (`HttpSettings`, which adds the
API keys) and the tables in docs/settings.md.
"""

from __future__ import annotations

from typing import Annotated, Final

from pydantic import Field

from orchestrator.config.settings_model import SettingsModel

DEFAULT_MAX_BODY_BYTES: Final = 8 * 1024 * 1024
DEFAULT_STREAM_BUFFER_BYTES: Final = 1024 * 1024
Bytes = Annotated[int, Field(ge=1)]


class HttpSpec(SettingsModel):
    """The HTTP front end's own limits."""

    max_body_bytes: Bytes = Field(
        default=DEFAULT_MAX_BODY_BYTES,
        alias="maxBodyBytes",
        description="largest request body accepted, in bytes; a larger one is refused (413)",
    )


class StreamBufferSpec(SettingsModel):
    """The slow-reader cap, shared by the admission section and the HTTP front end."""

    stream_buffer_bytes: Bytes = Field(
        default=DEFAULT_STREAM_BUFFER_BYTES,
        alias="streamBufferBytes",
        description="a client this many bytes behind a stream has it cut",
    )
