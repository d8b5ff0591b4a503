"""The admission tests reuse the router tests' harness (real routers and replicas on loopback)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent / "router"))
