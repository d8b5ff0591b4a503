"""The router's overload flags: admission control, priorities, slow-reader cap, request size.

Generated from the `router.admission` and `router.http` sections' fields (`config/admission.py`,
`config/http.py`): one declaration gives the config key, the flag, its default and help, and
the docs table.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from orchestrator.admission.settings import AdmissionSettings
from orchestrator.config.admission import AdmissionLimits, AdmissionSpec
from orchestrator.config.flags import add_flags as add_model_flags
from orchestrator.config.flags import from_args
from orchestrator.config.http import HttpSpec, StreamBufferSpec

if TYPE_CHECKING:
    from orchestrator.frontends.http.auth import ApiKeys
    from orchestrator.frontends.http.settings import HttpSettings


def add_flags(router: argparse.ArgumentParser) -> None:
    """Add the admission, slow-reader and request-size flags to `orchestrator router`."""
    add_model_flags(router, AdmissionSpec)
    add_model_flags(router, HttpSpec)


def http_settings(args: argparse.Namespace, api_keys: ApiKeys | None) -> HttpSettings:
    """The HTTP front end's limits from the flags, with the API keys."""
    from orchestrator.frontends.http.settings import HttpSettings

    limits = {
        **from_args(HttpSpec, args).model_dump(),
        **from_args(StreamBufferSpec, args).model_dump(),
    }
    return HttpSettings(**limits, api_keys=api_keys)


def admission_settings(args: argparse.Namespace) -> AdmissionSettings:
    limits = from_args(AdmissionLimits, args)
    return AdmissionSettings(**limits.model_dump())
