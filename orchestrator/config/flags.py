"""Settings declared once: a pydantic model's fields give the config keys, the command-line
flags and the docs table.

Each field states its type and constraints, its default and, in its `description`, the help
text; `flag` in its `json_schema_extra` names the flag when it is not the field's name in
kebab case (`max_queue` → `--max-queue`), and `False` when the field has none (it is set in a
file only); `metavar` names its value in the help. A mapping set entry by entry carries
`FlagItems` in its `Annotated` metadata: its flag is repeatable, one entry per use. From that:

- `add_flags` adds one argparse flag per field: a boolean is `on|off`, a `Literal` lists its
  choices, any other value is checked by the field's own validator, so a bad flag value gets the
  same message as a bad config value, and the help ends with the default; with `unset`, the flags
  default to nothing and override what `unset` names (a file's values), field by field;
- `from_args` builds the model from the parsed flags (validated once more, as a whole), and
  `given_args` returns only the fields whose flags were given;
- `to_flags` writes a model's values back as flags (what `orchestrator up` passes a router);
- `flags_table` is the Markdown table of the docs (a test keeps the docs in step).

A component with new settings adds fields to its model; nothing else is hand-written.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar, get_args, get_origin

from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

ON, OFF = "on", "off"
Model = TypeVar("Model", bound=BaseModel)


@dataclass(frozen=True, slots=True)
class FlagItems:
    """A mapping field's flag syntax: `parse` reads one entry (`metavar`-shaped) into its key
    and value, raising ValueError that says what is wrong; `format` writes one back."""

    metavar: str
    parse: Callable[[str], tuple[str, Any]]
    format: Callable[[str, Any], str]


def _extra(field: FieldInfo) -> dict[str, Any]:
    extra = field.json_schema_extra
    return extra if isinstance(extra, dict) else {}


def _items(field: FieldInfo) -> FlagItems | None:
    return next((m for m in field.metadata if isinstance(m, FlagItems)), None)


def flag_name(name: str, field: FieldInfo) -> str:
    """The flag of field `name`: its `flag` extra, else `--` and the name in kebab case."""
    flag = _extra(field).get("flag")
    return flag if isinstance(flag, str) else "--" + name.replace("_", "-")


def _flagged(model: type[BaseModel]) -> Iterator[tuple[str, FieldInfo, str]]:
    """(name, field, flag) of each field that has a flag."""
    for name, field in model.model_fields.items():
        if _extra(field).get("flag") is not False:
            yield name, field, flag_name(name, field)


def _dest(flag: str) -> str:
    return flag.removeprefix("--").replace("-", "_")


def _shown(value: object) -> str:
    if isinstance(value, bool):
        return ON if value else OFF
    if isinstance(value, float):
        return f"{value:g}"
    if value is None or value == {}:
        return "none"
    return str(value)


def _flag_value(value: object) -> str:
    """`value` as a flag carries it, exactly (a float's shortest round-trip form)."""
    return _shown(value) if isinstance(value, bool) else str(value)


def _checker(name: str, field: FieldInfo) -> Callable[[str], object]:
    """An argparse `type` that validates one flag value as the field does."""
    annotated: Any = (
        Annotated[(field.annotation, *field.metadata)] if field.metadata else field.annotation
    )
    adapter: TypeAdapter[Any] = TypeAdapter(annotated)

    def check(raw: str) -> object:
        try:
            return adapter.validate_strings(raw)
        except ValidationError as error:
            problem = error.errors()[0]["msg"]
            raise argparse.ArgumentTypeError(f"{problem}, got {raw!r}") from None

    check.__name__ = name  # argparse names the type in some messages
    return check


def _entry_checker(name: str, items: FlagItems) -> Callable[[str], tuple[str, Any]]:
    def check(raw: str) -> tuple[str, Any]:
        try:
            return items.parse(raw)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    check.__name__ = name
    return check


def add_flags(
    parser: argparse.ArgumentParser, model: type[BaseModel], *, unset: str | None = None
) -> None:
    """One flag per field of `model` (but those marked as having none), defaulting to the
    field's default; with `unset`, to nothing: the help says the flag overrides `unset`."""
    for name, field, flag in _flagged(model):
        default = field.get_default(call_default_factory=True)
        shown = _shown(default)
        where = f"default {shown}" if unset is None else f"default: {unset}, else {shown}"
        help_text = f"{field.description or name} ({where})"
        common: dict[str, Any] = {"dest": _dest(flag), "help": help_text}
        if "metavar" in _extra(field):
            common["metavar"] = _extra(field)["metavar"]
        items = _items(field)
        if items is not None:
            parser.add_argument(
                flag, type=_entry_checker(name, items), action="append", metavar=items.metavar,
                **common,
            )  # fmt: skip
        elif field.annotation is bool:
            parser.add_argument(flag, choices=(ON, OFF), default=None if unset else shown, **common)
        elif get_origin(field.annotation) is Literal:
            choices = [str(choice) for choice in get_args(field.annotation)]
            parser.add_argument(flag, choices=choices, default=None if unset else default, **common)
        else:
            parser.add_argument(
                flag, type=_checker(name, field), default=None if unset else default, **common
            )


def _read(field: FieldInfo, value: object) -> object:
    if field.annotation is bool and isinstance(value, str):
        return value == ON
    if _items(field) is not None:
        return dict(value or ())  # type: ignore[call-overload]
    return value


def given_args(model: type[BaseModel], args: argparse.Namespace) -> dict[str, Any]:
    """The values of the flags given on the command line (added with `unset`), by field name."""
    found: dict[str, Any] = {}
    for name, field, flag in _flagged(model):
        value = getattr(args, _dest(flag))
        if value is not None:
            found[name] = _read(field, value)
    return found


def from_args(model: type[Model], args: argparse.Namespace) -> Model:
    """The model from flags `add_flags` added (and argparse parsed)."""
    values = {
        name: _read(field, getattr(args, _dest(flag))) for name, field, flag in _flagged(model)
    }
    return model.model_validate(values)


def to_flags(settings: BaseModel) -> list[str]:
    """`settings`' values as the flags `add_flags` reads (a field set to None: no flag)."""
    out: list[str] = []
    for name, field, flag in _flagged(type(settings)):
        value = getattr(settings, name)
        items = _items(field)
        if items is not None:
            entries: Mapping[str, Any] = value
            for key in sorted(entries):
                out += [flag, items.format(key, entries[key])]
        elif value is not None:
            out += [flag, _flag_value(value)]
    return out


def flags_table(model: type[BaseModel]) -> str:
    """A Markdown table of `model`'s settings: config key, flag, default, meaning."""
    rows = ["| config key | flag | default | meaning |", "|---|---|---|---|"]
    flags = {name: flag for name, _, flag in _flagged(model)}
    for name, field in model.model_fields.items():
        value = field.get_default(call_default_factory=True)
        shown = f"`{_shown(value)}`"
        default = f"`{str(value).lower()}` ({shown})" if isinstance(value, bool) else shown
        key = field.alias or name
        flag = flags.get(name)
        items = _items(field)
        shown_flag = "(none)" if flag is None else f"`{flag}`"
        if flag is not None and items is not None:
            shown_flag = f"`{flag} {items.metavar}`"
        rows.append(f"| `{key}` | {shown_flag} | {default} | {field.description or ''} |")
    return "\n".join(rows) + "\n"
