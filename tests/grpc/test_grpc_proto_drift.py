"""The committed generated code in `orchestrator/_proto/` matches the contracts in `proto/`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
COMMITTED = REPO / "orchestrator" / "_proto"


def _files(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): p.read_text()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


@pytest.mark.timeout(120)
def test_regenerating_the_proto_code_changes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "_proto"
    subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gen_proto.py"), "--out", str(out)],
        check=True,
        capture_output=True,
        timeout=100,
    )
    fresh, committed = _files(out), _files(COMMITTED)
    hint = "run `python scripts/gen_proto.py` and commit orchestrator/_proto/"
    assert sorted(fresh) == sorted(committed), f"generated files differ: {hint}"
    stale = [name for name in fresh if fresh[name] != committed[name]]
    assert not stale, f"stale generated files {stale}: {hint}"


def test_every_generated_file_is_marked_as_generated() -> None:
    unmarked = [name for name, text in _files(COMMITTED).items() if "@generated" not in text]
    assert not unmarked
