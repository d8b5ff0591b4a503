"""Pure domain: generations, records, errors and their one HTTP/gRPC mapping, the clock, backoff
delays, the atomic file writer, the strict YAML reader and command-line argument types.

Layer 0: imports nothing of the project; no sockets, web framework, Ray, gRPC or Prometheus
client (import-linter holds it to that). Every other package may import it.
"""
