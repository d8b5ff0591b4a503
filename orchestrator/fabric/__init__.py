"""The fabric of the embedded stack: simulated node trees, injected faults, and node health."""
