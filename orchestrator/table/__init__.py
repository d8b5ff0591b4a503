"""The routing table: versioned, read-only snapshots of replicas and sites, and their sources."""
