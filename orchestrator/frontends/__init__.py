"""Frontends: the wire protocols clients speak (OpenAI HTTP, gRPC), each mapping errors once
(through `core.openai_errors` and `core.errors`).

Layer 10: may import `router_service` and everything below it, never `controlplane/` (its
sibling) or anything above.
"""
