"""An answered request leaves no reference cycle behind: the router worker runs its young
collection rarely (`GC_YOUNG_THRESHOLD`), on the promise that requests die by reference count.
A cycle per request (a closure holding the frame that holds it) made the collector walk and free
about ten objects per request, a few percent of a busy worker's CPU."""

from __future__ import annotations

import gc
import http.client
import json

from router_harness import MODEL, ReplicaEntry, echo_replica, running_router, wait_until

from orchestrator.admission.controller import UNLIMITED, Ticket
from orchestrator.forwarding.attempts import Attempt
from orchestrator.forwarding.upstream_response import UpstreamResponse

TEXT = "/v1/completions"


def post(url: str, body: dict) -> tuple[int, bytes]:
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        payload = json.dumps(body).encode()
        connection.request("POST", TEXT, payload, {"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def held() -> list[object]:
    """Request-path objects still alive: with the collector off, only cycles keep them."""
    kinds = (Attempt, Ticket, UpstreamResponse)
    return [o for o in gc.get_objects() if isinstance(o, kinds) and o is not UNLIMITED]


def test_whole_and_streamed_answers_are_freed_by_reference_count() -> None:
    with (
        echo_replica() as (_, server),
        running_router([ReplicaEntry("echo-0", server.url, engine="external")]) as router,
    ):
        whole = {"model": MODEL, "prompt": "hi", "max_tokens": 2}
        assert post(router.url, whole)[0] == 200  # connections and caches made before counting
        gc.collect()
        gc.disable()
        try:
            answers = [post(router.url, whole) for _ in range(5)]
            answers += [post(router.url, {**whole, "stream": True}) for _ in range(5)]
            # the worker may still be closing the last answer's books when the client has it
            freed = wait_until(lambda: not held(), timeout_s=3.0)
            left = [type(o).__name__ for o in held()]
        finally:
            gc.enable()

    assert [status for status, _ in answers] == [200] * 10
    assert b"[DONE]" in answers[-1][1]
    assert freed, f"answered requests are held by reference cycles: {left}"
