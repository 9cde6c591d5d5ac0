"""The API conventions (docs/development.md, "API conventions"), held for every operation of
the committed document, so that an endpoint added later is held to them without editing this
file: an operationId in lowerCamelCase that starts with its HTTP method, one tag from the
top-level list (each described), a summary and a description, an example for every request
body that is not binary and every required parameter, described schemas, problem details
with `Retry-After` where a client must wait, and a line in docs/reference/api.md."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

SPEC: dict[str, Any] = json.loads(
    (Path(__file__).resolve().parents[2] / "openapi" / "openapi.json").read_text()
)
METHODS = ("get", "put", "post", "delete", "patch")
OPERATIONS = [
    (method, path, op)
    for path, item in SPEC["paths"].items()
    for method, op in item.items()
    if method in METHODS
]
IDS = [f"{method.upper()} {path}" for method, path, _ in OPERATIONS]


def test_there_are_operations() -> None:
    assert len(OPERATIONS) >= 40  # a parametrisation over nothing would pass silently


def test_operation_ids_are_unique() -> None:
    ids = [op.get("operationId") for _, _, op in OPERATIONS]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)


def test_every_tag_is_described() -> None:
    tags = SPEC.get("tags", [])
    assert tags, "the top-level tags list is empty"
    for tag in tags:
        assert tag.get("description", "").strip(), tag
    used = {t for _, _, op in OPERATIONS for t in op.get("tags", [])}
    assert {t["name"] for t in tags} == used, "a tag without operations, or one not listed"


@pytest.mark.parametrize(("method", "path", "op"), OPERATIONS, ids=IDS)
def test_operation_follows_the_conventions(method: str, path: str, op: dict[str, Any]) -> None:
    operation_id = op.get("operationId", "")
    assert re.fullmatch(method + r"[A-Z][A-Za-z0-9]*", operation_id), (
        f"operationId {operation_id!r}: lowerCamelCase, the HTTP method then a noun "
        f"({method}Costs, {method}RateCard)"
    )
    tags = op.get("tags", [])
    assert len(tags) == 1 and tags[0] in {t["name"] for t in SPEC.get("tags", [])}, tags
    assert op.get("summary", "").strip(), "no summary"
    assert len(op.get("description", "").strip()) >= 20, "no description"
    for media, content in op.get("requestBody", {}).get("content", {}).items():
        schema = content.get("schema", {})
        if schema.get("format") == "binary" and media != "application/x-ndjson":
            continue  # no text can show a binary body; its description says what it holds
        assert "example" in content or "examples" in content, f"{media} body has no example"
    for parameter in op.get("parameters", []):
        if parameter.get("required"):
            assert "example" in parameter or "examples" in parameter, (
                f"parameter {parameter['name']!r} has no example (PARAMETER_EXAMPLES)"
            )


@pytest.mark.parametrize(("method", "path", "op"), OPERATIONS, ids=IDS)
def test_errors_are_problems_and_say_when_to_retry(
    method: str, path: str, op: dict[str, Any]
) -> None:
    for code, response in op["responses"].items():
        if int(code) < 400:
            continue
        assert set(response.get("content", {})) == {"application/problem+json"}, code
        if code in ("429", "503"):
            assert "Retry-After" in response.get("headers", {}), code


def test_every_schema_is_described() -> None:
    undescribed = [
        name
        for name, schema in SPEC["components"]["schemas"].items()
        if not schema.get("description", "").strip()
    ]
    assert not undescribed, f"give these a docstring (or a description): {undescribed}"


def test_every_operation_is_in_the_api_reference() -> None:
    reference = (Path(__file__).resolve().parents[2] / "docs" / "reference" / "api.md").read_text()
    missing = [
        op["operationId"] for _, _, op in OPERATIONS if f"`{op['operationId']}`" not in reference
    ]
    assert not missing, f'list these in docs/reference/api.md, "Operations and tags": {missing}'
