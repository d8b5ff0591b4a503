"""A site behind its own network namespace, joined to the host by a veth pair on a private /30,
so a test can cut it off (link down: packets silently dropped, as in a real partition) and
restore it.

Needs root and `ip` (iproute2). `require_netns()` checks early and fails loudly with the reason
when namespaces cannot be made here; it never skips.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence

import pytest


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=10)


def require_netns() -> None:
    """Fail the test (not skip) when a namespace and a veth pair cannot be made here."""
    probe = f"orch-probe-{os.getpid()}"
    try:
        made = _ip("netns", "add", probe, check=False)
    except FileNotFoundError:
        pytest.fail("the partition test needs `ip` (iproute2): not installed", pytrace=False)
    if made.returncode != 0:
        pytest.fail(
            f"the partition test needs network namespaces (root, CAP_NET_ADMIN): `ip netns add` "
            f"failed: {made.stderr.strip()}",
            pytrace=False,
        )
    _ip("netns", "del", probe, check=False)


class SiteNamespace:
    """Namespace `name` with one veth pair: `host_address` on the host end, `site_address` inside.

    Both ends are /30 addresses in 10.213.<subnet>.0/30. `cut()` sets the site's end down: the
    host keeps its route, so packets to the site are dropped without an answer (connects time
    out, open streams stall), the way a partitioned fabric behaves. `restore()` brings it back.
    """

    def __init__(self, tag: str, subnet: int) -> None:
        self.name = f"orch-{tag}-{os.getpid()}"
        short = f"{os.getpid() % 100000}"
        self.host_link = f"oh{tag[:4]}{short}"[:15]
        self.site_link = f"os{tag[:4]}{short}"[:15]
        self.host_address = f"10.213.{subnet}.1"
        self.site_address = f"10.213.{subnet}.2"
        self._made = False

    def create(self) -> SiteNamespace:
        _ip("netns", "add", self.name)
        self._made = True
        _ip("link", "add", self.host_link, "type", "veth", "peer", "name", self.site_link)
        _ip("link", "set", self.site_link, "netns", self.name)
        _ip("addr", "add", f"{self.host_address}/30", "dev", self.host_link)
        _ip("link", "set", self.host_link, "up")
        self.run_ip("addr", "add", f"{self.site_address}/30", "dev", self.site_link)
        self.run_ip("link", "set", self.site_link, "up")
        self.run_ip("link", "set", "lo", "up")
        return self

    def run_ip(self, *args: str) -> None:
        _ip("-n", self.name, *args)

    def command(self, argv: Sequence[str]) -> list[str]:
        """`argv` run inside the namespace (`ip netns exec` execs it: the pid is the command's)."""
        return ["ip", "netns", "exec", self.name, *argv]

    def cut(self) -> None:
        self.run_ip("link", "set", self.site_link, "down")

    def restore(self) -> None:
        self.run_ip("link", "set", self.site_link, "up")

    def delete(self) -> None:
        if not self._made:
            return
        _ip("link", "del", self.host_link, check=False)
        _ip("netns", "del", self.name, check=False)
        self._made = False
