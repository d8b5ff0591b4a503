"""Plugin parameters: each plugin validates its own `params` into a frozen model.

Unknown keys and bad values are errors that name the plugin and the field, never a silent
default. YAML spells parameters in camelCase (`maxKvUsage`); Python may use either spelling.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from orchestrator.core.errors import ErrorCode, OrchestratorError


class PluginParamsModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class PluginParamsError(OrchestratorError):
    """A plugin's `params` failed validation; `field` is the offending key path under `params`."""

    def __init__(self, plugin_type: str, name: str, field: str, reason: str) -> None:
        where = f"params.{field}" if field else "params"
        super().__init__(
            ErrorCode.INVALID_ARGUMENT, f"{plugin_type} `{name}`: {where}: {reason}", param=where
        )
        self.field = field
        self.reason = reason


P = TypeVar("P", bound=PluginParamsModel)


def parse_params(model: type[P], plugin_type: str, name: str, params: Mapping[str, Any]) -> P:
    """Validate `params` into `model`, or raise `PluginParamsError` naming the first bad field."""
    try:
        return model.model_validate(dict(params))
    except ValidationError as error:
        first = error.errors()[0]
        field = ".".join(str(part) for part in first["loc"])
        raise PluginParamsError(plugin_type, name, field, str(first["msg"])) from None
