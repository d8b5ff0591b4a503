#!/usr/bin/env bash
# Installs everything the tests need, then runs the linters and the whole test suite.
# Extra arguments go to pytest (e.g. `scripts/test.sh -k batcher`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh test
# Debian packages the tests use for real: Prometheus and promtool (monitoring), iproute2 (the
# chaos suite's network namespaces). Installed once; skipped when already present.
if ! command -v promtool >/dev/null || ! command -v prometheus >/dev/null || ! command -v ip >/dev/null; then
  echo "installing Debian's prometheus and iproute2 ..." >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq --no-install-recommends prometheus iproute2 >/dev/null
fi
echo "ruff ..." >&2
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "mypy, import layers ..." >&2
.venv/bin/mypy
.venv/bin/lint-imports --no-cache >/dev/null || .venv/bin/lint-imports --no-cache
# Which code the tests run: "compiled" (mypyc, docs/compiled.md), "pure", or why compiled
# modules run from their sources. The suite passes either way; the speed figures need compiled.
.venv/bin/python -c 'import orchestrator; print("orchestrator build:", orchestrator.BUILD)' >&2
echo "pytest ..." >&2
.venv/bin/python -m pytest -p no:cacheprovider "$@"
