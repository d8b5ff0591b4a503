"""The one error a bad config raises: every problem, each with the path of the field at fault."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from orchestrator.core.errors import ErrorCode, OrchestratorError

_PLAIN_KEY = re.compile(r"[A-Za-z0-9_\-/]+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f\u2028\u2029\x85]")


def field_path(parts: Iterable[str | int]) -> str:
    """A field's path as users read it: `pools[1].generation`, `pools[0].selector['app.k8s/x']`.

    Keys that are not plain words are quoted, so a path is always one unambiguous line.
    """
    path = ""
    for part in parts:
        if isinstance(part, int):
            path += f"[{part}]"
        elif _PLAIN_KEY.fullmatch(part):
            path += f".{part}" if path else part
        else:
            path += f"[{part!r}]"
    return path


def _one_line(text: str) -> str:
    return _CONTROL.sub(lambda match: repr(match.group())[1:-1], text)


@dataclass(frozen=True, slots=True)
class ConfigProblem:
    """One thing wrong with a config.

    `path` names the field as the user wrote it (`pools[1].generation`, `router.httpPort`); it is
    empty when the problem concerns the document as a whole (unreadable file, YAML syntax).
    """

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class ConfigError(OrchestratorError):
    """A config that cannot be used, with every problem found, so one edit can fix them all.

    The message has one line per problem, each `"<source>: <field.path>: <problem>"`.
    `param` is the path of the first problem.
    """

    def __init__(self, source: str, problems: Sequence[ConfigProblem]) -> None:
        if not problems:
            raise ValueError("a ConfigError needs at least one problem")
        super().__init__(
            ErrorCode.INVALID_ARGUMENT,
            "\n".join(_one_line(f"{source}: {problem}") for problem in problems),
            param=problems[0].path or None,
        )
        self.source = source
        self.problems = tuple(problems)
