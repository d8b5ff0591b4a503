"""Overload control in front of routing: admission against the fleet's capacity with priority
classes, and per-API-key limits. What cannot be served in time is refused at once (429)."""
