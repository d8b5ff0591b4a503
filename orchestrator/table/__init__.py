"""The routing table: versioned, read-only snapshots of replicas and sites, and the holder a
router reads them from (fed by a replicas file here, or by the control plane's watch).

Layer 3: may import `core/`, `config/`, `fleet/` and `security/`; independent of its siblings
`sim/`, `engines/` and `exporters/`.
"""
