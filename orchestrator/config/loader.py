"""Read a config file into an `OrchestratorConfig`, or say everything that is wrong with it.

Every failure is one `ConfigError` whose message has a line per problem,
`"<source>: <field.path>: <problem>"`: YAML syntax (with line and column), duplicate keys, unknown
keys (with the allowed ones), bad values (with what was given and what is allowed) and cross-field
problems (unknown sites, duplicate names, shared ports) are all reported in one go.
"""

from __future__ import annotations

import difflib
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from orchestrator.config.cross_checks import ConfigProblems
from orchestrator.config.errors import ConfigError, ConfigProblem, field_path
from orchestrator.config.partial import partial_cross_field_problems
from orchestrator.config.schema import API_VERSION, KIND, OrchestratorConfig
from orchestrator.core.strict_yaml import DuplicateKeyError, load_strict_yaml

_EXPECTED = f"a mapping starting with `apiVersion: {API_VERSION}` and `kind: {KIND}`"


def load_config(path: str | Path) -> OrchestratorConfig:
    """Read and validate the config file at `path`; raises `ConfigError` naming the file."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError(
            source, [ConfigProblem("", "cannot read the file: not UTF-8 text")]
        ) from None
    except OSError as error:
        reason = error.strerror or str(error)
        raise ConfigError(source, [ConfigProblem("", f"cannot read the file: {reason}")]) from None
    return parse_config(text, source=source)


def parse_config(text: str, *, source: str = "config") -> OrchestratorConfig:
    """Validate a config document given as YAML text; `source` names it in errors."""
    try:
        data = load_strict_yaml(text)
    except DuplicateKeyError as error:
        raise ConfigError(source, [ConfigProblem(error.path, error.problem)]) from None
    except yaml.YAMLError as error:
        raise ConfigError(source, [_yaml_problem(error)]) from None
    return validate_config(data, source=source)


def validate_config(data: object, *, source: str = "config") -> OrchestratorConfig:
    """Validate a config already parsed from YAML or JSON (plain dicts, lists and scalars)."""
    if data is None:
        raise ConfigError(
            source, [ConfigProblem("", f"the document is empty; expected {_EXPECTED}")]
        )
    if not isinstance(data, Mapping):
        raise ConfigError(
            source,
            [ConfigProblem("", f"expected {_EXPECTED}, got {type(data).__name__} {data!r:.60}")],
        )
    try:
        return OrchestratorConfig.model_validate(data)
    except ValidationError as error:
        problems = [p for detail in error.errors() for p in _problems(detail)]
        if not any(_is_cross_field(detail) for detail in error.errors()):
            # Some field is malformed, so the model never reached its cross-field checks: run them
            # on the parts that validate, so this report is complete.
            problems += partial_cross_field_problems(data)
        raise ConfigError(source, problems) from None


def dump_config(config: OrchestratorConfig) -> str:
    """The config as YAML that `parse_config` reads back to an equal config."""
    document = config.model_dump(mode="json", by_alias=True, exclude_none=True)
    return yaml.safe_dump(document, sort_keys=False)


def _yaml_problem(error: yaml.YAMLError) -> ConfigProblem:
    if isinstance(error, yaml.MarkedYAMLError) and error.problem_mark is not None:
        mark = error.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}"
        what = error.problem or "invalid YAML"
        context = f" ({error.context})" if error.context else ""
        return ConfigProblem("", f"YAML syntax error at {where}: {what}{context}")
    return ConfigProblem("", f"YAML syntax error: {error}")


def _is_cross_field(detail: ErrorDetails) -> bool:
    return detail["loc"] == () and isinstance(detail.get("ctx", {}).get("error"), ConfigProblems)


def _format_path(loc: tuple[int | str, ...]) -> str:
    # "[key]" is pydantic's marker for "the key itself was wrong": the path already names it.
    return field_path(part for part in loc if part != "[key]")


def _join(base: str, relative: str) -> str:
    if not base:
        return relative
    return f"{base}{relative}" if relative.startswith("[") else f"{base}.{relative}"


def _problems(detail: ErrorDetails) -> list[ConfigProblem]:
    loc = tuple(detail["loc"])
    path = _format_path(loc)
    kind = detail["type"]
    cause = detail.get("ctx", {}).get("error")
    if isinstance(cause, ConfigProblems):
        return [ConfigProblem(_join(path, p.path), p.message) for p in cause.problems]
    if kind == "value_error" and cause is not None:
        return [ConfigProblem(path, str(cause))]
    if kind == "extra_forbidden":
        return [ConfigProblem(path, _unknown_key(loc))]
    if kind == "missing":
        return [ConfigProblem(path, "required, but missing")]
    given = detail.get("input")
    shown = f"; got {given!r:.60}" if not isinstance(given, Mapping | list) else ""
    return [ConfigProblem(path, f"{detail['msg']}{shown}")]


def _unknown_key(loc: tuple[int | str, ...]) -> str:
    key = str(loc[-1])
    model = _model_at(loc[:-1])
    if model is None:
        return "unknown key"
    allowed = [field.alias or name for name, field in model.model_fields.items()]
    lowered = {name.lower(): name for name in allowed}
    close = difflib.get_close_matches(key.lower(), list(lowered), n=1)
    hint = f" (did you mean {lowered[close[0]]}?)" if close else ""
    return f"unknown key{hint}; allowed keys: {', '.join(allowed)}"


def _model_at(loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The model class that validates the mapping at `loc`, walking the schema's annotations."""
    current: Any = OrchestratorConfig
    for part in loc:
        current = _unwrap(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            fields = {f.alias or n: f for n, f in current.model_fields.items()}
            fields.update(current.model_fields)
            if not isinstance(part, str) or part not in fields:
                return None
            current = fields[part].annotation
        elif get_origin(current) in (list, tuple) and isinstance(part, int):
            current = get_args(current)[0]
        elif get_origin(current) is dict:
            current = get_args(current)[1]
        else:
            return None
    current = _unwrap(current)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _unwrap(annotation: Any) -> Any:
    """Strip `Annotated[...]` and `X | None` down to the type that validates the value."""
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = get_args(annotation)[0]
        elif origin in (Union, types.UnionType):
            options = [a for a in get_args(annotation) if a is not type(None)]
            annotation = options[0]
        else:
            return annotation
