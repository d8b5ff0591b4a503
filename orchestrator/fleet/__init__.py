"""The capacity model: what one GPT-OSS-120B replica sustains on each GPU generation (roofline
step costs, KV capacity, the MLPerf figures of `data/calibration.yaml`, the workload).

Layer 1, pure: may import `core/` only; no sockets, web framework, Ray or gRPC.
"""
