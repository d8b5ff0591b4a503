#!/usr/bin/env bash
# Installs orchestrator and runs the main job. Until the control plane lands (issue 4) the main job
# is one simulated MI355X replica of GPT-OSS-120B on http://127.0.0.1:8101; Ctrl-C stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh fast
exec .venv/bin/orchestrator sim serve --generation MI355X --port "${PORT:-8101}" "$@"
