"""How admission behaves: queue bound and timeout, priority handling, the off switch.

The fields, their defaults and checks are declared once, in `config/admission.py`
(`AdmissionLimits`); here the default class is the routing layer's `Priority`.
"""

from __future__ import annotations

from pydantic import Field

from orchestrator.config.admission import AdmissionLimits
from orchestrator.config.settings_model import CheckedSettings
from orchestrator.routing.context import Priority


class AdmissionSettings(AdmissionLimits, CheckedSettings):
    """`enabled` False admits everything at once (the dispatcher alone decides, as before).

    A request is admitted while the streams in progress stay below the fleet's estimated
    concurrent capacity times `capacity_factor`; otherwise it waits in a queue of at most
    `max_queue` requests for up to `queue_timeout_s` (real-time seconds, stretched by the
    router's latency scale like the latency targets). Batch requests are admitted only below
    `1 - batch_reserve` of the capacity, so interactive ones find room first, and a queued
    batch request is the one refused when an interactive request finds the queue full.
    `default_priority` is the class of a request that names none. A bad value raises
    INVALID_ARGUMENT naming the field.
    """

    default_priority: Priority = Field(  # type: ignore[assignment]
        default=Priority.INTERACTIVE,
        alias="defaultPriority",
        description="class of a request that names none",
    )
