#!/usr/bin/env bash
# Installs everything the tests need, then runs the linters and the whole test suite.
# Extra arguments go to pytest (e.g. `scripts/test.sh -k batcher`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh test
echo "ruff ..." >&2
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "mypy, import layers ..." >&2
.venv/bin/mypy
.venv/bin/lint-imports --no-cache >/dev/null || .venv/bin/lint-imports --no-cache
echo "pytest ..." >&2
.venv/bin/python -m pytest -p no:cacheprovider "$@"
