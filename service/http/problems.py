"""RFC 9457 problem details: every error answer names the field and the reason."""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from litestar.exceptions import ClientException, ValidationException
from litestar.plugins.problem_details import ProblemDetailsException

from ..errors import OUTCOME_UNKNOWN, Problem
from ..storage.connection import ReplicationTimeout

__all__ = ["OUTCOME_UNKNOWN", "from_problem", "invalid", "problem", "storage_unavailable"]

PROBLEM_BASE = "https://trainledger.dev/problems/"


def problem(
    status: int,
    title: str,
    detail: str,
    *,
    kind: str,
    errors: list[dict[str, Any]] | None = None,
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> ProblemDetailsException:
    body: dict[str, Any] = dict(extra)
    if errors is not None:
        body["errors"] = errors
    return ProblemDetailsException(
        status_code=status,
        title=title,
        detail=detail,
        type_=PROBLEM_BASE + kind,
        headers=headers,
        extra=body or None,
    )


def from_problem(exc: Problem) -> ProblemDetailsException:
    """The one handler of every feature error (`service.errors`): its kind's status, title
    and type, its detail, errors, extra members and headers, as an RFC 9457 problem."""
    return problem(
        exc.status,
        exc.title,
        exc.problem_detail(),
        kind=exc.kind,
        errors=exc.problem_errors(),
        headers=exc.problem_headers(),
        **exc.problem_members(),
    )


def invalid(field: str, reason: str, status: int = 422) -> ProblemDetailsException:
    return problem(
        status,
        "Invalid request",
        f"{field}: {reason}",
        kind="invalid-request",
        errors=[{"field": field, "reason": reason}],
    )


# Python name -> name on the wire of every query parameter whose differ (`from_time` is
# `from`): Litestar's validation errors name the Python one. Learned from the app's routes
# (`learn_query_names`, at its creation).
QUERY_NAMES: dict[str, str] = {}


def learn_query_names(route_handlers: Any) -> None:
    """Record the wire name of each aliased query parameter of these route handlers."""
    for handler in route_handlers:
        for name, parameter in handler.parsed_fn_signature.parameters.items():
            kwarg = parameter.kwarg_definition
            alias = getattr(kwarg, "query", None) or getattr(kwarg, "name", None)
            if isinstance(alias, str) and alias != name and getattr(kwarg, "header", None) is None:
                QUERY_NAMES[name] = alias


def from_validation(exc: ValidationException) -> ProblemDetailsException:
    """Litestar's own parameter and body validation, in the same shape as ours (a query
    parameter named as it is on the wire)."""
    errors = []
    for item in exc.extra if isinstance(exc.extra, list) else []:
        if isinstance(item, dict):
            field = str(item.get("key") or "")
            if item.get("source") == "query":
                field = QUERY_NAMES.get(field, field)
            if item.get("source") == "body":
                field = "$" + ("" if not field or field.startswith("[") else ".") + field
            errors.append({"field": str(field), "reason": str(item.get("message", ""))})
    detail = "; ".join(f"{e['field']}: {e['reason']}" for e in errors) or str(exc.detail)
    return problem(400, "Invalid request", detail, kind="invalid-request", errors=errors)


def from_client_error(exc: ClientException) -> ProblemDetailsException:
    """Litestar's own 4xx answers (a body that is not JSON, an unknown route, a method not
    allowed) in the same shape as ours; a 400 here is a body that could not be decoded."""
    if isinstance(exc, ValidationException):
        return from_validation(exc)
    detail = str(exc.detail)
    if exc.status_code == 400:
        return invalid("$", detail, status=400)
    phrase = HTTPStatus(exc.status_code).phrase
    return problem(
        exc.status_code, phrase, detail, kind=phrase.lower().replace(" ", "-"), headers=exc.headers
    )


def storage_unavailable(reason: str) -> ProblemDetailsException:
    return problem(
        503,
        "Storage unavailable",
        f"{reason}; {OUTCOME_UNKNOWN}",
        kind="storage-unavailable",
        headers={"Retry-After": "1"},
    )


def redis_unavailable(exc: Exception) -> ProblemDetailsException:
    """Redis cannot be reached, or a shard is failing over: the outcome is unknown, and the
    client should retry the same request."""
    if isinstance(exc, ReplicationTimeout):
        # Applied on the master, not yet on a replica: unacknowledged, and a retry is safe.
        return storage_unavailable(
            f"the write was not confirmed by a replica in time ({exc}); it is not acknowledged"
        )
    return storage_unavailable(f"the ledger's Redis cannot be reached ({type(exc).__name__})")
