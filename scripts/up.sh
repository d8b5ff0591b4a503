#!/usr/bin/env bash
# Installs orchestrator and runs the main job: `orchestrator up`, the whole stack on this machine
# (a local Ray cluster, MI300X and MI355X pools of simulated replicas in sites kr and us, the control
# plane on :50052, a router on http://127.0.0.1:8000 and gRPC :50051). Ctrl-C stops all of it.
# Extra arguments go to `orchestrator up` (e.g. `--config my-pools.yaml`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh fast
exec .venv/bin/orchestrator up "$@"
