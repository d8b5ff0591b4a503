"""The fabric of the embedded stack: simulated node trees, injected faults, counter-rate node
health (`health.py`, pure) and the reporter that sends it to the control plane.

Layer 4: may import the layers below it (`core/` ... the exporters and engines of layer 3);
`routing/` and everything above may import it.
"""
