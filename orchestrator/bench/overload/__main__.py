"""`python -m orchestrator.bench.overload`."""

import os

from orchestrator.bench.overload.command import main

os.environ.setdefault("PYTHONHASHSEED", "0")
raise SystemExit(main())
