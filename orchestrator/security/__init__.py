"""Transport security: certificate files, TLS contexts and gRPC credentials that follow rotation.

Layer 2: below the frontends, the control plane and forwarding, which all take what this package
builds; it may import `core/` (and `config/`, `fleet/`), needs only the standard library's `ssl`
and `grpc`, and reads files only when asked.
"""
