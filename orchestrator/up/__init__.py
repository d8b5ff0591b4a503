"""Running the stack: `orchestrator up`, the control-plane process and the operator's commands."""
