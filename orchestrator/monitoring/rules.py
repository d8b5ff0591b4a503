"""The alert and recording rules (`data/rules.yaml`, the one source) and renderings of them.

Tests and the embedded stack need the same rules with shorter `for:` durations and, for a
simulated fleet that runs slower than hardware, latency targets scaled like the router's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from typing import Any, Final

import yaml

from orchestrator.core.strict_yaml import load_strict_yaml

RULES_RESOURCE: Final = "data/rules.yaml"
TARGET_RULES: Final = ("orchestrator:target_ttft_seconds", "orchestrator:target_tpot_seconds")
_DURATION: Final = re.compile(r"^(\d+)(ms|s|m|h|d)$")
_SECONDS_PER_UNIT: Final = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


@dataclass(frozen=True, slots=True)
class Rule:
    """One rule of the file: an alert (with its `for:` in seconds) or a recording rule."""

    group: str
    name: str
    expr: str
    is_alert: bool
    for_s: float


def rules_text() -> str:
    """The rule file exactly as shipped (what the Helm chart copies)."""
    return resources.files("orchestrator.monitoring").joinpath(RULES_RESOURCE).read_text()


def rules_document() -> dict[str, Any]:
    """The rule file parsed."""
    document = load_strict_yaml(rules_text())
    if not isinstance(document, dict) or not isinstance(document.get("groups"), list):
        raise ValueError(f"{RULES_RESOURCE}: expected a mapping with a 'groups' list")
    return document


def all_rules() -> list[Rule]:
    """Every rule, in file order."""
    found = []
    for group in rules_document()["groups"]:
        for rule in group["rules"]:
            is_alert = "alert" in rule
            found.append(
                Rule(
                    group=group["name"],
                    name=rule["alert"] if is_alert else rule["record"],
                    expr=str(rule["expr"]),
                    is_alert=is_alert,
                    for_s=duration_s(rule.get("for", "0s")),
                )
            )
    return found


def duration_s(text: str) -> float:
    """Seconds in a Prometheus duration with one unit (`90s`, `5m`, `1h`)."""
    match = _DURATION.match(str(text))
    if match is None:
        raise ValueError(f"unsupported duration {text!r}: expected a number and one of ms,s,m,h,d")
    return int(match.group(1)) * _SECONDS_PER_UNIT[match.group(2)]


def render_rules(*, max_for_s: float | None = None, latency_scale: float = 1.0) -> str:
    """The rules as YAML, with every `for:` capped at `max_for_s` seconds (None: as shipped) and
    the latency targets multiplied by `latency_scale` (a simulated fleet's time scale)."""
    if max_for_s is not None and max_for_s < 0:
        raise ValueError(f"max_for_s must be >= 0, got {max_for_s}")
    if not latency_scale > 0:
        raise ValueError(f"latency_scale must be > 0, got {latency_scale}")
    document = rules_document()
    for group in document["groups"]:
        for rule in group["rules"]:
            if max_for_s is not None and "for" in rule:
                capped = min(duration_s(rule["for"]), max_for_s)
                rule["for"] = f"{round(capped * 1000)}ms"
            if rule.get("record") in TARGET_RULES and latency_scale != 1.0:
                rule["expr"] = _scaled_vector(rule["record"], rule["expr"], latency_scale)
    return yaml.safe_dump(document, sort_keys=False, width=120)


def _scaled_vector(name: str, expr: str, scale: float) -> str:
    match = re.fullmatch(r"vector\(([0-9.eE+-]+)\)", expr.strip())
    if match is None:
        raise ValueError(f"{name}: a target rule must be vector(<seconds>), got {expr!r}")
    return f"vector({float(match.group(1)) * scale:g})"
