"""The simulated engine: continuous batching on the fleet model, in live or virtual time, its
vLLM-compatible HTTP server and its calibration.

Layer 3: may import `core/`, `config/`, `fleet/` and `security/`; independent of its siblings
`engines/`, `table/` and `exporters/`.
"""
