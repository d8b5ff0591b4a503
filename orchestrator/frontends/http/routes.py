"""The router's route table: method and path to a handler, with what the connection must check
from the head before it reads a body.

Paths are exact (`/v1/models`) or have `{name}` segments (`/v1/responses/{id}/cancel`), whose
values reach the handler in `Request.params`. A route marked `keyed` runs the table's
`check_head` on the head's fields first (the API key); it raises an `OrchestratorError` to refuse
the request before its body is read, or returns the identity the handler gets.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Final

from orchestrator.frontends.http.messages import Answer, Request, StreamAnswer

Handler = Callable[[Request], Awaitable[Answer | StreamAnswer]]
HeadCheck = Callable[[Mapping[str, str]], object]
MAX_PATH_SEGMENTS: Final = 16


@dataclass(frozen=True, slots=True)
class Route:
    """`reads_body` False: a body sent anyway is read and dropped (bounded by the body limit).
    `counted`: the answer's status is counted in the router's request metrics."""

    method: str
    path: str
    handler: Handler
    keyed: bool = False
    reads_body: bool = False
    counted: bool = False


@dataclass(frozen=True, slots=True)
class Match:
    """A route for a request's method and path, with the values of its `{name}` segments."""

    route: Route
    params: Mapping[str, str] = field(default_factory=dict)


class NoRoute(Exception):
    """No route serves the path (`allowed` empty) or not with this method (`allowed` says which
    methods would do)."""

    def __init__(self, allowed: tuple[str, ...]) -> None:
        super().__init__(", ".join(allowed))
        self.allowed = allowed


def _no_check(_: Mapping[str, str]) -> object:
    return None


class RouteTable:
    """Routes by exact path first (one dict lookup on the hot path), then by pattern."""

    def __init__(self, check_head: HeadCheck = _no_check) -> None:
        self.check_head = check_head
        self._exact: dict[str, dict[str, Match]] = {}
        self._patterns: list[tuple[tuple[str, ...], dict[str, Route]]] = []

    def add(self, route: Route) -> None:
        if "{" in route.path:
            segments = tuple(route.path.strip("/").split("/"))
            for pattern, methods in self._patterns:
                if pattern == segments:
                    methods[route.method] = route
                    return
            self._patterns.append((segments, {route.method: route}))
        else:
            self._exact.setdefault(route.path, {})[route.method] = Match(route)

    def match(self, method: str, path: str) -> Match:
        """The route for `method` and `path`; raises `NoRoute`."""
        methods = self._exact.get(path)
        if methods is not None:
            found = methods.get(method)
            if found is not None:
                return found
            raise NoRoute(tuple(sorted(methods)))
        segments = path.strip("/").split("/", MAX_PATH_SEGMENTS)
        allowed: set[str] = set()
        for pattern, by_method in self._patterns:
            params = _bind(pattern, segments)
            if params is None:
                continue
            route = by_method.get(method)
            if route is not None:
                return Match(route, params)
            allowed.update(by_method)
        raise NoRoute(tuple(sorted(allowed)))


def _bind(pattern: tuple[str, ...], segments: list[str]) -> dict[str, str] | None:
    if len(pattern) != len(segments):
        return None
    params: dict[str, str] = {}
    for want, got in zip(pattern, segments, strict=True):
        if want.startswith("{") and want.endswith("}"):
            if not got:
                return None
            params[want[1:-1]] = got
        elif want != got:
            return None
    return params
