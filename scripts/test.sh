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
build=$(.venv/bin/python -W ignore -c 'import orchestrator; print(orchestrator.BUILD)')
echo "orchestrator build: $build" >&2
if [ -n "${ORCHESTRATOR_EXPECT_BUILD:-}" ] && [ "$build" != "$ORCHESTRATOR_EXPECT_BUILD" ]; then
  echo "expected the $ORCHESTRATOR_EXPECT_BUILD build, got: $build (pip install -e . -v shows why)" >&2
  exit 1
fi
echo "pytest ..." >&2
.venv/bin/python -m pytest -p no:cacheprovider "$@"
if [ "$build" = compiled ] && [ $# -eq 0 ]; then
  # A machine without a compiler installs the sources: the golden digests, the routing tests
  # and the router's framing, bad-input and fuzz tests from the sources too.
  echo "pytest, pure Python: the golden digests, tests/routing, the router's framing ..." >&2
  ORCHESTRATOR_PURE=1 .venv/bin/python -m pytest -p no:cacheprovider -q tests/routing \
    tests/bench/test_bench_sim_speed.py::test_a_small_fleet_makes_the_picks_and_results_it_always_made \
    tests/router/test_router_bad_input.py tests/router/test_router_fuzz.py \
    tests/router/test_router_http_framing.py tests/router/test_router_replica_framing.py
fi
