"""`RequestContext` writes its `__init__` out (compiled, the one dataclasses writes stays
interpreted): it must take the fields, in their order, with their defaults, and stay frozen.
(A compiled function's signature cannot be read with `inspect`: these call it.)"""

from __future__ import annotations

import dataclasses

import pytest

from orchestrator.routing.context import Priority, RequestContext


def test_fields_left_out_take_their_declared_defaults() -> None:
    ctx = RequestContext("m", 3)
    for field in dataclasses.fields(RequestContext)[2:]:
        assert getattr(ctx, field.name) == field.default, field.name
    assert [f.name for f in dataclasses.fields(RequestContext)][:2] == ["model", "prompt_tokens"]


def test_each_argument_lands_on_its_field_and_replace_and_equality_still_work() -> None:
    values = {
        "model": "m", "prompt_tokens": 7, "max_tokens": 9, "stream": True, "prefix_hash": 11,
        "priority": Priority.BATCH, "client_site": "us", "stored_response_id": "resp_1",
        "replica_id": "r-1", "background": True, "slo_class": "gold",
    }  # fmt: skip
    assert list(values) == [f.name for f in dataclasses.fields(RequestContext)]
    ctx = RequestContext(**values)
    assert {f.name: getattr(ctx, f.name) for f in dataclasses.fields(ctx)} == values
    positional = RequestContext(*values.values())  # the fields' order is the arguments'
    assert {f.name: getattr(positional, f.name) for f in dataclasses.fields(ctx)} == values
    assert positional == ctx
    moved = dataclasses.replace(ctx, replica_id="r-2")
    assert moved.replica_id == "r-2" and moved.model == "m" and ctx.replica_id == "r-1"
    assert hash(RequestContext("m", 1)) == hash(RequestContext("m", 1))
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.model = "other"  # type: ignore[misc]
