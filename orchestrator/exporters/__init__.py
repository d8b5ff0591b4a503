"""Node exporter: collectors over a `SysfsRoot` for RoCE NICs and HBM, served as Prometheus text.

Everything reads a configurable root (the host's `/sys`, or a simulated tree) at scrape time, so
tests and the embedded stack point it at a directory they control.

Layer 3: may import `core/`, `config/`, `fleet/` and `security/`; independent of its siblings
`sim/`, `engines/` and `table/`.
"""
