"""Settings declared once: a section's fields give the flags (checked as the config checks them,
defaults and help from the fields), the flags a config turns into, and the docs table."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from orchestrator.config.admission import AdmissionSpec
from orchestrator.config.flags import add_flags, from_args, to_flags

REPO = Path(__file__).resolve().parents[2]


def parser() -> argparse.ArgumentParser:
    out = argparse.ArgumentParser(prog="router", exit_on_error=False)
    add_flags(out, AdmissionSpec)
    return out


def test_flags_default_to_the_fields_and_carry_a_section_back_unchanged() -> None:
    assert from_args(AdmissionSpec, parser().parse_args([])) == AdmissionSpec()
    section = AdmissionSpec(
        enabled=False, max_queue=7, queue_timeout_s=0.5, batch_reserve=0.3, capacity_factor=1.5,
        default_priority="batch", stream_buffer_bytes=4096,
    )  # fmt: skip
    assert from_args(AdmissionSpec, parser().parse_args(to_flags(section))) == section
    help_text = parser().format_help()
    assert "--queue-timeout" in help_text and "(default 1024)" in help_text


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--max-queue", "-1"], "greater than or equal to 0"),
        (["--batch-reserve", "1"], "less than 1"),
        (["--capacity-factor", "nan"], "finite number"),
        (["--capacity-factor", "0"], "greater than 0"),
        (["--max-queue", "many"], "valid integer"),
        (["--admission", "maybe"], "invalid choice"),
        (["--default-priority", "urgent"], "invalid choice"),
    ],
)
def test_a_bad_flag_is_refused_with_the_fields_own_check(flags: list[str], message: str) -> None:
    with pytest.raises(argparse.ArgumentError) as error:
        parser().parse_args(flags)
    assert message in str(error.value) and flags[0] in str(error.value)


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gen_settings_doc", REPO / "scripts" / "gen_settings_doc.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docs_settings_md_is_generated_from_the_fields() -> None:
    text = load_script().render()
    assert (REPO / "docs" / "settings.md").read_text() == text, (
        "docs/settings.md is stale: run `python scripts/gen_settings_doc.py` and commit it"
    )
    assert "| `maxQueue` | `--max-queue` | `1024` | requests that may wait for admission |" in text
