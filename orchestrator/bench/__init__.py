"""Benchmarks: printed figures, never timed assertions. LoadGen (`loadgen/`), the virtual-time
fleet simulation (`simulate/`), the capacity planner (`plan/`), overload (`overload/`) and one
module per measurement (router overhead, fleet scale, decision cost, exporter scrape...), with
the helpers they share: child processes (`processes`), `wrk` and first-byte probes (`wrk`),
process probes, the peers' tokenizer (`peers`).

Layer 11: may import every package up to `frontends/` and `controlplane/`; `monitoring/`,
`up/` and `cli/` may import it, never the other way. Its optional extras (LoadGen,
matplotlib) are imported only by the command that needs them.
"""
