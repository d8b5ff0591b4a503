#!/usr/bin/env bash
# Installs the project into ./.venv (created if missing). Usage: scripts/install.sh [EXTRAS]
# e.g. `scripts/install.sh test`. Safe to run again: pip skips what is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x .venv/bin/python ]; then
  if ! python3 -m venv .venv 2>/dev/null; then
    echo "python3 -m venv failed; installing Debian's python3-venv" >&2
    rm -rf .venv
    apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
    python3 -m venv .venv
  fi
fi

extras=${1:-}
target="."
[ -n "$extras" ] && target=".[$extras]"
echo "installing orchestrator${extras:+ with [$extras]} into .venv ..." >&2
.venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip
.venv/bin/python -m pip install -q --disable-pip-version-check -e "$target"
