"""Replacing a file atomically, so a reader sees it whole before or after, never half written.

The fabric simulator and the fixture trees write sysfs-like files that exporters read while they
change; both use this one writer.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def atomic_write_text(
    path: Path, text: str, *, scratch_dir: Path | None = None, mode: int = 0o644
) -> None:
    """Write `text` to `path` (its directories created) through a temporary file and a rename.

    The temporary file lives in `scratch_dir` (same file system, outside the tree, so a reader
    listing a directory never sees one) or, by default, beside `path` as a dot file. `mode` is
    applied before the rename (default world-readable like sysfs, not mkstemp's 0600).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=scratch_dir or path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(handle, mode)
        with os.fdopen(handle, "w") as out:
            out.write(text)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise
