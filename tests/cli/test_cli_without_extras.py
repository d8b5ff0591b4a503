"""The main job's command line works with only what `scripts/up.sh` installs (base + `fast`).

Each case runs a fresh interpreter in which the optional extras' modules cannot be imported (as
on a machine that never installed `bench` or `test`), so nothing this process imported leaks in.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

OPTIONAL = ("mlperf_loadgen", "matplotlib", "openai", "hypothesis", "pytest")


def run_without_extras(code: str) -> subprocess.CompletedProcess[str]:
    blocker = "".join(f"sys.modules[{name!r}] = None\n" for name in OPTIONAL)
    script = "import sys\n" + blocker + textwrap.dedent(code)
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )


def test_the_main_jobs_commands_parse_and_import_no_benchmark_module() -> None:
    result = run_without_extras(
        """
        from orchestrator.cli import build_parser
        for argv in (["up"], ["status"], ["router", "--config", "r.yaml"], ["sim", "serve",
                     "--generation", "MI355X"]):
            build_parser(argv).parse_args(argv)
        loaded = sorted(name for name in sys.modules if name.startswith("orchestrator.bench"))
        print("loaded:", loaded)
        """
    )
    assert result.returncode == 0, result.stderr
    assert "loaded: []" in result.stdout


def test_help_lists_every_command_family_without_importing_them() -> None:
    result = run_without_extras(
        """
        from orchestrator.cli import main
        try:
            main(["--help"])
        except SystemExit as done:
            print("exit", done.code)
        print("cli modules:", sorted(n for n in sys.modules if n.startswith("orchestrator.cli.")))
        """
    )
    assert result.returncode == 0, result.stderr
    for command in ("up", "router", "status", "exporter", "fault", "bench", "simulate"):
        assert command in result.stdout
    assert "exit 0" in result.stdout
    assert "orchestrator.cli.bench" not in result.stdout
    assert "orchestrator.cli.exporter" not in result.stdout


def test_every_command_parses_in_full_without_the_extras() -> None:
    result = run_without_extras(
        """
        from orchestrator.cli import build_parser
        args = build_parser().parse_args(["bench", "loadgen", "--endpoint", "http://127.0.0.1:1",
                                          "--scenario", "server"])
        print(args.scenario, args.handler.__module__)
        """
    )
    assert result.returncode == 0, result.stderr
    assert "Server orchestrator.bench.loadgen.command" in result.stdout


def test_bench_loadgen_without_the_bench_extra_says_what_to_install_and_exits_2() -> None:
    result = run_without_extras(
        """
        from orchestrator.cli import main
        code = main(["bench", "loadgen", "--endpoint", "http://127.0.0.1:1", "--scenario",
                     "Offline", "--duration", "1"])
        print("exit", code)
        """
    )
    assert result.returncode == 0, result.stderr
    assert "exit 2" in result.stdout
    (line,) = result.stderr.strip().splitlines()  # one line, no traceback
    assert "`orchestrator bench` needs the optional 'bench' extra" in line
    assert "mlperf_loadgen is not installed" in line
    assert f"{sys.executable} -m pip install" in line
    assert "mlcommons-loadgen>=5.0" in line and "matplotlib>=3.8" in line


def test_a_missing_module_that_is_no_extra_still_raises() -> None:
    result = run_without_extras(
        """
        from orchestrator.cli.extras import missing_extra_message
        print(missing_extra_message(ModuleNotFoundError("x", name="yaml"), "up"))
        print(missing_extra_message(ModuleNotFoundError("x", name="matplotlib.pyplot"), "plan"))
        """
    )
    assert result.returncode == 0, result.stderr
    first, second = result.stdout.strip().splitlines()
    assert first == "None"
    assert "`orchestrator plan` needs the optional 'bench' extra" in second
