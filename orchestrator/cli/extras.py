"""What an optional extra's missing module means to the user: one line and the install command.

The main job installs only the base package and `fast`; `orchestrator bench ...` and the plots need
the `bench` extra. A command that imports a module of a missing extra gets this message instead of
a traceback (exit 2), with requirement strings read from the installed package's own metadata.
"""

from __future__ import annotations

import shlex
import sys
from importlib import metadata
from typing import Final

from packaging.requirements import InvalidRequirement, Requirement

DISTRIBUTION: Final = "orchestrator"
OPTIONAL_MODULES: Final = {"mlperf_loadgen": "bench", "matplotlib": "bench"}
"""Top-level module -> the extra of pyproject.toml that installs it."""


def extra_requirements(extra: str) -> list[str]:
    """The requirement strings of `extra`, as the installed package declares them."""
    try:
        declared = metadata.requires(DISTRIBUTION) or []
    except metadata.PackageNotFoundError:
        return []
    found = []
    for text in declared:
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            continue
        if requirement.marker is not None and requirement.marker.evaluate({"extra": extra}):
            requirement.marker = None
            found.append(str(requirement))
    return found


def missing_extra_message(error: ModuleNotFoundError, command: str) -> str | None:
    """The line to print when `error` is a module of an optional extra; None for any other."""
    module = (error.name or "").partition(".")[0]
    extra = OPTIONAL_MODULES.get(module)
    if extra is None:
        return None
    requirements = extra_requirements(extra) or [f"{DISTRIBUTION}[{extra}]"]
    install = " ".join(
        [shlex.quote(sys.executable), "-m", "pip", "install", *map(shlex.quote, requirements)]
    )
    return (
        f"orchestrator: error: `orchestrator {command}` needs the optional {extra!r} extra "
        f"({module} is not installed); install it with: {install}"
    )
