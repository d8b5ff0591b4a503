"""Reading the API key out of gRPC call metadata: exactly one text `authorization` entry, a
bearer token in it, an accepted key; no keys configured means no check at all."""

from __future__ import annotations

import pytest

from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.frontends.grpc.auth import authorization_of, caller_key
from orchestrator.frontends.http.auth import ApiKeys

SECRET = "sk-metadata-test-42"


def test_the_one_text_authorization_entry_is_the_callers() -> None:
    assert authorization_of([("user-agent", "x"), ("authorization", "Bearer k")]) == "Bearer k"
    assert authorization_of(None) is None
    assert authorization_of([("x-api-key", "k")]) is None
    assert authorization_of([("authorization", "Bearer a"), ("authorization", "Bearer b")]) is None
    assert authorization_of([("authorization", b"Bearer k")]) is None


def test_a_router_without_keys_checks_nothing() -> None:
    assert caller_key(None, None) is None


@pytest.mark.parametrize(
    "metadata",
    [
        [],
        [("authorization", "Bearer sk-wrong")],
        [("authorization", SECRET)],  # not a bearer token
        [("authorization", "Bearer ")],
    ],
)
def test_a_call_without_an_accepted_key_is_unauthenticated_and_the_key_is_not_echoed(
    metadata: list[tuple[str, str]],
) -> None:
    with pytest.raises(OrchestratorError) as error:
        caller_key(ApiKeys([SECRET]), metadata)
    assert error.value.code is ErrorCode.UNAUTHENTICATED
    assert "sk-" not in error.value.message


def test_an_accepted_key_is_the_callers_key() -> None:
    key = caller_key(ApiKeys([SECRET]), [("authorization", f"Bearer {SECRET}")])
    assert key is not None and key.key_id.startswith("key-")
