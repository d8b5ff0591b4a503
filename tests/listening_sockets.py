"""Which TCP addresses a process listens on, read from /proc (no extra package)."""

from __future__ import annotations

import ipaddress
import os
import socket
from pathlib import Path

_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's state column


def _address(hex_address: str, family: int) -> tuple[str, int]:
    host, port = hex_address.split(":")
    raw = bytes.fromhex(host)
    # The kernel prints each 32-bit word in host (little-endian) order.
    raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return socket.inet_ntop(family, raw), int(port, 16)


def listening_by_inode() -> dict[int, tuple[str, int]]:
    """Every listening TCP socket of this network namespace: inode -> (address, port)."""
    found: dict[int, tuple[str, int]] = {}
    for name, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        path = Path("/proc/net") / name
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == _LISTEN:
                found[int(fields[9])] = _address(fields[1], family)
    return found


def socket_inodes(pid: int) -> set[int]:
    """The inodes of the sockets `pid` holds open (empty when it is gone)."""
    inodes = set()
    try:
        descriptors = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return set()
    for descriptor in descriptors:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{descriptor}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[len("socket:[") : -1]))
    return inodes


def listening_addresses(pid: int) -> list[tuple[str, int]]:
    """The (address, port) pairs `pid` listens on."""
    listening = listening_by_inode()
    return [listening[inode] for inode in socket_inodes(pid) if inode in listening]


def is_loopback(address: str) -> bool:
    """127.0.0.0/8, ::1, or 127.x as an IPv4-mapped IPv6 address; `::` and `0.0.0.0` are not."""
    parsed = ipaddress.ip_address(address)
    if isinstance(parsed, ipaddress.IPv6Address) and parsed.ipv4_mapped is not None:
        parsed = parsed.ipv4_mapped
    return parsed.is_loopback
