"""The bases of every settings model: `SettingsModel` (frozen, unknown keys refused, set by field
name or alias) for config sections, whose loader reports pydantic's errors with their paths, and
`CheckedSettings` for the settings a component is built with in code, where a bad value is the
orchestrator's INVALID_ARGUMENT naming the field. (A model that is a config section must not be
a `CheckedSettings`: pydantic calls a custom `__init__` for nested models too.)"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from orchestrator.core.errors import ErrorCode, OrchestratorError


class SettingsModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class CheckedSettings(SettingsModel):
    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as error:
            raise invalid_settings(error) from None


def invalid_settings(error: ValidationError) -> OrchestratorError:
    """The first problem of `error` as INVALID_ARGUMENT, `param` the field's name."""
    first = error.errors()[0]
    field = ".".join(str(part) for part in first["loc"]) or error.title
    return OrchestratorError(ErrorCode.INVALID_ARGUMENT, f"{field} {first['msg']}", param=field)
