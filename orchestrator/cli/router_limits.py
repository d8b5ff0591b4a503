"""The router's overload flags: admission control, priorities, slow-reader cap.

Generated from the `router.admission` section's fields (`config/admission.py`): one
declaration gives the config key, the flag, its default and help, and the docs table.
"""

from __future__ import annotations

import argparse

from orchestrator.admission.settings import AdmissionSettings
from orchestrator.config.admission import AdmissionLimits, AdmissionSpec
from orchestrator.config.flags import add_flags as add_model_flags
from orchestrator.config.flags import from_args


def add_flags(router: argparse.ArgumentParser) -> None:
    """Add the admission and slow-reader flags to `orchestrator router`."""
    add_model_flags(router, AdmissionSpec)


def admission_settings(args: argparse.Namespace) -> AdmissionSettings:
    limits = from_args(AdmissionLimits, args)
    return AdmissionSettings(**limits.model_dump())
