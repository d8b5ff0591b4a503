"""Canonical errors survive pickling (how Ray hands an actor's error to its caller) and map to one
gRPC status each."""

from __future__ import annotations

import pickle

import grpc
import pytest
from ray import cloudpickle

from orchestrator.core.errors import (
    GRPC_STATUS_NAME,
    ErrorCode,
    OrchestratorError,
    UnknownGenerationError,
)


@pytest.mark.parametrize("dumps", [pickle.dumps, cloudpickle.dumps], ids=["pickle", "cloudpickle"])
def test_an_error_comes_back_from_pickling_with_its_code_message_and_field(dumps: object) -> None:
    error = OrchestratorError(ErrorCode.NOT_FOUND, "no pool 'x'", param="pool")
    back = pickle.loads(dumps(error))  # type: ignore[operator]
    assert type(back) is OrchestratorError
    assert (back.code, back.message, back.param, str(back)) == (
        ErrorCode.NOT_FOUND,
        "no pool 'x'",
        "pool",
        "no pool 'x'",
    )


def test_a_subclass_with_its_own_constructor_comes_back_as_itself() -> None:
    error = UnknownGenerationError("MI999", ["MI300X", "MI355X"])
    back = pickle.loads(pickle.dumps(error))
    assert isinstance(back, UnknownGenerationError)
    assert isinstance(back, ValueError)
    assert back.raw == "MI999"
    assert back.code is ErrorCode.INVALID_ARGUMENT
    assert "MI300X, MI355X" in back.message


def test_every_canonical_code_names_a_real_grpc_status() -> None:
    assert set(GRPC_STATUS_NAME) == set(ErrorCode)
    statuses = {code: grpc.StatusCode[name] for code, name in GRPC_STATUS_NAME.items()}
    assert statuses[ErrorCode.UNAVAILABLE] is grpc.StatusCode.UNAVAILABLE
    assert statuses[ErrorCode.METHOD_NOT_ALLOWED] is grpc.StatusCode.UNIMPLEMENTED
    assert grpc.StatusCode.OK not in statuses.values()
