"""Bench tests import their helpers (and tests/live's) by module name."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).parent
for folder in (HERE, HERE.parent / "live"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
