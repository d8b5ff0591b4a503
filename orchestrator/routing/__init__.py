"""Routing decisions: request context, filters, scorers, pickers, profiles, capacity estimation.

Pure: nothing here does I/O. The frontends build a `RequestContext`, the profile turns the
candidates into a `Decision`, and the forwarder carries it out.

Layer 5: may import `core/`, `config/`, `fleet/`, `table/` and the other layers below it; no
sockets, web framework, Ray or gRPC (import-linter holds it to that).
"""
