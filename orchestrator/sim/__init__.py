"""The simulated engine: continuous batching on the fleet model, in live or virtual time."""
