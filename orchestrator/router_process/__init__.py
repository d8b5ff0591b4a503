"""The router as a process of cluster mode: what every Helm router pod (and the router
`orchestrator up` starts) runs, a router following the control plane's routing table.

Above `frontends/` and `controlplane/` (it joins the HTTP/gRPC servers to the watch client) and
below `bench/`; imports nothing from `bench/`, `monitoring/`, `up/` or `cli/`.
"""
