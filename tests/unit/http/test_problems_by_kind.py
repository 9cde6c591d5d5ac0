"""The one handler of feature errors (`from_problem`) renders each kind of `service.errors` as
the problem the routes used to build by hand (issue 28, item 4)."""

from __future__ import annotations

from typing import Any

from trainledger.errors import Conflict, Forbidden, Invalid, NotFound, Problem, Unavailable
from trainledger.http.problems import PROBLEM_BASE, from_problem


class _Missing(NotFound):
    def problem_detail(self) -> str:
        return "no thing 'x'"

    def problem_members(self) -> dict[str, Any]:
        return {"field": "thing_id"}


class _Query(Invalid):
    status = 400


class _Refused(Conflict):
    title = "Cannot do it"
    kind = "cannot"


def test_a_not_found_names_its_field() -> None:
    exc = from_problem(_Missing())
    assert (exc.status_code, exc.title, exc.detail) == (404, "Not found", "no thing 'x'")
    assert exc.type_ == PROBLEM_BASE + "not-found"
    assert exc.extra == {"field": "thing_id"}
    assert exc.headers is None


def test_an_invalid_request_names_the_field_and_the_reason() -> None:
    for error, status in ((Invalid("$.amount", "must be positive"), 422), (_Query("to", "x"), 400)):
        exc = from_problem(error)
        assert exc.status_code == status
        assert exc.title == "Invalid request"
        assert exc.type_ == PROBLEM_BASE + "invalid-request"
        assert exc.detail == f"{error.field}: {error.reason}"
        assert exc.extra == {"errors": [{"field": error.field, "reason": error.reason}]}


def test_a_conflict_a_forbidden_and_a_busy() -> None:
    refused = from_problem(_Refused("the state says no"))
    assert (refused.status_code, refused.title, refused.detail) == (
        409,
        "Cannot do it",
        "the state says no",
    )
    assert refused.type_ == PROBLEM_BASE + "cannot" and refused.extra is None
    forbidden = from_problem(Forbidden("not yours"))
    assert (forbidden.status_code, forbidden.type_) == (403, PROBLEM_BASE + "forbidden")
    busy = from_problem(Unavailable("contention"))
    assert (busy.status_code, busy.title, busy.type_) == (503, "Busy", PROBLEM_BASE + "busy")
    assert busy.headers == {"Retry-After": "1"}


def test_every_kind_is_a_problem() -> None:
    assert all(
        issubclass(k, Problem) for k in (NotFound, Invalid, Forbidden, Conflict, Unavailable)
    )
