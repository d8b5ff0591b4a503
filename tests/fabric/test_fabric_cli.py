"""`orchestrator fault` as an operator meets it: clear errors without a stack, a bad node, kind or
duration; inject, list and clear edit the fault file the running simulator polls."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.fabric.faults import active_faults
from orchestrator.fabric.manifest import NodeEntry, StackManifest, write_manifest
from orchestrator.fabric.model import FaultKind


@pytest.fixture
def stack_root(tmp_path: Path) -> Path:
    """A fabric root as `up` leaves it, owned by this (live) process."""
    nodes = tuple(
        NodeEntry(name, "us", generation, f"ray-{name}", (f"{name}-r1",),
                  f"http://127.0.0.1:1/{name}", str(tmp_path / name))
        for name, generation in (("us-mi355x", "MI355X"), ("us-mi300x", "MI300X"))
    )  # fmt: skip
    write_manifest(tmp_path, StackManifest(os.getpid(), "127.0.0.1:1", nodes))
    return tmp_path


def fault(root: Path, *args: str) -> list[str]:
    return ["fault", *args, "--fabric-root", str(root)]


def test_inject_list_and_clear_drive_the_fault_file(
    stack_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(fault(stack_root, "inject", "--node", "us-mi355x", "--kind", "pfc-storm")) == 0
    assert "pfc-storm on us-mi355x (us-mi355x-r1) until cleared" in capsys.readouterr().out
    assert main(fault(stack_root, "inject", "--node", "us-mi355x", "--kind", "link-flap",
                      "--duration", "30")) == 0  # fmt: skip
    assert active_faults(stack_root, "us-mi355x", time.time()) == {
        FaultKind.PFC_STORM, FaultKind.LINK_FLAP,
    }  # fmt: skip
    assert active_faults(stack_root, "us-mi355x", time.time() + 31) == {FaultKind.PFC_STORM}

    assert main(fault(stack_root, "list")) == 0
    listing = capsys.readouterr().out
    assert "us-mi355x" in listing and "pfc-storm" in listing and "us-mi300x" in listing

    assert main(fault(stack_root, "clear", "--kind", "pfc-storm")) == 0
    assert "cleared pfc-storm on us-mi355x" in capsys.readouterr().out
    assert main(fault(stack_root, "clear")) == 0
    assert "cleared link-flap" in capsys.readouterr().out
    assert active_faults(stack_root, "us-mi355x", time.time()) == frozenset()
    assert main(fault(stack_root, "clear")) == 0
    assert "no matching fault" in capsys.readouterr().out


def test_an_unknown_node_is_refused_naming_the_nodes_there_are(
    stack_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(fault(stack_root, "inject", "--node", "kr-mi300x", "--kind", "pfc-storm")) == 2
    error = capsys.readouterr().err
    assert "unknown node 'kr-mi300x'" in error and "us-mi355x, us-mi300x" in error
    assert not (stack_root / "faults.json").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--kind", "fire"], "invalid choice: 'fire'"),
        (["--kind", "pfc-storm", "--duration", "0"], "must be > 0 seconds"),
        (["--kind", "pfc-storm", "--duration", "soon"], "must be a number of seconds"),
    ],
)
def test_a_bad_kind_or_duration_is_a_usage_error(
    stack_root: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(fault(stack_root, "inject", "--node", "us-mi355x", *args))
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.slow
def test_without_a_running_stack_it_says_so_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_manifest(tmp_path, StackManifest(_a_dead_pid(), "127.0.0.1:1", ()))
    for args in (["list"], ["clear"]):
        assert main(fault(tmp_path, *args)) == 1
        assert "no running stack" in capsys.readouterr().err
    result = subprocess.run(
        [sys.executable, "-m", "orchestrator", "fault", "inject", "--node", "n", "--kind",
         "cnp-surge", "--control-plane", "127.0.0.1:1"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert "no running stack with a simulated fabric for control plane 127.0.0.1:1" in (
        result.stderr
    )
    assert "Traceback" not in result.stderr


def _a_dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid
