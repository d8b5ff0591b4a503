"""Settings declared once: a pydantic model's fields give the config keys, the command-line
flags and the docs table.

Each field states its type and constraints, its default and, in its `description`, the help
text; `flag` in its `json_schema_extra` names the flag when it is not the field's name in
kebab case (`max_queue` → `--max-queue`). From that:

- `add_flags` adds one argparse flag per field: a boolean is `on|off`, a `Literal` lists its
  choices, any other value is checked by the field's own validator, so a bad flag value gets the
  same message as a bad config value, and the help ends with the default;
- `from_args` builds the model from the parsed flags (validated once more, as a whole);
- `to_flags` writes a model's values back as flags (what `orchestrator up` passes a router);
- `flags_table` is the Markdown table of the docs (a test keeps the docs in step).

A component with new settings adds fields to its model; nothing else is hand-written.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeVar, get_args, get_origin

from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

ON, OFF = "on", "off"
Model = TypeVar("Model", bound=BaseModel)


def _extra(field: FieldInfo) -> dict[str, Any]:
    extra = field.json_schema_extra
    return extra if isinstance(extra, dict) else {}


def flag_name(name: str, field: FieldInfo) -> str:
    """The flag of field `name`: its `flag` extra, else `--` and the name in kebab case."""
    flag = _extra(field).get("flag")
    return flag if isinstance(flag, str) else "--" + name.replace("_", "-")


def _dest(flag: str) -> str:
    return flag.removeprefix("--").replace("-", "_")


def _shown(value: object) -> str:
    if isinstance(value, bool):
        return ON if value else OFF
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _checker(name: str, field: FieldInfo) -> Callable[[str], object]:
    """An argparse `type` that validates one flag value as the field does."""
    annotated: Any = Annotated[(field.annotation, *field.metadata)]
    adapter: TypeAdapter[Any] = TypeAdapter(annotated)

    def check(raw: str) -> object:
        try:
            return adapter.validate_strings(raw)
        except ValidationError as error:
            problem = error.errors()[0]["msg"]
            raise argparse.ArgumentTypeError(f"{problem}, got {raw!r}") from None

    check.__name__ = name  # argparse names the type in some messages
    return check


def add_flags(parser: argparse.ArgumentParser, model: type[BaseModel]) -> None:
    """One flag per field of `model`, defaulting to the field's default."""
    for name, field in model.model_fields.items():
        flag = flag_name(name, field)
        default = field.get_default(call_default_factory=True)
        help_text = f"{field.description or name} (default {_shown(default)})"
        if field.annotation is bool:
            parser.add_argument(
                flag, dest=_dest(flag), choices=(ON, OFF), default=_shown(default), help=help_text
            )
        elif get_origin(field.annotation) is Literal:
            choices = [str(choice) for choice in get_args(field.annotation)]
            parser.add_argument(
                flag, dest=_dest(flag), choices=choices, default=default, help=help_text
            )
        else:
            parser.add_argument(
                flag, dest=_dest(flag), type=_checker(name, field), default=default,
                help=help_text,
            )  # fmt: skip


def from_args(model: type[Model], args: argparse.Namespace) -> Model:
    """The model from flags `add_flags` added (and argparse parsed)."""
    values: dict[str, object] = {}
    for name, field in model.model_fields.items():
        value = getattr(args, _dest(flag_name(name, field)))
        values[name] = value == ON if field.annotation is bool else value
    return model.model_validate(values)


def to_flags(settings: BaseModel) -> list[str]:
    """`settings`' values as the flags `add_flags` reads."""
    out: list[str] = []
    for name, field in type(settings).model_fields.items():
        out += [flag_name(name, field), _shown(getattr(settings, name))]
    return out


def flags_table(model: type[BaseModel]) -> str:
    """A Markdown table of `model`'s settings: config key, flag, default, meaning."""
    rows = ["| config key | flag | default | meaning |", "|---|---|---|---|"]
    for name, field in model.model_fields.items():
        value = field.get_default(call_default_factory=True)
        shown = f"`{_shown(value)}`"
        default = f"`{str(value).lower()}` ({shown})" if isinstance(value, bool) else shown
        key, flag = field.alias or name, flag_name(name, field)
        rows.append(f"| `{key}` | `{flag}` | {default} | {field.description or ''} |")
    return "\n".join(rows) + "\n"
