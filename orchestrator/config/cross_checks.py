"""The config's cross-field checks: RTTs that agree both ways and cover every pair of sites, pool
names and endpoints listed once, pools in known sites, one port per service.

They read raw input without trusting its shape, so the loader can run them on a document whose
fields are not all valid and report every problem at once; the models run them on themselves.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any, Final

from orchestrator.config.errors import ConfigProblem, field_path
from orchestrator.config.fields import (
    DEFAULT_CONTROL_PLANE_GRPC_PORT,
    DEFAULT_EXPORTER_PORT,
    DEFAULT_ROUTER_GRPC_PORT,
    DEFAULT_ROUTER_HTTP_PORT,
    DEFAULT_ROUTER_METRICS_PORT,
    MAX_PORT,
)


class ConfigProblems(ValueError):
    """Raised by a model's own cross-field checks; paths are relative to that model.

    The loader turns them into `ConfigProblem`s with full paths; a plain pydantic caller sees them
    joined in one `ValidationError` message.
    """

    def __init__(self, problems: list[ConfigProblem]) -> None:
        super().__init__("; ".join(str(problem) for problem in problems))
        self.problems = tuple(problems)


def _get(section: Mapping[Any, Any], alias: str, name: str, default: object = None) -> object:
    """A key in raw input, written either way (`httpPort` or `http_port`)."""
    if alias in section:
        return section[alias]
    return section.get(name, default)


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None


def cross_field_problems(raw: Mapping[Any, Any]) -> list[ConfigProblem]:
    """Problems that span fields, read from raw input without trusting its shape.

    The models run it on themselves once every field is valid; the loader also runs it on the raw
    document when some field is not, so one report lists every problem. Parts of the input that
    are malformed are skipped here (their own field check reports them).
    """
    problems: list[ConfigProblem] = []
    sites = raw.get("sites")
    site_names = (
        sorted(name for name in sites if isinstance(name, str))
        if isinstance(sites, Mapping)
        else None
    )
    if isinstance(sites, Mapping) and site_names is not None:
        problems += _rtt_problems(sites, site_names)
    pools = raw.get("pools")
    if isinstance(pools, list | tuple):
        problems += _pool_problems(pools, site_names)
    problems += _port_problems(raw)
    return problems


def _rtt_problems(sites: Mapping[Any, Any], names: list[str]) -> Iterator[ConfigProblem]:
    given: set[tuple[str, str]] = set()  # written down, valid or not
    rtts: dict[tuple[str, str], float] = {}
    readable: set[str] = set()  # sites whose RTT table is a mapping (or absent)
    for site in names:
        spec = sites[site] if sites[site] is not None else {}
        table = _get(spec, "rttMs", "rtt_ms", {}) if isinstance(spec, Mapping) else None
        if not isinstance(table, Mapping):
            continue
        readable.add(site)
        for other, value in table.items():
            path = field_path(("sites", site, "rttMs", other))
            given.add((site, other))
            if other == site:
                yield ConfigProblem(
                    path, "a site's RTT to itself is 0 by definition; remove this entry"
                )
            elif other not in names:
                yield ConfigProblem(
                    path, f"unknown site {other!r}; known sites: {', '.join(names)}"
                )
            elif (ms := _number(value)) is not None:
                rtts[(site, other)] = ms
    for i, site in enumerate(names):
        for other in names[i + 1 :]:
            there, back = rtts.get((site, other)), rtts.get((other, site))
            if there is not None and back is not None and there != back:
                yield ConfigProblem(
                    field_path(("sites", site, "rttMs", other)),
                    f"{there:g} ms here but {field_path(('sites', other, 'rttMs', site))} says"
                    f" {back:g} ms; a round trip takes the same time both ways",
                )
            elif (
                {site, other} <= readable
                and (site, other) not in given
                and (other, site) not in given
            ):
                yield ConfigProblem(
                    field_path(("sites", site, "rttMs")),
                    f"no RTT between sites {site!r} and {other!r}; give"
                    f" {field_path(('sites', site, 'rttMs', other))} (or"
                    f" {field_path(('sites', other, 'rttMs', site))}) in ms",
                )


def _pool_problems(
    pools: list[Any] | tuple[Any, ...], sites: list[str] | None
) -> Iterator[ConfigProblem]:
    first_named: dict[str, int] = {}
    first_endpoint: dict[str, str] = {}
    for i, pool in enumerate(pools):
        if not isinstance(pool, Mapping):
            continue
        name = pool.get("name")
        if isinstance(name, str):
            if name in first_named:
                yield ConfigProblem(
                    f"pools[{i}].name",
                    f"duplicate pool name {name!r} (first at pools[{first_named[name]}])",
                )
            else:
                first_named[name] = i
        site = pool.get("site")
        if sites is not None and isinstance(site, str) and site and site not in sites:
            known = ", ".join(sites) or "none"
            yield ConfigProblem(
                f"pools[{i}].site", f"unknown site {site!r}; known sites (under sites): {known}"
            )
        endpoints = pool.get("endpoints")
        if not isinstance(endpoints, list | tuple):
            continue
        for j, url in enumerate(endpoints):
            if not isinstance(url, str):
                continue
            path = f"pools[{i}].endpoints[{j}]"
            key = url.rstrip("/")
            if key in first_endpoint:
                yield ConfigProblem(
                    path, f"endpoint {url!r} is listed twice (first at {first_endpoint[key]})"
                )
            else:
                first_endpoint[key] = path


_PORTS: Final = (
    ("router", "httpPort", "http_port", DEFAULT_ROUTER_HTTP_PORT),
    ("router", "grpcPort", "grpc_port", DEFAULT_ROUTER_GRPC_PORT),
    ("router", "metricsPort", "metrics_port", DEFAULT_ROUTER_METRICS_PORT),
    ("controlPlane", "grpcPort", "grpc_port", DEFAULT_CONTROL_PLANE_GRPC_PORT),
    ("controlPlane", "httpSdPort", "http_sd_port", None),
    ("exporters", "port", "port", DEFAULT_EXPORTER_PORT),
)
_SECTION_NAMES: Final = {"controlPlane": "control_plane"}


def _port_problems(raw: Mapping[Any, Any]) -> Iterator[ConfigProblem]:
    taken: dict[int, str] = {}
    for section_key, alias, name, default in _PORTS:
        section = _get(raw, section_key, _SECTION_NAMES.get(section_key, section_key), {})
        if section is None:
            section = {}
        if not isinstance(section, Mapping):
            continue
        port = _get(section, alias, name, default)
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= MAX_PORT:
            continue
        path = f"{section_key}.{alias}"
        if port in taken:
            yield ConfigProblem(
                path, f"port {port} is also {taken[port]}; every service needs its own port"
            )
        else:
            taken[port] = path
