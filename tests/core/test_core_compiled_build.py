"""The mypyc build's guard: compiled modules run only while they match their sources."""

from __future__ import annotations

import ast
import shutil
import sys
import warnings
from collections.abc import Iterator
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

import orchestrator
from orchestrator import _compiled

TREE = Path(orchestrator.__file__).resolve().parent.parent


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[Path]:
    """The compiled modules' sources, copied into a tree of their own."""
    for module in _compiled.COMPILED_MODULES:
        target = tmp_path / _compiled.source_path(module)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(TREE / _compiled.source_path(module), target)
    finders = list(sys.meta_path)
    yield tmp_path
    sys.meta_path[:] = finders  # what use_sources_if_stale put first goes again


def _fake_extension(tree: Path, module: str) -> None:
    stem = tree / module.replace(".", "/")
    stem.with_name(stem.name + EXTENSION_SUFFIXES[0]).write_bytes(b"")


def _fake_build(tree: Path) -> None:
    """An extension for every compiled module and the shared library, as a whole build."""
    for module in _compiled.COMPILED_MODULES:
        _fake_extension(tree, module)
    (tree / f"{_compiled.SHARED_LIBRARY}{EXTENSION_SUFFIXES[0]}").write_bytes(b"")


def _record(tree: Path, digest: str) -> None:
    (tree / _compiled.SOURCES_RECORD).write_text(f"{digest}\nsome build tag\n")


def _source_of(module: str) -> str | None:
    for finder in sys.meta_path:
        spec = finder.find_spec(module, None) if hasattr(finder, "find_spec") else None
        if spec is not None:
            return spec.origin
    return None


def test_a_tree_without_extensions_is_pure(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(_compiled.PURE_ENV, raising=False)
    assert _compiled.use_sources_if_stale(tree) == "pure"


def test_extensions_matching_their_sources_run(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(_compiled.PURE_ENV, raising=False)
    _fake_build(tree)
    _record(tree, _compiled.sources_digest(tree))
    before = list(sys.meta_path)
    assert _compiled.use_sources_if_stale(tree) == "compiled"
    assert sys.meta_path == before


def test_a_build_missing_its_shared_library_runs_the_sources(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the shared library every compiled module would fail to import."""
    monkeypatch.delenv(_compiled.PURE_ENV, raising=False)
    _fake_build(tree)
    _record(tree, _compiled.sources_digest(tree))
    for suffix in EXTENSION_SUFFIXES:
        (tree / f"{_compiled.SHARED_LIBRARY}{suffix}").unlink(missing_ok=True)
    with pytest.warns(RuntimeWarning):
        assert _compiled.use_sources_if_stale(tree) == "sources (stale build)"
    assert _source_of("orchestrator.sim.batcher") == str(tree / "orchestrator/sim/batcher.py")


def test_an_edit_to_a_module_that_is_not_compiled_makes_the_build_stale(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mypyc copies the `Final` constants a compiled module imports from any other module."""
    monkeypatch.delenv(_compiled.PURE_ENV, raising=False)
    constants = tree / "orchestrator/core/slo.py"
    constants.parent.mkdir(parents=True, exist_ok=True)
    constants.write_text("MLPERF_TPOT_S: Final = 0.080\n")
    _fake_build(tree)
    _record(tree, _compiled.sources_digest(tree))
    constants.write_text("MLPERF_TPOT_S: Final = 0.050\n")
    with pytest.warns(RuntimeWarning):
        assert _compiled.use_sources_if_stale(tree) == "sources (stale build)"


def test_an_edited_source_makes_every_compiled_module_load_from_source(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(_compiled.PURE_ENV, raising=False)
    _fake_extension(tree, "orchestrator.sim.batcher")
    _record(tree, _compiled.sources_digest(tree))
    with (tree / "orchestrator/routing/profile.py").open("a") as source:
        source.write("# an edit after the build\n")
    with pytest.warns(RuntimeWarning, match="do not match their sources"):
        assert _compiled.use_sources_if_stale(tree) == "sources (stale build)"
    for module in ("orchestrator.sim.batcher", "orchestrator.routing.profile"):
        assert _source_of(module) == str(tree / _compiled.source_path(module))


def test_an_extension_left_by_an_older_build_does_not_run_when_stale(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A module compiled once and no longer: its extension would shadow its source."""
    monkeypatch.delenv(_compiled.PURE_ENV, raising=False)
    leftover = tree / "orchestrator/routing/profiles.py"
    leftover.write_text("")
    _fake_extension(tree, "orchestrator.routing.profiles")
    with pytest.warns(RuntimeWarning):
        assert _compiled.use_sources_if_stale(tree) == "sources (stale build)"
    assert _source_of("orchestrator.routing.profiles") == str(leftover)


def test_a_build_without_its_record_is_stale(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(_compiled.PURE_ENV, raising=False)
    _fake_extension(tree, "orchestrator.bench.virtual_fleet")
    with pytest.warns(RuntimeWarning):
        assert _compiled.use_sources_if_stale(tree) == "sources (stale build)"


def test_orchestrator_pure_runs_the_sources_without_a_warning(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(_compiled.PURE_ENV, "1")
    _fake_extension(tree, "orchestrator.sim.batcher")
    _record(tree, _compiled.sources_digest(tree))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _compiled.use_sources_if_stale(tree) == "sources (ORCHESTRATOR_PURE)"
    assert _source_of("orchestrator.sim.batcher") == str(tree / "orchestrator/sim/batcher.py")


def test_every_compiled_module_has_its_source() -> None:
    assert all((TREE / _compiled.source_path(m)).is_file() for m in _compiled.COMPILED_MODULES)
    assert len(set(_compiled.COMPILED_MODULES)) == len(_compiled.COMPILED_MODULES)


def _except_names_of_two_classes(source: str) -> list[str]:
    """`except A as e` and `except B as e` in one function: compiled, `e` has A's type, so the
    second clause raises TypeError instead of handling B (mypyc types a name once per scope)."""
    found = []
    for function in ast.walk(ast.parse(source)):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        classes: dict[str, set[str]] = {}
        for node in ast.walk(function):
            if isinstance(node, ast.ExceptHandler) and node.name and node.type is not None:
                classes.setdefault(node.name, set()).add(ast.unparse(node.type))
        found += [f"{function.name}: as {n}" for n, c in classes.items() if len(c) > 1]
    return found


def test_the_check_for_shared_except_names_finds_one() -> None:
    shared = "def f():\n try: g()\n except KeyError as e: h(e)\n except OSError as e: h(e)\n"
    assert _except_names_of_two_classes(shared) == ["f: as e"]
    apart = shared.replace("OSError as e: h(e)", "OSError as gone: h(gone)")
    assert _except_names_of_two_classes(apart) == []


def test_no_compiled_function_binds_one_except_name_to_two_classes() -> None:
    found = {
        module: names
        for module in _compiled.COMPILED_MODULES
        if (
            names := _except_names_of_two_classes(
                (TREE / _compiled.source_path(module)).read_text()
            )
        )
    }
    assert found == {}


def _awaits_in_handlers(source: str) -> list[int]:
    """Lines of an `await` (or `async for`/`async with`) inside an `except` or `finally` block.
    Compiled, a coroutine suspended there leaves the exception it handles as the thread's, and
    a later coroutine's `finally` raised that stale exception: after a client hung up on a
    stream, the next stream's connection was closed once its answer was out."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Try | ast.TryStar):
            continue
        for block in [node.finalbody, *(handler.body for handler in node.handlers)]:
            for statement in block:
                lines += [
                    sub.lineno
                    for sub in ast.walk(statement)
                    if isinstance(sub, ast.Await | ast.AsyncFor | ast.AsyncWith)
                ]
    return lines


def test_the_check_for_awaits_in_handlers_finds_one() -> None:
    source = "async def f():\n try: await g()\n finally:\n  await h()\n"
    assert _awaits_in_handlers(source) == [4]
    assert _awaits_in_handlers(source.replace(" finally:\n  await h()", " finally:\n  h()")) == []


def test_no_compiled_coroutine_awaits_inside_except_or_finally() -> None:
    found = {}
    for module in _compiled.COMPILED_MODULES:
        source = (TREE / _compiled.source_path(module)).read_text(encoding="utf-8")
        if lines := _awaits_in_handlers(source):
            found[module] = lines
    assert found == {}
