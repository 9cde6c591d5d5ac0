"""Project scope as a table over the HTTP spec (issue 15, section 1), over real HTTP.

The operations come from `openapi/openapi.json`: every one that names a project (a `project`
path or query parameter, or a `project` / `projects` property of its request body) is asked
for a project outside the token's list, for its own, with the project named twice, and with
the project named in a place the operation does not take it from. A new endpoint that names a
project is covered without editing this file; if it takes a body, the test fails until
`EXAMPLE_BODIES` has one for it. Every other operation must be listed in `PROJECT_LESS` with
the reason it reaches no project's data (`test_every_operation_is_classified`).

Rule held here: a request names its project at most once, in the one place its operation
takes it from; that one value is what is authorized and what the handler uses. Anything
ambiguous is a 400 naming `project`; a project outside the token's list is a 403 that
changes nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import msgspec

from tests.conftest import TEST_CARD, Api, event

SPEC = json.loads((Path(__file__).resolve().parents[2] / "openapi" / "openapi.json").read_text())
METHODS = ("get", "put", "post", "delete", "patch")

# Operations that name no project, and why that is safe. Keyed "METHOD /path" as in the spec.
PROJECT_LESS: dict[str, str] = {
    "GET /healthz": "liveness: no token, no data",
    "GET /readyz": "readiness: no token, no data",
    "POST /v1/analysis/checkpoint-interval": "pure computation on the body; no ledger data",
    "POST /v1/analysis/storage-lifecycle": "pure computation on the body; no ledger data",
    "GET /v1/projects": "lists only the token's projects "
    "(test_auth.py::test_project_list_shows_only_the_token_scope)",
    "GET /v1/rate-cards": "rate cards are global price lists, not a project's data",
    "GET /v1/rate-cards/{name}": "rate cards are global price lists, not a project's data",
    "PUT /v1/rate-cards/{name}": "global: only an admin for every project may change one "
    "(test_authz_admin.py::test_scoped_admin_cannot_change_rate_cards)",
    "GET /v1/tokens": "lists only tokens within the caller's projects "
    "(test_authz_admin.py::test_scoped_admin_lists_and_revokes_only_tokens_within_its_projects)",
    "DELETE /v1/tokens/{token_id}": "only tokens within the caller's projects "
    "(test_authz_admin.py::test_scoped_admin_lists_and_revokes_only_tokens_within_its_projects)",
    "GET /v1/webhooks": "lists only webhooks limited to the caller's projects "
    "(test_authz_admin.py::test_scoped_admin_cannot_see_or_delete_other_webhooks)",
    "DELETE /v1/webhooks/{webhook_id}": "only webhooks limited to the caller's projects "
    "(test_authz_admin.py::test_scoped_admin_cannot_see_or_delete_other_webhooks)",
    "POST /v1/webhooks/{webhook_id}/test": "sends a made-up sample, no project's data, and only "
    "to webhooks limited to the caller's projects "
    "(test_authz_admin.py::test_scoped_admin_cannot_see_or_delete_other_webhooks)",
    "POST /v1/bills/imports": "a bill spans every project it maps to: only an admin for every "
    "project may import one (test_bills.py::test_only_an_admin_for_every_project_imports)",
}


def _plan(project: str) -> dict[str, Any]:
    now = datetime.now(UTC)
    return {
        "project": project,
        "name": "matrix",
        "rate_card": "default",
        "currency": "USD",
        "window_start": (now - timedelta(days=5)).isoformat(),
        "window_end": (now + timedelta(days=5)).isoformat(),
        "stages": [{"stage": "pretrain", "resources": [{"sku": "gpu.h100.hour", "quantity": "4"}]}],
    }


# A valid body for every operation that takes one and names a project, given that project.
# (An operation that names its project in the path or query gets the same body either way.)
EXAMPLE_BODIES: dict[str, Callable[[str], Any]] = {
    "POST /v1/budgets": lambda p: {"project": p, "name": "matrix", "amount": "100"},
    "POST /v1/plans": _plan,
    "POST /v1/plans/estimate": _plan,
    "POST /v1/events": lambda p: event("matrix-1", project=p),
    "POST /v1/tokens": lambda p: {"role": "read", "projects": [p]},
    "POST /v1/webhooks": lambda p: {"url": "http://127.0.0.1:9/matrix", "projects": [p]},
    "DELETE /v1/events/rejected": lambda p: {"ids": ["none"]},
    "POST /v1/events/rejected/replay": lambda p: {"ids": ["none"]},
    "POST /v1/experiments/progress": lambda p: {
        "experiment": "e1",
        "metric": "eval_loss",
        "value": "2.5",
    },
    "POST /v1/plans/{plan_id}/progress": lambda p: {"tokens_done": 1},
    "PUT /v1/projects/{project}": lambda p: {"attribution_tags": ["team"]},
    "PUT /v1/reports/waste/policy": lambda p: {},
    "POST /v1/evaluations": lambda p: {
        "project": p,
        "results": [{"id": "m1", "experiment": "e1", "benchmark": "gsm8k", "value": "1.5"}],
    },
    "PUT /v1/evaluations/settings": lambda p: {"baseline": "e1"},
    # Typed-in figures with the project named: a measured request reads that project.
    "POST /v1/analysis/data-strategy": lambda p: {
        "project": p,
        "corpus_tokens": 1000,
        "flat_keep_share": "0.5",
        "upsampling_curve": [{"share": "1", "repeats": "1"}],
        "training_cost_per_token": "0.001",
        "scoring_cost_per_token": "0.0001",
        "flat_tokens_needed": 500,
        "upsampled_tokens_needed": 400,
    },
    "POST /v1/analysis/domain-mix": lambda p: {
        "project": p,
        "cost_per_run": "10",
        "rework_cost": "50",
        "general_floor": "60",
        "general_domains": ["general_qa"],
        "mixes": [{"name": "m", "scores": {"general_qa": "70"}}],
    },
    "POST /v1/webhooks/deliveries/redeliver": lambda p: {"ids": ["none"]},
    "PUT /v1/bills/mappings/{project}": lambda p: {
        "match": [{"tag_key": "project", "tag_value": p}]
    },
}


def _cloud_event(project: str) -> dict[str, Any]:
    usage = event("matrix-1", project=project)
    return {
        "specversion": "1.0",
        "id": usage["id"],
        "source": "//matrix",
        "type": "dev.trainledger.usage",
        "time": usage["time"],
        "subject": project,
        "data": {"sku": usage["sku"], "quantity": usage["quantity"]},
    }


# The ingest operations whose events name their project where the body's schema cannot show
# it (a CloudEvent's `subject`, an NDJSON line, a msgpack map): each one's content type and a
# body of one event in the project. They name a project in their body, as `POST /v1/events`.
ENCODED_BODIES: dict[str, tuple[str, Callable[[str], bytes]]] = {
    "POST /v1/events/cloudevents": (
        "application/cloudevents-batch+json",
        lambda p: json.dumps([_cloud_event(p)]).encode(),
    ),
    "POST /v1/events/cloudevent": (
        "application/cloudevents+json",
        lambda p: json.dumps(_cloud_event(p)).encode(),
    ),
    "POST /v1/events/ndjson": (
        "application/x-ndjson",
        lambda p: json.dumps(event("matrix-1", project=p)).encode() + b"\n",
    ),
    "POST /v1/events/msgpack": (
        "application/msgpack",
        lambda p: msgspec.msgpack.encode([event("matrix-1", project=p)]),
    ),
}
INGEST_OPERATIONS = {"POST /v1/events", *ENCODED_BODIES}
MEDIA_BY_PATH = {key.split(" ", 1)[1]: media for key, (media, _) in ENCODED_BODIES.items()}


def _resolve(schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = SPEC["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return schema


def _body_names(schema: dict[str, Any], depth: int = 0) -> str | None:
    """'project' or 'projects' when the body (an object, or an array of them, or one of
    several such) has that property at its top level."""
    schema = _resolve(schema)
    if depth > 3:
        return None
    for key in ("oneOf", "anyOf", "allOf"):
        for sub in schema.get(key, []):
            found = _body_names(sub, depth + 1)
            if found:
                return found
    if schema.get("type") == "array" and "items" in schema:
        return _body_names(schema["items"], depth + 1)
    props = schema.get("properties", {})
    for name in ("project", "projects"):
        if name in props:
            return name
    return None


@dataclass(frozen=True)
class Op:
    method: str
    path: str
    in_path: bool
    in_query: bool
    in_body: str | None  # "project", "projects" or None
    has_body: bool
    query: tuple[tuple[str, bool], ...]  # (name, is an array) of every query parameter
    needs_token: bool

    @property
    def key(self) -> str:
        return f"{self.method} {self.path}"

    @property
    def names_project(self) -> bool:
        return self.in_path or self.in_query or self.in_body is not None


def _ops() -> list[Op]:
    ops = []
    for path, item in SPEC["paths"].items():
        for method, op in item.items():
            if method not in METHODS:
                continue
            params = op.get("parameters", [])
            bodies = op.get("requestBody", {}).get("content", {})
            names = sorted(
                {n for c in bodies.values() if "schema" in c if (n := _body_names(c["schema"]))}
            )
            if f"{method.upper()} {path}" in ENCODED_BODIES:
                names = ["project"]
            ops.append(
                Op(
                    method=method.upper(),
                    path=path,
                    in_path=any(p["name"] == "project" and p["in"] == "path" for p in params),
                    in_query=any(p["name"] == "project" and p["in"] == "query" for p in params),
                    in_body=names[0] if names else None,
                    has_body=bool(bodies),
                    query=tuple(
                        (p["name"], _resolve(p.get("schema", {})).get("type") == "array")
                        for p in params
                        if p["in"] == "query"
                    ),
                    needs_token=op.get("security", SPEC.get("security")) != [],
                )
            )
    return ops


OPS = _ops()
PROJECT_OPS = [op for op in OPS if op.names_project]


def _request(
    op: Op,
    project: str,
    *,
    query: list[tuple[str, str]] | None = None,
    body_project: str | None = None,
) -> tuple[str, str, list[tuple[str, str]], bytes | None]:
    """(method, url, query, body) asking `op` about `project`, in the place it takes it."""
    path = op.path.replace("{project}", project)
    while "{" in path:  # any other path parameter: an id that does not exist
        start = path.index("{")
        path = path[:start] + "none" + path[path.index("}", start) + 1 :]
    params = [("project", project)] if op.in_query else []
    params += query or []
    body = None
    if op.key in ENCODED_BODIES:
        return op.method, path, params, ENCODED_BODIES[op.key][1](project)
    if op.has_body:
        assert op.key in EXAMPLE_BODIES, f"add an example body for {op.key} to EXAMPLE_BODIES"
        body = EXAMPLE_BODIES[op.key](project)
        if body_project is not None:
            body = dict(body, project=body_project)
    content = None if body is None else json.dumps(body).encode()
    return op.method, path, params, content


async def _send(
    c: httpx.AsyncClient, request: tuple[str, str, list[tuple[str, str]], bytes | None]
) -> httpx.Response:
    method, url, params, content = request
    media = MEDIA_BY_PATH.get(url, "application/json")
    headers = {"content-type": media} if content is not None else {}
    return await c.request(method, url, params=params, content=content, headers=headers)


def _field_of(r: httpx.Response) -> str | None:
    try:
        body = r.json()
    except ValueError:
        return None
    if not isinstance(body, dict):
        return None
    if body.get("field"):
        return str(body["field"])
    errors = body.get("errors") or [{}]
    return str(errors[0].get("field")) if isinstance(errors[0], dict) else None


def _refused_for_scope(r: httpx.Response) -> bool:
    return r.status_code == 403 and r.headers.get("content-type", "").startswith(
        "application/problem+json"
    )


def _ambiguous(r: httpx.Response) -> bool:
    return r.status_code == 400 and _field_of(r) in ("project", "$.project")


def _not_refused(r: httpx.Response) -> bool:
    # 404 (an id that does not exist) and 409 are answers about the project; a refusal or a
    # malformed example is not.
    return r.status_code not in (400, 401, 403, 405, 415, 422) and r.status_code < 500


async def _scoped_admin(api: Api, projects: list[str]) -> str:
    return await api.token("admin", projects)


async def _seed(api: Api) -> None:
    """Data in both projects, so a leak or a write to the other one would show."""
    async with api.client() as c:
        r = await c.put("/v1/rate-cards/default", json=TEST_CARD)
        assert r.status_code == 201, r.text
        for p in ("pa", "pb"):
            batch = [event(f"{p}-1", project=p), event(f"{p}-bad", sku="no.such.sku", project=p)]
            r = await c.post("/v1/events", json=batch)
            assert r.status_code == 200 and r.json()["accepted"] == 1, r.text
            # Far above the spend: no alert, so no delivery starts in the background.
            r = await c.post("/v1/budgets", json={"project": p, "name": "b", "amount": "1000000"})
            assert r.status_code == 201, r.text
            r = await c.post("/v1/plans", json=_plan(p))
            assert r.status_code == 201, r.text
            r = await c.post(
                "/v1/webhooks", json={"url": "http://127.0.0.1:9/seed", "projects": [p]}
            )
            assert r.status_code == 201, r.text


async def _snapshot(api: Api) -> dict[str, Any]:
    """What the unscoped admin sees of both projects and of the global lists: a refused
    request must change none of it. (Read through the API, not the keys: background folding
    and delivery retries move keys without changing what they mean.)"""
    seen: dict[str, Any] = {}
    async with api.client() as c:
        for p in ("pa", "pb"):
            for url in (
                "/v1/costs/summary",
                "/v1/costs",
                "/v1/events/rejected",
                "/v1/budgets",
                "/v1/plans",
                "/v1/reports/waste/policy",
                "/v1/alerts",
            ):
                r = await c.get(url, params={"project": p})
                assert r.status_code == 200, r.text
                seen[f"{url}?{p}"] = r.json()
            r = await c.get(f"/v1/projects/{p}")
            seen[f"/v1/projects/{p}"] = r.json()
            r = await c.get("/v1/webhooks/deliveries", params={"project": p})
            seen[f"deliveries?{p}"] = r.json()["total"]
        for url in ("/v1/projects", "/v1/webhooks", "/v1/tokens", "/v1/rate-cards"):
            seen[url] = (await c.get(url)).json()
    return seen


def _changes(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    return sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))


def test_every_operation_is_classified() -> None:
    """Each operation either names a project (and is in the table below) or is listed as
    project-less with a reason; no stale entry, no operation in both."""
    keys = {op.key for op in OPS}
    named = {op.key for op in PROJECT_OPS}
    unclassified = sorted(keys - named - set(PROJECT_LESS))
    assert not unclassified, (
        f"{unclassified} name no project: list them in PROJECT_LESS with the reason they "
        "reach no project's data, or make them name their project"
    )
    assert not named & set(PROJECT_LESS), sorted(named & set(PROJECT_LESS))
    assert not set(PROJECT_LESS) - keys, f"stale PROJECT_LESS entries: {set(PROJECT_LESS) - keys}"
    # The table does cover the operations the issue lists (a guard against a spec reader
    # that silently finds nothing).
    for key in (
        "GET /v1/costs",
        "GET /v1/costs/summary",
        "GET /v1/export/focus",
        "DELETE /v1/events/rejected",
        "POST /v1/budgets",
        "POST /v1/plans",
        "POST /v1/events",
        "POST /v1/webhooks",
        "POST /v1/tokens",
        "PUT /v1/projects/{project}",
        "POST /v1/projects/{project}/rebuild",
        "POST /v1/experiments/progress",
    ):
        assert key in named, key


def test_every_project_operation_with_a_body_has_an_example() -> None:
    missing = [
        op.key
        for op in PROJECT_OPS
        if op.has_body and op.key not in EXAMPLE_BODIES and op.key not in ENCODED_BODIES
    ]
    assert not missing, f"add an example body for {missing} to EXAMPLE_BODIES"
    stale = (set(EXAMPLE_BODIES) | set(ENCODED_BODIES)) - {op.key for op in PROJECT_OPS}
    assert not stale, f"stale EXAMPLE_BODIES or ENCODED_BODIES entries: {stale}"


async def test_a_scoped_token_never_reaches_another_project(api: Api) -> None:
    """pa's admin token, asked about pb by every operation: 403, and nothing changed."""
    await _seed(api)
    token = await _scoped_admin(api, ["pa"])
    before = await _snapshot(api)
    failures = []
    async with api.client(token) as c:
        for op in PROJECT_OPS:
            r = await _send(c, _request(op, "pb"))
            if not _refused_for_scope(r):
                failures.append(f"{op.key}: {r.status_code} {r.text[:200]}")
    assert not failures, "\n".join(failures)
    assert not _changes(before, await _snapshot(api))


async def test_a_scoped_token_reaches_its_own_project(api: Api) -> None:
    """The same requests about pa, by pa's token and by an unscoped one: not refused (the
    table's bodies are valid, and the scope check refuses only what it should)."""
    await _seed(api)
    token = await _scoped_admin(api, ["pa"])
    failures = []
    for who in (token, api.admin_token):
        async with api.client(who) as c:
            for op in PROJECT_OPS:
                for project in ("pa",) if who == token else ("pa", "pb"):
                    r = await _send(c, _request(op, project))
                    if not _not_refused(r):
                        failures.append(f"{op.key} {project}: {r.status_code} {r.text[:200]}")
    assert not failures, "\n".join(failures)


async def test_a_project_named_twice_is_400(api: Api) -> None:
    """A repeated `?project=` in any order, or the path's or body's project and a
    `?project=` as well, or a body `project` where the operation takes it from the path or
    query: 400 naming `project`, whoever asks and whatever the two values are."""
    await _seed(api)
    scoped = await _scoped_admin(api, ["pa"])
    before = await _snapshot(api)
    failures = []
    for who in (scoped, api.admin_token):
        async with api.client(who) as c:
            for op in PROJECT_OPS:
                attempts: list[tuple[str, tuple[str, str, list[tuple[str, str]], bytes | None]]]
                attempts = []
                for first, second in (("pa", "pb"), ("pb", "pa"), ("pa", "pa")):
                    # A second `?project=`: a repeat where the operation takes it from the
                    # query, a conflict where it takes it from the path or the body.
                    twice = _request(op, first, query=[("project", second)])
                    attempts.append((f"{first}+?project={second}", twice))
                    if op.has_body and op.in_body != "project":
                        attempts.append(
                            (f"{first}+body {second}", _request(op, first, body_project=second))
                        )
                for label, request in attempts:
                    r = await _send(c, request)
                    if not _ambiguous(r):
                        failures.append(f"{op.key} [{label}]: {r.status_code} {r.text[:200]}")
    assert not failures, "\n".join(failures)
    assert not _changes(before, await _snapshot(api))


async def test_a_body_project_must_be_one_string(api: Api) -> None:
    """A list (or any non-string) where one project is named: 400, never a partial check."""
    await _seed(api)
    token = await _scoped_admin(api, ["pa"])
    failures = []
    async with api.client(token) as c:
        for op in PROJECT_OPS:
            if op.in_body != "project" or op.key in INGEST_OPERATIONS:
                continue  # events: each event's project is checked by the ingest (per event)
            request = _request(op, "pa")
            method, url, params, content = request
            assert content is not None
            body = dict(json.loads(content), project=["pa", "pb"])
            r = await _send(c, (method, url, params, json.dumps(body).encode()))
            if not _ambiguous(r):
                failures.append(f"{op.key}: {r.status_code} {r.text[:200]}")
    assert not failures, "\n".join(failures)


async def test_a_body_naming_its_project_twice_is_400(api: Api) -> None:
    """`{"project": "pa", …, "project": "pb"}` (or spelled with an escape): decoders keep the
    last key silently, so the body is ambiguous: 400 naming `project`, in either order."""
    await _seed(api)
    token = await _scoped_admin(api, ["pa"])
    before = await _snapshot(api)
    failures = []
    async with api.client(token) as c:
        for op in PROJECT_OPS:
            if op.in_body != "project" or op.key in INGEST_OPERATIONS:
                continue  # events: each event's project is checked by the ingest (per event)
            method, url, params, content = _request(op, "pa")
            assert content is not None
            text = content.decode()
            assert text.startswith("{")
            for second, key in (("pb", "project"), ("pa", "project"), ("pb", "proj\\u0065ct")):
                body = f'{{"{key}": "{second}", {text[1:]}'
                r = await _send(c, (method, url, params, body.encode()))
                if not _ambiguous(r):
                    failures.append(f"{op.key} [{key}={second}]: {r.status_code} {r.text[:200]}")
    assert not failures, "\n".join(failures)
    assert not _changes(before, await _snapshot(api))


async def test_project_less_operations_refuse_a_project(api: Api) -> None:
    """An operation that names no project takes no `?project=` either: 400, not ignored."""
    token = await _scoped_admin(api, ["pa"])
    failures = []
    async with api.client(token) as c:
        for op in OPS:
            if op.names_project or not op.needs_token:
                continue
            url = op.path.replace("{name}", "default").replace("{token_id}", "none")
            r = await c.request(
                op.method, url.replace("{webhook_id}", "none"), params=[("project", "pb")]
            )
            if not _ambiguous(r):
                failures.append(f"{op.key}: {r.status_code} {r.text[:200]}")
    assert not failures, "\n".join(failures)


async def test_a_single_valued_parameter_given_twice_is_400(api: Api) -> None:
    """Any query parameter that takes one value (`from`, `to`, `limit`, ...), given twice:
    400 naming it, before anything is read or written."""
    token = await _scoped_admin(api, ["pa"])
    failures = []
    checked = 0
    async with api.client(token) as c:
        for op in OPS:
            for name, is_array in op.query:
                if name == "project" or is_array:
                    continue
                checked += 1
                method, url, params, content = _request(op, "pa")
                r = await _send(c, (method, url, [*params, (name, "1"), (name, "2")], content))
                if not (r.status_code == 400 and _field_of(r) == name):
                    failures.append(f"{op.key} ?{name} twice: {r.status_code} {r.text[:200]}")
    assert checked > 10
    assert not failures, "\n".join(failures)


async def test_the_issues_reproductions(api: Api) -> None:
    """Issue 15's examples: a read token for pa asking pa&pb, an ingest token for pa deleting
    pa&pb's dead letters. Both 400; pb's dead letter is still there."""
    await _seed(api)
    read = await api.token("read", ["pa"])
    ingest = await api.token("ingest", ["pa"])
    async with api.client(read) as c:
        r = await c.get("/v1/costs/summary", params=[("project", "pa"), ("project", "pb")])
        assert _ambiguous(r), r.text
        r = await c.get("/v1/costs/summary", params=[("project", "pb"), ("project", "pa")])
        assert _ambiguous(r), r.text
        # The second name percent-encoded, or with the value empty: still the same name twice.
        for raw in ("project=pa&%70roject=pb", "project=pa&project=", "project=&project=pb"):
            r = await c.get(f"/v1/costs/summary?{raw}")
            assert _ambiguous(r), (raw, r.text)
    async with api.client() as admin:
        r = await admin.get("/v1/events/rejected", params={"project": "pb"})
        ids = [item["id"] for item in r.json()["items"]]
        assert len(ids) == 1, r.text
    async with api.client(ingest) as c:
        r = await c.request(
            "DELETE",
            "/v1/events/rejected",
            params=[("project", "pa"), ("project", "pb")],
            json={"ids": ids},
        )
        assert _ambiguous(r), r.text
        r = await c.request(
            "DELETE", "/v1/events/rejected", params={"project": "pb"}, json={"ids": ids}
        )
        assert r.status_code == 403, r.text
    async with api.client() as admin:
        r = await admin.get("/v1/events/rejected", params={"project": "pb"})
        assert [item["id"] for item in r.json()["items"]] == ids


async def test_dashboard_page_takes_its_project_from_the_path_only(api: Api) -> None:
    """`/ui/{project}` (not in the spec): another project in the query is a 400, another in
    the path a 403."""
    await _seed(api)
    token = await api.token("read", ["pa"])
    async with api.client(token) as c:
        assert (await c.get("/ui/pa")).status_code == 200
        assert _ambiguous(await c.get("/ui/pa", params={"project": "pb"}))
        assert (await c.get("/ui/pb")).status_code == 403
