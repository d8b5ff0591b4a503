"""The OpenAI-compatible HTTP frontend: request parsing for routing, API keys, the handlers and
their route table, the one server connection (llhttp, plaintext or TLS) and the multi-process
server. Part of `frontends/` (layer 10).
"""
