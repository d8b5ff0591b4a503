"""The one atomic file writer: whole files, sysfs-like permissions, no temporary file left."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from orchestrator.core.files import atomic_write_text


def test_a_file_is_written_with_its_directories_world_readable_and_nothing_else_left(
    tmp_path: Path,
) -> None:
    target = tmp_path / "class/net/eth0/carrier_changes"
    atomic_write_text(target, "3\n")
    atomic_write_text(target, "4\n")
    assert target.read_text() == "4\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert [p.name for p in target.parent.iterdir()] == ["carrier_changes"]


def test_the_temporary_file_lives_in_the_scratch_directory_and_goes_on_failure(
    tmp_path: Path,
) -> None:
    scratch = tmp_path / ".scratch"
    scratch.mkdir()
    target = tmp_path / "sys/value"
    atomic_write_text(target, "1\n", scratch_dir=scratch)
    assert target.read_text() == "1\n" and list(scratch.iterdir()) == []
    with pytest.raises(TypeError):
        atomic_write_text(target, 5, scratch_dir=scratch)  # type: ignore[arg-type]
    assert target.read_text() == "1\n" and list(scratch.iterdir()) == []
