"""Build hook: compiles the simulation's and the router's hot modules with mypyc, when it can.

Everything else about the package is in pyproject.toml. The modules in
`orchestrator/_compiled.py` (`COMPILED_MODULES`) are compiled to C extensions beside their
sources; Python code is unchanged and the sources stay the reference (docs/compiled.md).

The build is opt-out and never fatal: with ORCHESTRATOR_PURE=1 set, without mypyc, or when
compiling fails (no C compiler, no Python headers), the package installs as pure Python.
A build that did compile records a digest of the sources it compiled in
`orchestrator/_compiled_sources.txt`; at import, a tree whose sources no longer match (an edit
after `pip install -e`) loads every compiled module from its source instead
(orchestrator/__init__.py).
"""

from __future__ import annotations

import hashlib
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path
from typing import Any

from setuptools import setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "orchestrator"))
import _compiled  # noqa: E402  (orchestrator/_compiled.py, read without importing the package)

del sys.path[0]
GROUP = "orchestrator_native"  # the shared library of all compiled modules: {GROUP}__mypyc.*.so
BUILD_COMMANDS = {"build", "build_ext", "bdist_wheel", "editable_wheel", "develop", "install"}


def _note(message: str) -> None:
    print(f"orchestrator build: {message}", file=sys.stderr)


class _BuildExtOrPure(build_ext):
    """Builds the mypyc extensions; if any fails, removes what was built and goes on without."""

    def run(self) -> None:
        record = ROOT / _compiled.SOURCES_RECORD
        record.unlink(missing_ok=True)
        if self.inplace:
            _remove_in_tree_extensions(keep=set(_compiled.COMPILED_MODULES))
        try:
            super().run()
        except Exception as error:  # a failed compile means a pure install
            _note(f"compiling failed ({error}); installing pure Python")
            self._remove_outputs()
            return
        digest = f"{_compiled.sources_digest(ROOT)}\n{_build_tag()}\n"
        if self.inplace:  # the extensions lie beside the sources (an editable install)
            record.write_text(digest)
        in_wheel = Path(self.build_lib) / _compiled.SOURCES_RECORD
        if not self.inplace and in_wheel.parent.is_dir():
            in_wheel.write_text(digest)
        _note(f"compiled {len(_compiled.COMPILED_MODULES)} modules with mypyc")

    def _remove_outputs(self) -> None:
        for ext in self.extensions:
            for base in (Path(self.build_lib), ROOT):
                (base / self.get_ext_filename(ext.name)).unlink(missing_ok=True)


def _remove_in_tree_extensions(keep: set[str] | None = None) -> None:
    """A pure build leaves no extension of an earlier compiled one in the source tree, and a
    compiled one none of a module it no longer compiles (`keep`: the modules it does)."""
    (ROOT / _compiled.SOURCES_RECORD).unlink(missing_ok=True)
    suffixes = tuple(EXTENSION_SUFFIXES)
    if keep is None:
        for suffix in suffixes:
            (ROOT / f"{GROUP}__mypyc{suffix}").unlink(missing_ok=True)
    for path in (ROOT / "orchestrator").rglob("*"):  # modules compiled by any earlier build too
        suffix = next((s for s in suffixes if path.name.endswith(s)), None)
        if suffix is None:
            continue
        module = ".".join(path.relative_to(ROOT).parts)[: -len(suffix)]
        if keep is None or module not in keep:
            path.unlink(missing_ok=True)


def _build_tag() -> str:
    """What else the extensions depend on: the interpreter's ABI, mypyc's version and the build's
    own files (a change to the build requirements or to this hook builds again)."""
    try:
        from mypy.version import __version__ as mypy_version
    except ImportError:
        mypy_version = "none"
    build_files = hashlib.blake2b(digest_size=8)
    for name in ("setup.py", "pyproject.toml"):
        build_files.update((ROOT / name).read_bytes())
    return f"{EXTENSION_SUFFIXES[0]} mypy {mypy_version} build {build_files.hexdigest()}"


def _in_tree_up_to_date() -> bool:
    record = ROOT / _compiled.SOURCES_RECORD
    if not (record.exists() and _compiled.compiled_complete(ROOT)):
        return False
    return record.read_text().split("\n")[:2] == [_compiled.sources_digest(ROOT), _build_tag()]


def _ext_modules() -> list[Any]:
    commands = set(sys.argv[1:])
    if not commands & BUILD_COMMANDS:
        return []  # metadata only (egg_info, dist_info): mypyc runs once, for the build
    if _compiled.pure_requested():
        _note(f"{_compiled.PURE_ENV} is set; installing pure Python")
    elif "editable_wheel" in commands and _in_tree_up_to_date():
        _note("the compiled modules beside the sources are up to date; not compiling again")
        return []
    else:
        try:
            from mypyc.build import mypycify
        except ImportError:
            _note("mypyc is not installed; installing pure Python")
        else:
            paths = [_compiled.source_path(name) for name in _compiled.COMPILED_MODULES]
            try:
                # The build environment lacks most runtime dependencies, so modules the compiled
                # ones import (not compiled themselves) may not type-check there: silent. A cache
                # of its own: the dev tree's .mypy_cache knows every dependency, a fresh clone none,
                # and the two builds must come out alike.
                flags = ["--follow-imports=silent", "--cache-dir=build/mypyc-cache"]
                return list(mypycify([*flags, *paths], opt_level="3", group_name=GROUP))
            except BaseException as error:  # mypy exits on a type error
                _note(f"mypyc could not translate the modules ({error!r}); installing pure Python")
    _remove_in_tree_extensions()
    return []


setup(ext_modules=_ext_modules(), cmdclass={"build_ext": _BuildExtOrPure})
