"""MLCommons LoadGen over our endpoint: a streaming SUT, a synthetic dataset, reports, and the
side-by-side run against the peer routers. Part of `bench/` (layer 11); imports `mlperf_loadgen`
only when a run starts.
"""
