"""API keys: read from a file (or a Kubernetes Secret mounted as one), kept only as SHA-256
digests, looked up by the presented key's digest, and re-read when the file changes.

One key per line, then optional limits, whitespace separated; blank lines and `#` comments are
skipped:

    sk-live-3f9a...        id=team-a rps=5 burst=10 tokens_per_s=2000 token_burst=20000 streams=8
    sha256:9f86d08188...   id=batch-pipeline streams=64

A line may give the key itself or `sha256:<hex digest>` of it, so the file need not hold secrets.
`id` names the key in metrics and logs (default `key-` and the digest's first 8 hex digits); the
key never appears there. A limit left out is unlimited; a burst must be at least 1 and comes
with its rate (`burst` with `rps`, `token_burst` with `tokens_per_s`). A presented key is
hashed and its digest looked up (`KeyRing`), so the cost does not grow with the number of keys
and no stored key is ever compared byte by byte with it. The file is stat'ed at most every
`reload_interval_s` on use; a changed file (mtime, size or inode, which also catches a Secret's
`..data` symlink swap) is re-read, and a file that no longer parses keeps the previous keys
(logged). A removed key is refused from the first request after that reload.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol

from orchestrator.core.errors import ErrorCode, OrchestratorError

log = logging.getLogger(__name__)

DEFAULT_RELOAD_INTERVAL_S: Final = 1.0
MAX_KEYS: Final = 100_000  # a keys file holding more is refused: per-key state stays bounded
_DIGEST_PREFIX: Final = "sha256:"
_BEARER: Final = "bearer "
_LIMIT_FIELDS: Final = {
    "rps": "requests_per_s",
    "burst": "request_burst",
    "tokens_per_s": "output_tokens_per_s",
    "token_burst": "output_token_burst",
    "streams": "max_streams",
}
_BURST_OF: Final = {"burst": "rps", "token_burst": "tokens_per_s"}  # burst field -> its rate


@dataclass(frozen=True, slots=True)
class KeyLimits:
    """A key's limits; None is unlimited. Bursts default to one second's worth (at least 1)."""

    requests_per_s: float | None = None
    request_burst: float | None = None
    output_tokens_per_s: float | None = None
    output_token_burst: float | None = None
    max_streams: int | None = None

    @property
    def limited(self) -> bool:
        return any(
            value is not None
            for value in (self.requests_per_s, self.output_tokens_per_s, self.max_streams)
        )


@dataclass(frozen=True, slots=True)
class ApiKey:
    """An accepted key as the router keeps it: its id, digest and limits."""

    key_id: str
    digest: bytes
    limits: KeyLimits


def digest_of(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


def _bad(source: str, line: int, problem: str) -> OrchestratorError:
    return OrchestratorError(
        ErrorCode.INVALID_ARGUMENT, f"{source} line {line}: {problem}", param="api_keys_file"
    )


def _limit(source: str, line: int, name: str, raw: str) -> float | int:
    try:
        value = int(raw) if name == "streams" else float(raw)
    except ValueError:
        raise _bad(source, line, f"`{name}` must be a number, got {raw[:20]!r}") from None
    if not value > 0:
        raise _bad(source, line, f"`{name}` must be > 0, got {raw[:20]!r}")
    if name in _BURST_OF and value < 1:
        # A bucket that can never hold one whole token would refuse every request.
        raise _bad(source, line, f"`{name}` must be >= 1, got {raw[:20]!r}")
    return value


def _check_bursts(source: str, line: int, given: set[str]) -> None:
    """A burst is the size of its rate's bucket: without the rate it would silently do nothing."""
    for burst, rate in _BURST_OF.items():
        if burst in given and rate not in given:
            raise _bad(source, line, f"`{burst}` needs `{rate}` on the same line")


def parse_keys(text: str, source: str) -> tuple[ApiKey, ...]:
    """The keys of a keys file's text; raises INVALID_ARGUMENT naming the line (never the key)."""
    keys: list[ApiKey] = []
    seen_ids: set[str] = set()
    for number, raw_line in enumerate(text.splitlines(), start=1):
        line = raw_line.strip()
        if not line or line.startswith("#"):
            continue
        secret, *fields = line.split()
        if secret.startswith(_DIGEST_PREFIX):
            try:
                digest = bytes.fromhex(secret[len(_DIGEST_PREFIX) :])
            except ValueError:
                digest = b""
            if len(digest) != hashlib.sha256().digest_size:
                raise _bad(source, number, "a `sha256:` entry needs 64 hex digits")
        else:
            digest = digest_of(secret)
        key_id = f"key-{digest.hex()[:8]}"
        limits: dict[str, float | int] = {}
        given: set[str] = set()
        for item in fields:
            name, sep, value = item.partition("=")
            if not sep:
                raise _bad(source, number, f"expected name=value after the key, got {name[:20]!r}")
            if name == "id":
                if not value or not value.isprintable() or len(value) > 64:
                    raise _bad(source, number, "`id` must be 1-64 printable characters")
                key_id = value
            elif name in _LIMIT_FIELDS:
                limits[_LIMIT_FIELDS[name]] = _limit(source, number, name, value)
                given.add(name)
            else:
                known = ", ".join(["id", *_LIMIT_FIELDS])
                raise _bad(source, number, f"unknown field {name[:20]!r}; known: {known}")
        _check_bursts(source, number, given)
        if key_id in seen_ids:
            raise _bad(source, number, f"key id {key_id!r} is used twice")
        seen_ids.add(key_id)
        keys.append(ApiKey(key_id, digest, KeyLimits(**limits)))  # type: ignore[arg-type]
        if len(keys) > MAX_KEYS:
            raise _bad(source, number, f"more than {MAX_KEYS} keys")
    return tuple(keys)


class KeyRing:
    """A fixed set of keys, found by digest: one hash and one lookup, however many keys there are.

    The lookup's timing can only say something about the presented key's SHA-256 digest, which
    tells nothing about a high-entropy key or any stored one. Of two lines with the same key,
    the later one counts.
    """

    def __init__(self, keys: Iterable[ApiKey]) -> None:
        self.keys = tuple(keys)
        self._by_digest = {key.digest: key for key in self.keys}

    def match(self, presented: str) -> ApiKey | None:
        return self._by_digest.get(digest_of(presented))


class KeyAuthority(Protocol):
    """The keys a router requires, whatever the transport (the HTTP frontend's `ApiKeys`).

    Both frontends authenticate through the one instance their `RouterService` holds, so a key
    is checked, reloaded and limited the same way over HTTP and gRPC.
    """

    def authenticate(self, authorization: str | None) -> ApiKey | None:
        """The accepted key an `Authorization: Bearer <key>` value carries, or None."""
        ...

    def on_reload(self, forget_except: Callable[[set[str]], None]) -> None:
        """Tell `forget_except` the key ids after each reload (to drop state of keys that left)."""
        ...


def bearer_token(authorization: str | None) -> str | None:
    """The key in an `Authorization: Bearer <key>` header, or None."""
    if authorization is None or authorization[: len(_BEARER)].lower() != _BEARER:
        return None
    token = authorization[len(_BEARER) :].strip()
    return token or None


class KeyFile:
    """A keys file followed on change; `ring()` is the current `KeyRing`.

    `on_reload` is told the ids of the keys after each successful reload (to drop state of
    keys that left).
    """

    def __init__(
        self,
        path: Path,
        *,
        reload_interval_s: float = DEFAULT_RELOAD_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self.reload_interval_s = reload_interval_s
        self._clock = clock
        self._signature = self._stat()
        self._ring = KeyRing(self._read())
        if not self._ring.keys:
            raise OrchestratorError(
                ErrorCode.INVALID_ARGUMENT,
                f"API keys file {path} holds no keys",
                param="api_keys_file",
            )
        self._checked_s = clock()
        self.reloads = 0
        self.on_reload: Callable[[set[str]], None] | None = None

    def ring(self) -> KeyRing:
        now_s = self._clock()
        if now_s - self._checked_s >= self.reload_interval_s:
            self._checked_s = now_s
            if self._stat() != self._signature:
                self.reload()
        return self._ring

    def reload(self) -> bool:
        """Re-read the file now; says whether the new keys took effect."""
        signature = self._stat()
        try:
            keys = self._read()
        except OrchestratorError as error:
            log.error("keeping the previous API keys: %s", error.message)
            return False
        self._signature = signature
        self._ring = KeyRing(keys)
        self.reloads += 1
        log.info("API keys reloaded from %s: %d keys", self.path, len(keys))
        if self.on_reload is not None:
            self.on_reload({key.key_id for key in keys})
        return True

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            info = os.stat(self.path)
        except OSError:
            return None
        return (info.st_mtime_ns, info.st_size, info.st_ino)

    def _read(self) -> tuple[ApiKey, ...]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except (OSError, UnicodeError) as error:
            raise OrchestratorError(
                ErrorCode.INVALID_ARGUMENT,
                f"cannot read API keys file {self.path}: "
                f"{getattr(error, 'strerror', None) or error}",
                param="api_keys_file",
            ) from None
        return parse_keys(text, str(self.path))
