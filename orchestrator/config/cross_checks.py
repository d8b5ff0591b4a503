"""The config's cross-field checks: RTTs that agree both ways and cover every pair of sites, pool
names and endpoints listed once, pools in known sites, one port per service.

They read validated values only. The whole config runs them on itself; when some field of a
document is malformed, the loader runs them on the parts that still validate (`config/partial.py`),
so one report lists every problem. A value given as None there failed its own check, which reports
it; these checks skip it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Final, Protocol

from pydantic import BaseModel

from orchestrator.config.errors import ConfigProblem, field_path
from orchestrator.config.fields import MAX_PORT


class ConfigProblems(ValueError):
    """Raised by a model's own cross-field checks; paths are relative to that model.

    The loader turns them into `ConfigProblem`s with full paths; a plain pydantic caller sees them
    joined in one `ValidationError` message.
    """

    def __init__(self, problems: list[ConfigProblem]) -> None:
        super().__init__("; ".join(str(problem) for problem in problems))
        self.problems = tuple(problems)


class PoolFields(Protocol):
    """What the checks read of a pool: a `PoolSpec`, or what validated of a malformed one."""

    @property
    def name(self) -> str | None: ...

    @property
    def site(self) -> str | None: ...

    @property
    def endpoints(self) -> Sequence[str | None] | None: ...


# Site name -> its RTT table (other site -> ms); a table or an entry that is None did not validate.
RttTables = Mapping[str, Mapping[str, float | None] | None]

# The services' ports, by the section that holds them (as users write it) and the specs' fields.
_SERVICE_PORTS: Final = (
    ("router", ("http_port", "grpc_port", "metrics_port")),
    ("controlPlane", ("grpc_port", "http_sd_port")),
    ("exporters", ("port",)),
)


def service_ports(sections: Mapping[str, BaseModel | None]) -> Iterator[tuple[str, int | None]]:
    """`(path, port)` of every service port in the validated sections (a None section is skipped);
    unset ports come from the specs' own defaults."""
    for section, names in _SERVICE_PORTS:
        spec = sections.get(section)
        if spec is None:
            continue
        for name in names:
            alias = type(spec).model_fields[name].alias or name
            yield f"{section}.{alias}", getattr(spec, name)


def cross_field_problems(
    sites: RttTables | None,
    pools: Sequence[PoolFields | None],
    ports: Iterable[tuple[str, int | None]],
) -> list[ConfigProblem]:
    """Problems that span fields; `sites` is None when the sites did not validate at all, a pool
    is None where it did not, and `ports` come from `service_ports`."""
    problems: list[ConfigProblem] = []
    site_names = sorted(sites) if sites is not None else None
    if sites is not None:
        problems += _rtt_problems(sites, sorted(sites))
    problems += _pool_problems(pools, site_names)
    problems += _port_problems(ports)
    return problems


def _rtt_problems(sites: RttTables, names: list[str]) -> Iterator[ConfigProblem]:
    given: set[tuple[str, str]] = set()  # written down, valid or not
    rtts: dict[tuple[str, str], float] = {}
    readable: set[str] = set()  # sites whose RTT table validated as a mapping
    for site in names:
        table = sites[site]
        if table is None:
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
            elif value is not None:
                rtts[(site, other)] = value
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
    pools: Sequence[PoolFields | None], sites: list[str] | None
) -> Iterator[ConfigProblem]:
    first_named: dict[str, int] = {}
    first_endpoint: dict[str, str] = {}
    for i, pool in enumerate(pools):
        if pool is None:
            continue
        name = pool.name
        if name is not None:
            if name in first_named:
                yield ConfigProblem(
                    f"pools[{i}].name",
                    f"duplicate pool name {name!r} (first at pools[{first_named[name]}])",
                )
            else:
                first_named[name] = i
        site = pool.site
        if sites is not None and site and site not in sites:
            known = ", ".join(sites) or "none"
            yield ConfigProblem(
                f"pools[{i}].site", f"unknown site {site!r}; known sites (under sites): {known}"
            )
        for j, url in enumerate(pool.endpoints or ()):
            if url is None:
                continue
            path = f"pools[{i}].endpoints[{j}]"
            key = url.rstrip("/")
            if key in first_endpoint:
                yield ConfigProblem(
                    path, f"endpoint {url!r} is listed twice (first at {first_endpoint[key]})"
                )
            else:
                first_endpoint[key] = path


def _port_problems(ports: Iterable[tuple[str, int | None]]) -> Iterator[ConfigProblem]:
    taken: dict[int, str] = {}
    for path, port in ports:
        if port is None or not 1 <= port <= MAX_PORT:
            continue  # unset, or 0: any free port
        if port in taken:
            yield ConfigProblem(
                path, f"port {port} is also {taken[port]}; every service needs its own port"
            )
        else:
            taken[port] = path
