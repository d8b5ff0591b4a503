"""The stall bound judges the replica, not the client: bytes that arrived and wait to be read
(a slow client holds the relay back) are no stall; silence from the replica is."""

from __future__ import annotations

import asyncio

from orchestrator.forwarding.stream_relay import UpstreamStalled, _StallWatch
from orchestrator.forwarding.upstream import UpstreamError


class Response:
    """What the watch reads of a response: whether bytes wait unread, and how it is failed."""

    def __init__(self) -> None:
        self.unread = False
        self.failed: list[UpstreamError] = []

    def fail(self, error: UpstreamError) -> None:
        self.failed.append(error)


def test_unread_bytes_are_no_stall_and_silence_after_them_is() -> None:
    async def scenario() -> tuple[int, list[UpstreamError]]:
        response = Response()
        response.unread = True  # the replica sent; the client is slow to take it
        watch = _StallWatch(response, 0.05)  # type: ignore[arg-type]
        await asyncio.sleep(0.2)
        while_unread = len(response.failed)
        response.unread = False  # read at last; from now on the replica is silent
        await asyncio.sleep(0.2)
        watch.cancel()
        return while_unread, response.failed

    while_unread, failed = asyncio.run(scenario())
    assert while_unread == 0
    assert len(failed) == 1 and isinstance(failed[0], UpstreamStalled)
