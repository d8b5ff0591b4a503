"""Virtual-time fleet simulation: Offline and Server scenarios over the real routing profiles,
fleet specs (`GEN:N` pools), efficiency and scale runs. Part of `bench/` (layer 11).
"""
