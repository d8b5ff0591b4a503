"""The one error mapping every HTTP server here shares: status <-> canonical code, and what a
handler's unexpected exception becomes."""

from __future__ import annotations

import logging

import pytest

from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.core.openai_errors import HTTP_STATUS, code_of_status, openai_error, served_error


def test_every_code_reads_back_from_its_own_status() -> None:
    for code in ErrorCode:
        status, _ = openai_error(OrchestratorError(code, "x"))
        assert code_of_status(status) is code
    assert set(HTTP_STATUS) == set(ErrorCode)


@pytest.mark.parametrize(
    ("status", "code"),
    [(408, ErrorCode.INVALID_ARGUMENT), (431, ErrorCode.INVALID_ARGUMENT),
     (501, ErrorCode.UNAVAILABLE), (520, ErrorCode.UNAVAILABLE)],
)  # fmt: skip
def test_a_status_the_table_lacks_is_the_clients_when_4xx_else_the_servers(
    status: int, code: ErrorCode
) -> None:
    assert code_of_status(status) is code


def test_a_canonical_error_is_answered_as_it_is_and_nothing_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    error = OrchestratorError(ErrorCode.NOT_FOUND, "no such response", param="id")
    assert served_error(error, method="GET", path="/v1/responses/x") is error
    assert not caplog.records


def test_an_unexpected_exception_is_internal_logged_with_method_and_path_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR)
    prompt = "".join(("sec", "ret prompt text"))  # request data, as a handler would hold it
    try:
        raise KeyError(prompt)
    except KeyError as raised:
        error = served_error(raised, method="POST", path="/v1/chat/completions")
    assert (error.code, error.message) == (ErrorCode.INTERNAL, "internal server error")
    (record,) = caplog.records
    logged = logging.Formatter().format(record)  # as a handler writes it, stack included
    assert logged.startswith("unhandled KeyError serving POST /v1/chat/completions\n")
    assert "test_core_openai_errors.py" in logged  # where it was raised
    assert "secret" not in logged  # the message may quote the request: never logged
    status, body = openai_error(error)
    assert status == 500 and "secret" not in str(body)
