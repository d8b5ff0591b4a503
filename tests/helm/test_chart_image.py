"""The image: the chart's default commands exist in the image's CLIs (the orchestrator's argparse
parser and Ray's `ray start`), and the Dockerfile builds that image as the user the chart runs."""

from __future__ import annotations

import re
import shlex

import pytest
from chart import ROOT, render, value_sets

from orchestrator.cli import build_parser

VALUE_SETS = value_sets()


def commands(values: dict[str, object] | None) -> list[tuple[str, list[str]]]:
    """Every process a container starts, as argv. `sh -c SCRIPT ARG0 ARGS...` gives the commands
    of SCRIPT (split at `&&`; `exec "$0" "$@"` is ARG0 ARGS)."""
    found = []
    for label, template in render(values).pod_templates():
        for container in template["spec"]["containers"]:
            where = f"{label}/{container['name']}"
            command = [*container.get("command", ()), *container.get("args", ())]
            if not command:  # KubeRay writes the Ray containers' commands itself
                continue
            if command[:2] != ["/bin/sh", "-c"]:
                found.append((where, command))
                continue
            script, *argv = command[2:]
            for step in script.split("&&"):
                words = shlex.split(step)
                found.append((where, argv if words == ["exec", "$0", "$@"] else words))
    return found


@pytest.mark.parametrize(("name", "values"), VALUE_SETS, ids=[n for n, _ in VALUE_SETS])
def test_every_orchestrator_command_the_chart_runs_parses(
    name: str, values: dict[str, object] | None
) -> None:
    parser = build_parser()
    ran = set()
    for label, command in commands(values):
        if command[0] != "orchestrator":
            continue
        # $(NODE_NAME) is expanded by the kubelet from the pod's env before the process starts.
        argv = [arg.replace("$(NODE_NAME)", "gpu-node-1") for arg in command[1:]]
        args = parser.parse_args(argv)
        assert callable(args.handler), label
        ran.add(argv[0])
    assert {"control-plane", "router"} <= ran


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # raised by importing Ray's CLI
def test_every_ray_start_the_chart_runs_parses_with_rays_own_cli() -> None:
    from ray.scripts.scripts import start

    parsed = 0
    for label, command in commands(None):
        if command[:2] == ["ray", "start"]:
            context = start.make_context("start", list(command[2:]))
            # Ray's own pods block in `ray start`; the control plane's node runs in the
            # background while the control plane (exec'd next) holds the container.
            assert context.params["block"] is ("control-plane" not in label), label
            assert context.params["address"] or context.params["head"], label
            parsed += 1
    assert parsed == 4  # the head, the two default pools' workers and the control plane's node


def test_the_dockerfile_builds_the_cli_and_runs_as_the_charts_user() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    assert re.search(r"^USER 10001(:10001)?$", dockerfile, re.M)
    assert re.search(r"pip install[^\n]*--no-cache-dir", dockerfile)
    assert "orchestrator --help" in dockerfile, "the build checks the entry point"
    (container,) = render().named("Deployment", "llm-orchestrator-router")["spec"]["template"][
        "spec"
    ]["containers"]
    assert container["securityContext"]["runAsUser"] == 10001
    ignored = (ROOT / ".dockerignore").read_text(encoding="utf-8").split()
    assert {".venv", "tests", ".git"} <= set(ignored)
