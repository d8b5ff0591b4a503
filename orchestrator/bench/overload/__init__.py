"""Overload: a real router in front of time-scaled simulated replicas, offered more than the fleet
can serve, with admission control on and off side by side, and a priorities run.

    python -m orchestrator.bench.overload [--duration 60] [--load 3] [--replicas 2]

The fleet's capacity is the sum of the replicas' capacity priors (the fleet model's MLPerf Server
figure for the generation, divided by the time scale: output tokens/s within the latency
targets), and the request rate at capacity is that over the tokens each request asks for. Load is
open-loop (Poisson arrivals at `--load` × that rate), every request streamed, its output length
drawn uniformly from half to one and a half times `--output-tokens`. A request is *good*
when it got 200, all its tokens and its first token within the TTFT target; goodput is good
requests' output tokens per second over the run. Refused requests are timed to their 429. The
router runs in its own process; its RSS is sampled every half second. Requests still running
`--drain` seconds after the offered load stops are cancelled and counted as unfinished.

The priorities run offers `--priority-load` × capacity with half the requests `X-Priority: batch`.
Every process it starts (replicas, router) listens on loopback and is stopped at the end.

Its rooms: `fleet` (the fleet and the load offered), `outcomes` (what each request got),
`processes` (replicas and router as child processes), `load` (the open-loop client and a run),
`command` (the tables and the command line). Imports below `bench/` only, like every benchmark.
"""
